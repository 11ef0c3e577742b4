"""`audit verify`'s check of the key directory against the store.

Crypto-shredding is only as good as the directory is honest: every live item (a pending
candidate, or a record not tombstoned that still holds a body) must have a well-formed key
file, and no item whose content ended may keep one. Only file names and headers are read, so
an auditor needs no root key. Orphans (a key file no row owns) open nothing committed and are
counted, not failed; the server removes them at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from engram_memory.contract.exceptions import KeyDirectoryInconsistent, KeyFileBroken
from engram_memory.crypto import keyfile
from engram_memory.crypto.keystore import KEY_SUFFIX, KeyStore


@dataclass(frozen=True)
class KeyDirectoryReport:
    key_files: int
    live_items: int
    orphans: int


def verify_key_directory(
    directory: Path,
    items: Iterable[tuple[str, str, bool]],
    promised: Iterable[tuple[str, str]] = (),
) -> KeyDirectoryReport:
    """Compare the key files under `directory` with the store's items.

    `items` are (scope_ref, item_id, live) for every candidate and record; `promised` the
    destructions promised and not yet carried out (a crash before the next start).

    Raises:
        KeyDirectoryInconsistent: a live item lacks a well-formed key file, or an ended
            item's key file (even a partly shredded one) survives.
    """
    files = {p.name: p for p in directory.glob(f"??/*{KEY_SUFFIX}")}
    pending = {KeyStore.file_name(scope, item) for scope, item in promised}
    missing = surviving = surviving_promised = live_count = 0
    owned: set[str] = set()
    for scope_ref, item_id, live in items:
        name = KeyStore.file_name(scope_ref, item_id)
        owned.add(name)
        path = files.get(name)
        if live:
            live_count += 1
            missing += path is None or not _well_formed(path)
        elif path is not None:
            surviving += 1
            surviving_promised += name in pending
    problems = []
    if missing:
        problems.append(f"{missing} live item(s) without a usable key file")
    if surviving:
        problems.append(f"{surviving} key file(s) of items whose content ended survive")
        if surviving_promised:
            problems.append(
                f"{surviving_promised} of them promised for destruction: a start of the "
                "server carries that out"
            )
    if problems:
        raise KeyDirectoryInconsistent("key directory: " + "; ".join(problems))
    return KeyDirectoryReport(len(files), live_count, len(files.keys() - owned))


def _well_formed(path: Path) -> bool:
    try:
        blob = path.read_bytes()
    except OSError:
        return False
    if keyfile.is_legacy(blob):
        return len(blob) > 1
    try:
        keyfile.read_header(blob)
    except KeyFileBroken:
        return False
    return True
