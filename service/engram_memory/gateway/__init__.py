"""The signing gateway: stock MCP clients in front, the unchanged engram-memory server behind.

A stock MCP client (desktop or team) cannot mint our signed invocation context; the gateway
does it for them. It is an MCP server exposing the upstream's six tools unchanged, and an MCP
client of the upstream (a child over stdio, or a running server over streamable HTTP). For
every upstream request it mints a fresh invocation context for the caller, and for a
destructive call a confirmation the human gave through MCP elicitation.

Who the caller is comes from the operator, never from the model: the configuration file in
stdio mode (one local user), a verified OAuth bearer token in HTTP mode (http.py, oauth.py).

Why this package may import only `contract`, `host`, `policy.yaml_source` and the MCP SDK
(an import-linter contract in pyproject.toml enforces it): the gateway must hold no state
that could diverge from the store and decide nothing the policy decides. It never opens the
store, never evaluates policy, never runs a tool; the upstream server verifies every token
exactly as it verifies a hand-written host's, so the gateway adds trust only where the
operator configured it. `policy.yaml_source` is the one exception: a pure YAML line mapper
(PyYAML only; `policy/__init__` is empty) shared so both configuration files report
problems as `file:line: field: message`.

Modules: config.py (the YAML file), caller.py (who a call runs for), audit_log.py (the
gateway's own hash-chained log), upstream.py (the SDK client), confirm.py (elicitation),
server.py (the SDK server), stdio.py (desktop mode), cli.py (`engram-memory gateway`).
"""
