"""How a setting's text is read: a `serve` flag over its `ENGRAM_` variable, and booleans.

A leaf module (it imports nothing of ours but the error type), so the HTTP settings can be
shared with the gateway, which must not import config.py (that one reaches the policy and
core modules the gateway is kept apart from).
"""

from __future__ import annotations

from collections.abc import Mapping

from engram_memory.contract.exceptions import ConfigurationError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def flag_or_env(flags: Mapping[str, str | None], env: Mapping[str, str], name: str) -> str | None:
    """The flag named like `name` without `ENGRAM_` (lower case) if given, else the variable."""
    value = flags.get(name.lower().removeprefix("engram_"))
    return value if value is not None else env.get(name)


# Flags not spelled like their variable.
_FLAG_SPELLING = {"memory_enabled": "--enable-memory"}


def given_as(flags: Mapping[str, str | None], name: str) -> str:
    """How the user gave setting `name`: its flag (`--root-key`) when the flag was given,
    else the variable (`ENGRAM_ROOT_KEY`), so a message names what the user typed."""
    key = name.lower().removeprefix("engram_")
    if flags.get(key) is None:
        return name
    return _FLAG_SPELLING.get(key, "--" + key.replace("_", "-"))


def boolean(text: str, name: str) -> bool:
    """Raises: ConfigurationError: `text` is not one of the true/false spellings."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigurationError(f"{name} must be true or false, got {text!r}")
