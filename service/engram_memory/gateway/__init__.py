"""The signing gateway: an MCP server stock clients talk to, minting the invocation context
(and human confirmations) for every call it forwards to engram-memory upstream."""
