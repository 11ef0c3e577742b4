"""`serve`: the agent service assembled (`app`) and wired to the MCP SDK's server side."""
