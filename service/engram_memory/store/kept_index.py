"""The file that carries the search index from a clean stop to the next start
(`<data>/index.kept`, sealed by core/index_keeping.py; this module only moves its bytes).

It lives only while no process has the store open for writing: every writable open takes
it (reads it when asked, then removes it) before anything can change the store, so a store
changed by any writer (an admin command, an import, a restore) never finds an index kept
before that change, and a record forgotten while the store runs is never in a kept index
(the next one is written at the clean stop, from the index that no longer holds it).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from engram_memory._internal.durable_files import fsync_directory
from engram_memory._internal.private_files import FILE_MODE

log = logging.getLogger("engram_memory.store")

FILE_NAME = "index.kept"
_TEMPORARY = FILE_NAME + ".tmp"


def take(data_dir: Path, *, read: bool) -> bytes | None:
    """The kept index's bytes when `read` and one is there, else None; it is removed either
    way (with a leftover temporary). A file that cannot be removed is logged: the next start
    then checks it against the store like any other (it is sealed and bound to the store)."""
    blob: bytes | None = None
    path = data_dir / FILE_NAME
    if read:
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            blob = None
        except OSError:
            log.warning("kept search index unreadable; the index loads from the store")
    removed = False
    for name in (FILE_NAME, _TEMPORARY):
        try:
            (data_dir / name).unlink()
            removed = True
        except FileNotFoundError:
            continue
        except OSError:
            log.warning("kept search index %s could not be removed", name)
    if removed:
        try:
            fsync_directory(data_dir)
        except OSError:
            log.warning("data directory could not be flushed after removing the kept index")
    return blob


def keep(data_dir: Path, blob: bytes) -> None:
    """Write `blob` as the kept index, durably (temporary, flush, rename, flush the
    directory): a crash leaves the old state or the new, never a torn file.

    Raises:
        OSError: the file could not be written (the next start loads from the store).
    """
    temporary = data_dir / _TEMPORARY
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        view = memoryview(blob)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, data_dir / FILE_NAME)
    fsync_directory(data_dir)
