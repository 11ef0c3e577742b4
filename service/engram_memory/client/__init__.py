"""The MCP SDK's client side: the reference host, the demo, connection diagnostics."""
