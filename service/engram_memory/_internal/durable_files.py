"""Durable file operations shared by the key store and the DuckDB store.

Destroying a secret means its bytes must not survive in freed blocks: a file is overwritten
in place and flushed before it is unlinked, and the directory entry change is flushed too.
(On copy-on-write or wear-levelled media the old physical blocks may still survive; the
per-item keys bound what such residue can reveal.)
"""

from __future__ import annotations

import os
from pathlib import Path

_CHUNK = 1 << 20


def fsync_path(path: Path) -> None:
    """Flush a file's (or, given a directory, its entries') data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    fsync_path(directory)


def shred(path: Path) -> bool:
    """Overwrite a file in place, flush, unlink, flush the directory; True once gone."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            zeros = b"\0" * min(size, _CHUNK)
            for offset in range(0, size, _CHUNK):
                os.pwrite(fd, zeros[: min(_CHUNK, size - offset)], offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        path.unlink()
        fsync_directory(path.parent)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
