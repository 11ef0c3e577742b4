"""Re-wrap item key files under a new scope epoch or a new root key, beside a live service.

A rotation first flips the state (a new epoch for the scope, or the new root id) so that every
key stored from then on is already wrapped the new way, then sweeps the shards: under each
shard's exclusive lock, a batch of files is re-wrapped (atomic replace, old bytes zeroed).
Readers and writers of the service hold the same lock shared, so they only ever see a whole
old or a whole new file, and a key destroyed meanwhile is never recreated (`replace` refuses a
file that is gone). The flip is recorded as pending in the state until a sweep finds nothing
left to re-wrap, so an interrupted rotation resumes where it stopped when run again.

Only item data keys are re-wrapped; sealed bodies and the blind index are not touched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from engram_memory._internal.durable_files import shred
from engram_memory.contract.exceptions import ConfigurationError, KeyFileBroken
from engram_memory.crypto import keyfile
from engram_memory.crypto.keys import RootKey, scope_tag
from engram_memory.crypto.keystore import (
    KEY_SUFFIX,
    TEMPORARY_SUFFIXES,
    KeyState,
    KeyStore,
    replace_and_shred_old,
)

Progress = Callable[[str], None]
# Key file name -> (scope, item) for headerless version 1 files, which name neither.
LegacyRefs = Mapping[str, tuple[str, str]]
BATCH = 32  # files re-wrapped per exclusive hold of a shard lock
ROOT_MARKER = "root"


@dataclass
class SweepReport:
    """What a sweep did. `unreadable` files could not be re-wrapped and keep it pending."""

    examined: int = 0
    rewrapped: int = 0
    upgraded: int = 0  # version 1 files rewritten as version 2
    already_current: int = 0
    destroyed_meanwhile: int = 0
    unreadable: int = 0
    leftovers_shredded: int = 0

    def as_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class RotationOutcome:
    kind: str  # "scope" | "root"
    resumed: bool
    root_key_id: str
    epoch: int | None
    complete: bool
    report: SweepReport


def rotate_scope_key(
    store: KeyStore,
    root: RootKey,
    scope_ref: str,
    progress: Progress,
    legacy: LegacyRefs | None = None,
    *,
    batch: int = BATCH,
) -> RotationOutcome:
    """Move one scope to a new epoch and re-wrap its key files (resumes a pending one).

    Raises:
        KeyStoreBusy: another rotation or backup is running.
        ConfigurationError: the store's root key is not in `root`.
        KeyStoreUnavailable: the state or a file could not be written.
    """
    tag = scope_tag(scope_ref)
    marker = f"scope:{tag.hex()}"
    with store.rotation_lock():
        with store.update_state() as state:
            _require_state_root(state, root)
            resumed = marker in state.pending
            if not resumed:
                state.epochs[tag.hex()] = state.epoch(tag) + 1
                state.pending.append(marker)
            epoch = state.epoch(tag)
        progress(f"rotate-scope-key: epoch {epoch}{' (resumed)' if resumed else ''}")
        report = sweep(store, root, progress, only_tag=tag, legacy=legacy, batch=batch)
        complete = _settle(store, marker, report)
        assert state.root_id is not None
        return RotationOutcome("scope", resumed, state.root_id.hex(), epoch, complete, report)


def rotate_root_key(
    store: KeyStore,
    new_root: RootKey,
    progress: Progress,
    legacy: LegacyRefs | None = None,
    *,
    batch: int = BATCH,
) -> RotationOutcome:
    """Make `new_root`'s current key the store's root and re-wrap every key file under it.

    `new_root` must still hold the store's present root (as a previous key) to unwrap.

    Raises:
        KeyStoreBusy: another rotation or backup is running.
        ConfigurationError: `new_root` does not hold the store's present root.
        KeyStoreUnavailable: the state or a file could not be written.
    """
    with store.rotation_lock():
        with store.update_state() as state:
            before = state.root_id
            _require_state_root(state, new_root)
            resumed = before == new_root.key_id and ROOT_MARKER in state.pending
            if before != new_root.key_id:
                state.root_id = new_root.key_id
                state.pending.append(ROOT_MARKER)
        progress(f"rotate-root-key: root {new_root.key_id.hex()}{' (resumed)' if resumed else ''}")
        report = sweep(store, new_root, progress, only_tag=None, legacy=legacy, batch=batch)
        complete = _settle(store, ROOT_MARKER, report)
        return RotationOutcome("root", resumed, new_root.key_id.hex(), None, complete, report)


def _require_state_root(state: KeyState, root: RootKey) -> None:
    if state.root_id is None:
        state.root_id = root.key_id
    elif state.root_id not in root.known_ids:
        raise ConfigurationError(
            f"the key ring does not hold the store's root key {state.root_id.hex()}"
        )


def _settle(store: KeyStore, marker: str, report: SweepReport) -> bool:
    if report.unreadable:
        return False
    with store.update_state() as state:
        state.pending = [p for p in state.pending if p != marker]
    return True


def sweep(
    store: KeyStore,
    root: RootKey,
    progress: Progress,
    *,
    only_tag: bytes | None,
    legacy: LegacyRefs | None,
    batch: int = BATCH,
) -> SweepReport:
    """Re-wrap every key file (of one scope tag, or all) not at the state's root and epoch.

    Raises:
        KeyStoreUnavailable: a file could not be replaced.
    """
    report = SweepReport()
    shards = store.shards()
    total = sum(1 for shard in shards for p in shard.iterdir() if p.name.endswith(KEY_SUFFIX))
    seen = 0
    for shard in shards:
        after, first = "", True
        while True:
            with store.shard_lock(shard, exclusive=True):
                if first:
                    report.leftovers_shredded += _shred_leftovers(shard)
                    first = False
                state = store.read_state()
                names = sorted(
                    p.name
                    for p in shard.iterdir()
                    if p.name.endswith(KEY_SUFFIX) and p.name > after
                )[:batch]
                for name in names:
                    _rewrap(shard / name, state, root, only_tag, legacy, report)
            if not names:
                break
            seen, after = seen + len(names), names[-1]
            progress(f"  key files {min(seen, total)}/{total}")
            if len(names) < batch:
                break
    progress(
        f"  done: {report.rewrapped + report.upgraded} re-wrapped, "
        f"{report.already_current} already current, {report.unreadable} unreadable"
    )
    return report


def _shred_leftovers(shard: Path) -> int:
    # Under the exclusive lock no write is in flight: any temporary is an interrupted one.
    leftovers = [p for p in shard.iterdir() if p.name.endswith(TEMPORARY_SUFFIXES)]
    return sum(1 for p in leftovers if shred(p))


def _rewrap(
    path: Path,
    state: KeyState,
    root: RootKey,
    only_tag: bytes | None,
    legacy: LegacyRefs | None,
    report: SweepReport,
) -> None:
    try:
        blob = path.read_bytes()
        digest = bytes.fromhex(path.name.removesuffix(KEY_SUFFIX))
    except FileNotFoundError:
        report.destroyed_meanwhile += 1
        return
    except ValueError:
        report.unreadable += only_tag is None
        return
    upgrade = keyfile.is_legacy(blob)
    try:
        if upgrade:
            ref = None if legacy is None else legacy.get(path.name)
            if ref is None:
                report.unreadable += only_tag is None  # a scope sweep cannot tell its scope
                return
            tag = scope_tag(ref[0])
            if only_tag is not None and tag != only_tag:
                return
            report.examined += 1
            data_key = keyfile.unwrap_legacy(root, blob, *ref)
        else:
            try:
                header = keyfile.read_header(blob)
            except KeyFileBroken:
                report.unreadable += only_tag is None  # a scope sweep cannot tell its scope
                return
            tag = header.tag
            if only_tag is not None and tag != only_tag:
                return
            report.examined += 1
            data_key = keyfile.unwrap(root, blob, digest)[1]  # also proves a current one opens
            if header == state.header_for(tag):
                report.already_current += 1
                return
    except KeyFileBroken:
        report.unreadable += 1
        return
    if not replace_and_shred_old(path, keyfile.wrap(root, state.header_for(tag), digest, data_key)):
        report.destroyed_meanwhile += 1
    elif upgrade:
        report.upgraded += 1
    else:
        report.rewrapped += 1
