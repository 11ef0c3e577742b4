"""Locating the pinned OPA binary (only bundle builds and `opa-spawn` need one)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from engram_memory.contract.exceptions import OpaBinaryNotFound

PINNED_OPA_VERSION = "1.22.4"
OPA_BIN_ENV = "ENGRAM_OPA_BIN"
CACHE_OPA_BIN = (
    Path.home() / ".cache" / "engram-memory" / "tools" / f"opa-v{PINNED_OPA_VERSION}" / "opa"
)


def find_opa_binary() -> Path | None:
    """Return the OPA binary to use, or None: $ENGRAM_OPA_BIN, else `opa` on PATH, else the
    pinned binary in the engram-memory tool cache."""
    configured = os.environ.get(OPA_BIN_ENV)
    if configured:
        path = Path(configured)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    on_path = shutil.which("opa")
    if on_path:
        return Path(on_path)
    if CACHE_OPA_BIN.is_file() and os.access(CACHE_OPA_BIN, os.X_OK):
        return CACHE_OPA_BIN
    return None


def require_opa_binary(opa_bin: Path | str | None = None) -> Path:
    """Return `opa_bin` (checked) or the located binary.

    Raises:
        OpaBinaryNotFound: nothing executable was found.
    """
    if opa_bin is not None:
        path = Path(opa_bin)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise OpaBinaryNotFound(f"OPA binary is not executable: {path}")
    found = find_opa_binary()
    if found is None:
        raise OpaBinaryNotFound(
            f"OPA binary not found: set {OPA_BIN_ENV}, put `opa` on PATH, or install "
            f"v{PINNED_OPA_VERSION} at {CACHE_OPA_BIN}"
        )
    return found


def opa_version(opa_bin: Path) -> str:
    """The `Version:` line of `opa version`, e.g. `1.22.4`.

    Raises:
        OpaBinaryNotFound: the binary does not run or prints no version.
    """
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, binary chosen by the operator
            [str(opa_bin), "version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise OpaBinaryNotFound(f"cannot run {opa_bin} version") from exc
    for line in completed.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise OpaBinaryNotFound(f"{opa_bin} version printed no version")
