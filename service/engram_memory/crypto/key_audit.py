"""`audit verify`'s check of the key directory against the store.

Crypto-shredding is only as good as the directory is honest: every live item (a pending
candidate, or a record not tombstoned that still holds a body) must have a well-formed key
file, and no item whose content ended may keep one. With the root key every file is
authenticated (AES-GCM over the wrapped key, the header and the file's own name), so a flipped
byte anywhere in it is found; an auditor without the root key gets the shape check (file
names and headers). Orphans (a key file no row owns) open nothing committed and are
counted, not failed; the server removes them at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from engram_memory.contract.exceptions import KeyDirectoryInconsistent, KeyFileBroken
from engram_memory.crypto import keyfile
from engram_memory.crypto.keys import RootKey
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
    root: RootKey | None = None,
) -> KeyDirectoryReport:
    """Compare the key files under `directory` with the store's items, and check each file.

    `items` are (scope_ref, item_id, live) for every candidate and record; `promised` the
    destructions promised and not yet carried out (a crash before the next start). With
    `root` every key file is authenticated (its header and wrapped key open under the ring,
    bound to its own name: a flipped byte anywhere fails); without it, its shape is checked.

    Raises:
        KeyDirectoryInconsistent: a live item lacks its key file, a key file is damaged
            (named, relative to the data directory), or an ended item's key file (even a
            partly shredded one) survives.
    """
    files = {p.name: p for p in directory.glob(f"??/*{KEY_SUFFIX}")}
    pending = {KeyStore.file_name(scope, item) for scope, item in promised}
    missing = surviving = surviving_promised = live_count = 0
    damaged: list[str] = []
    owned: set[str] = set()
    for scope_ref, item_id, live in items:
        name = KeyStore.file_name(scope_ref, item_id)
        owned.add(name)
        path = files.get(name)
        if live:
            live_count += 1
            if path is None:
                missing += 1
            elif not key_file_sound(path, root, (scope_ref, item_id)):
                damaged.append(shown_name(directory, path))
        elif path is not None:
            surviving += 1
            surviving_promised += name in pending
    # Orphans open nothing committed, but a damaged one is still a damaged file.
    damaged += [
        shown_name(directory, files[n])
        for n in sorted(files.keys() - owned)
        if not key_file_sound(files[n], root, None)
    ]
    problems = []
    if missing:
        problems.append(f"{missing} live item(s) without a key file")
    if damaged:
        shown = ", ".join(sorted(damaged)[:_NAMED])
        more = f" and {len(damaged) - _NAMED} more" if len(damaged) > _NAMED else ""
        problems.append(f"{len(damaged)} key file(s) damaged: {shown}{more}")
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


_NAMED = 20  # damaged files named in the report; the rest are counted


def shown_name(directory: Path, path: Path) -> str:
    """`keys/<shard>/<digest>.key`: the name is a digest of scope and item, no secret."""
    return f"{directory.name}/{path.parent.name}/{path.name}"


def key_file_sound(path: Path, root: RootKey | None, owner: tuple[str, str] | None) -> bool:
    """Whether the key file at `path` opens under `root` (its shape only without a root,
    and for a headerless version 1 file whose owner is unknown)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return False
    if keyfile.is_legacy(blob):
        if root is None or owner is None:
            return len(blob) > 1
        try:
            keyfile.unwrap_legacy(root, blob, *owner)
        except KeyFileBroken:
            return False
        return True
    try:
        if root is None:
            keyfile.read_header(blob)
        else:
            keyfile.unwrap(root, blob, bytes.fromhex(path.name.removesuffix(KEY_SUFFIX)))
    except (KeyFileBroken, ValueError):
        return False
    return True
