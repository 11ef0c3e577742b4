"""engram-memory: a governed memory service for AI agents, spoken over MCP."""

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The installed distribution's version, as both MCP servers (serve, gateway) announce it;
    "0.0.0" when run from a tree that is not installed."""
    try:
        return version("engram-memory")
    except PackageNotFoundError:
        return "0.0.0"
