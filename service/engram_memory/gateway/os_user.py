"""The stdio gateway's OS-user check (kept apart from stdio.py so `--check` and a refused
start need not import the MCP SDK)."""

from __future__ import annotations

import os
import pwd

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.gateway.config import StdioBinding


def effective_os_user() -> str:
    """The name of the effective user (the uid when it has no passwd entry)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_os_user(binding: StdioBinding) -> None:
    """Raises: ConfigurationError: the effective OS user is not `os_user` and the
    configuration does not allow another user."""
    actual = effective_os_user()
    if actual != binding.os_user and not binding.allow_other_os_user:
        raise ConfigurationError(
            f"stdio.os_user is {binding.os_user!r} but the gateway runs as {actual!r} "
            "(set stdio.allow_other_os_user: true for a service account)"
        )
