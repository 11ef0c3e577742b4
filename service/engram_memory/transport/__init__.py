"""The wire of both MCP servers (`serve` and the gateway).

JSON gate, stdio lines and streams, the HTTP guard, protocol checks and sessions, HTTP
settings, serving and graceful stop. Imports only `contract`, `host` and `_internal`: it
knows bytes, connections and limits, never the store, the tools or the policy.
"""
