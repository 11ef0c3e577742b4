"""What a DuckDB error means for the service: transient, out of space, or a damaged file.

The classification reads the driver's exception type and message once, at the store
boundary (store/database.py); nothing above it sees driver text. A damaged file is never
transient: retrying a checksum failure cannot succeed, and writing onto the file can only
spread the damage, so the store stops (fail-stop) instead of reporting a retriable error.
"""

from __future__ import annotations

import errno
import re
from enum import Enum
from pathlib import Path

import duckdb

from engram_memory.contract.exceptions import OpenFailure

# Substrings of DuckDB 2.x messages, lower-cased. "invalidated": DuckDB refuses every later
# statement after a fatal error; "corrupt"/"checksum": a block failed its checksum.
_DAMAGE_MARKERS = ("database has been invalidated", "corrupt", "checksum")
_NO_SPACE_MARKERS = ("no space left on device", "disk is full", "not enough space")
_LOCK_HOLDER = re.compile(r"conflicting lock is held in .*\(pid (\d+)\)", re.IGNORECASE)
_NOT_A_DATABASE = "not a valid duckdb database file"


class DriverFailure(Enum):
    TRANSIENT = "transient"
    NO_SPACE = "no space"
    DAMAGED = "damaged"


def classify(exc: BaseException) -> DriverFailure:
    """The kind of a driver (or file system) failure."""
    if isinstance(exc, duckdb.FatalException | duckdb.InternalException):
        # DuckDB invalidates the whole database after these; no later statement can succeed.
        return DriverFailure.DAMAGED
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DriverFailure.NO_SPACE
    text = str(exc).lower()
    if any(marker in text for marker in _DAMAGE_MARKERS):
        return DriverFailure.DAMAGED
    if any(marker in text for marker in _NO_SPACE_MARKERS):
        return DriverFailure.NO_SPACE
    return DriverFailure.TRANSIENT


def diagnose_open(exc: BaseException) -> tuple[OpenFailure, int | None]:
    """Why the store file could not be opened, and the lock holder's PID when DuckDB names it."""
    if isinstance(exc, NotADirectoryError | FileExistsError):
        return OpenFailure.NOT_A_DIRECTORY, None
    text = str(exc)
    holder = _LOCK_HOLDER.search(text)
    if holder is not None:
        return OpenFailure.HELD, int(holder.group(1))
    if "could not set lock" in text.lower():
        return OpenFailure.HELD, None
    if _NOT_A_DATABASE in text.lower():
        return OpenFailure.NOT_A_STORE, None
    if classify(exc) is DriverFailure.DAMAGED:
        return OpenFailure.DAMAGED, None
    return OpenFailure.OTHER, None


def describe_open_failure(path: Path, failure: OpenFailure, holder_pid: int | None) -> str:
    """One operator line naming the file and what is wrong with it (no driver text)."""
    if failure is OpenFailure.HELD:
        holder = f" (PID {holder_pid})" if holder_pid is not None else ""
        return f"store file {path} is held by another process{holder}; is another server using it?"
    if failure is OpenFailure.NOT_A_STORE:
        return f"{path} is not an engram-memory store (not a DuckDB database file)"
    if failure is OpenFailure.DAMAGED:
        return f"store file {path} is damaged (checksum or header check failed)"
    if failure is OpenFailure.NOT_A_DIRECTORY:
        return f"data directory {path.parent} is not a directory (a regular file is in the way)"
    return f"store file {path} cannot be opened"
