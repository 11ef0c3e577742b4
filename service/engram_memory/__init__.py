"""engram-memory: a governed memory service for AI agents, spoken over MCP."""


def package_version() -> str:
    """The installed distribution's version, as both MCP servers (serve, gateway) announce it;
    "0.0.0" when run from a tree that is not installed."""
    # Imported here, not at the top: every command (and `--help`) imports this package, and
    # importlib.metadata costs tens of milliseconds that only the servers' handshake needs.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("engram-memory")
    except PackageNotFoundError:
        return "0.0.0"
