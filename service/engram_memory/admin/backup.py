"""Encrypted backup of a data directory (SPEC §1.6, §8; restore is in admin/restore.py).

A backup is one archive (crypto/archive.py) whose plaintext stream is

    4-byte big-endian manifest length, manifest (canonical JSON), then every file's bytes in
    manifest order

and the manifest names the format and schema versions, each file with its size and SHA-256,
the audit and journal chain heads, the creation time and the root key id. The archive is
written encrypted as it streams: no plaintext copy ever touches the disk.

A backup is a point-in-time snapshot, taken while the server keeps serving: the store is
copied in one read transaction (MVCC: writers go on, nothing they commit meanwhile is in
it) into a temporary DuckDB file beside the store, shredded once archived; the chain heads
in the manifest are read in that same transaction. The archive then holds the key files of
exactly the items live at that snapshot point (pending candidates, records with a body),
copied while key destructions wait (crypto/destruction_pause.py), so every live item opens
after a restore and no key whose destruction was promised before the snapshot point travels
in it. An item forgotten after the snapshot point is in the archive, like anything a backup
holds: see below.

Crypto-shredding and backups: a key destroyed after a backup was made still lives in that
backup. Restore therefore refuses archives older than `max_age_days` (default 30), so that a
forgotten item is recoverable from a backup at most that long after `forget`; see
docs/operators/backup.md.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from engram_memory._internal.durable_files import fsync_directory, shred
from engram_memory.admin.maintenance import (
    Operator,
    Progress,
    authorize_operator,
    run_authorized,
)
from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    KeyStoreBusy,
    KeyStoreUnavailable,
    StoreUnavailable,
    ToolError,
)
from engram_memory.contract.types import format_instant
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.archive import ArchiveWriter
from engram_memory.crypto.keystore import KEYS_DIRECTORY, STATE_FILE
from engram_memory.store import inventory
from engram_memory.store.connection import DATABASE_FILE
from engram_memory.store.schema import SCHEMA_VERSION

log = logging.getLogger("engram_memory.admin.backup")

FORMAT = "engram-memory-backup"
# The temporary copy of the store a backup archives (shredded when done, or by the next).
SNAPSHOT_SUFFIX = ".backup-snapshot"
FORMAT_VERSION = 1
PIECE = 1 << 20
KEY_PATH = re.compile(r"keys/[0-9a-f]{2}/[0-9a-f]{64}\.key")  # fullmatch only
FIXED_PATHS = frozenset({DATABASE_FILE, DATABASE_FILE + ".wal", f"{KEYS_DIRECTORY}/{STATE_FILE}"})


def stepper(total: int) -> Callable[[int], bool]:
    """Report about every 5% of a long list, and its last item."""
    step = max(1, total // 20)
    return lambda index: index == total or index % step == 0


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while piece := handle.read(PIECE):
            digest.update(piece)
    return digest.hexdigest()


class _HashingSink:
    def __init__(self, sink: BinaryIO) -> None:
        self.sink, self.digest = sink, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.sink.write(data)


class BackupService:
    """Writes the encrypted archive of a point-in-time snapshot of a service's data
    directory, while it serves or not."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.data_dir = services.keys.directory.parent

    def backup(self, who: Operator, out: Path, progress: Progress) -> dict[str, JsonValue]:
        """Authorize (`maintain` in every scope of the store), archive, audit.

        Raises:
            ToolError: UNAUTHORIZED; STORE_UNAVAILABLE when a rotation, compaction or other
                backup runs, the snapshot fails, or the archive cannot be written.
        """

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            with self.services.database.transaction() as tx:
                scopes = inventory.scopes(tx)
            for scope_ref in (s for s in scopes if s != ctx.scope_ref):
                authorize_operator(ctx, audit, who, "maintain", "backup", scope_ref)
            try:
                with self.services.keys.rotation_lock():
                    result = self._write(out, progress)
            except KeyStoreBusy as exc:
                raise ToolError(ErrorCode.STORE_UNAVAILABLE, "a rotation runs") from exc
            detail = (
                f"archive_sha256={result['archive_sha256']} files={result['files']} "
                f"root_key_id={result['root_key_id']}"
            )
            with self.services.database.transaction() as tx:
                steps.audit_in_transaction(tx, ctx, audit, "ok", detail)
            return ToolOutcome.succeeded(result, audit)

        return run_authorized(self.services, who, "backup", "maintain", act)

    def _write(self, out: Path, progress: Progress) -> dict[str, JsonValue]:
        snapshot = self.data_dir / (DATABASE_FILE + SNAPSHOT_SUFFIX)
        _shred_snapshot(snapshot)  # a leftover of an interrupted backup
        try:
            with self.services.keys.destructions.paused():
                with self.services.database.snapshot_copy(snapshot) as tx:
                    heads, live = inventory.chain_heads(tx), inventory.live_item_refs(tx)
                keys = self._copy_keys(live)
            progress(f"backup: snapshot taken, {len(live)} live items")
            return self._archive(out, snapshot, heads, keys, progress)
        except StoreUnavailable as exc:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "snapshot failed") from exc
        except KeyStoreUnavailable as exc:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "a key file cannot be read") from exc
        finally:
            _shred_snapshot(snapshot)

    def _copy_keys(self, live: list[tuple[str, str]]) -> dict[str, bytes]:
        """The key state and the key files of `live` items, by archive path.

        Raises:
            KeyStoreUnavailable: a key file or the state cannot be read.
        """
        store = self.services.keys
        copied: dict[str, bytes] = {}
        state = store.directory / STATE_FILE
        if state.is_file():
            try:
                copied[f"{KEYS_DIRECTORY}/{STATE_FILE}"] = state.read_bytes()
            except OSError as exc:
                raise KeyStoreUnavailable("key state cannot be read") from exc
        missing = 0
        for scope_ref, item_id in live:
            blob = store.get(scope_ref, item_id)
            if blob is None:
                missing += 1  # already lost from the live store; `audit verify` reports it
                continue
            path = store.path_for(scope_ref, item_id)
            copied[f"{KEYS_DIRECTORY}/{path.parent.name}/{path.name}"] = blob
        if missing:
            log.error("backup: %d live item(s) have no key file", missing)
        return dict(sorted(copied.items()))

    def _archive(
        self,
        out: Path,
        snapshot: Path,
        heads: dict[str, JsonValue],
        keys: dict[str, bytes],
        progress: Progress,
    ) -> dict[str, JsonValue]:
        root = self.services.root_key
        files: list[JsonValue] = [
            {
                "path": DATABASE_FILE,
                "size": snapshot.stat().st_size,
                "sha256": _sha256_file(snapshot),
            }
        ]
        files += [
            {"path": name, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
            for name, blob in keys.items()
        ]
        due = stepper(len(files))
        now_ms = self.services.clock_ms()
        manifest: dict[str, JsonValue] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "schema_version": SCHEMA_VERSION,
            "created_at": format_instant(now_ms),
            "created_at_ms": now_ms,
            "root_key_id": root.key_id.hex(),
            "files": files,
            **heads,
        }
        partial = out.with_name(out.name + ".partial")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "archive cannot be created") from exc
        try:
            with os.fdopen(fd, "wb") as handle:
                sink = _HashingSink(handle)
                writer = ArchiveWriter(sink, root)
                encoded = canonical_json(manifest)
                writer.write(len(encoded).to_bytes(4, "big") + encoded)
                self._stream(writer, snapshot, str(_entry(files[0])["sha256"]))
                for index, blob in enumerate(keys.values(), start=2):
                    writer.write(blob)
                    if due(index):
                        progress(f"backup: archived {index}/{len(files)} files")
                writer.finish()
                handle.flush()
                os.fsync(handle.fileno())
            os.link(partial, out)  # never replaces an existing archive
            fsync_directory(out.parent)
        except OSError as exc:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "archive cannot be written") from exc
        finally:
            partial.unlink(missing_ok=True)
        progress(f"backup: {writer.written} bytes written to {out}")
        return {
            "archive": str(out),
            "bytes": writer.written,
            "archive_sha256": sink.digest.hexdigest(),
            "files": len(files),
            "root_key_id": root.key_id.hex(),
            "schema_version": SCHEMA_VERSION,
            "audit_head": heads["audit_head"],
        }

    def _stream(self, writer: ArchiveWriter, path: Path, expected: str) -> None:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while piece := handle.read(PIECE):
                digest.update(piece)
                writer.write(piece)
        if digest.hexdigest() != expected:  # the snapshot is ours alone; this is damage
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "snapshot changed during the backup")


def _entry(value: JsonValue) -> dict[str, JsonValue]:
    assert isinstance(value, dict)
    return value


def _shred_snapshot(snapshot: Path) -> None:
    """Raises: ToolError: STORE_UNAVAILABLE when a snapshot file cannot be removed."""
    for path in (snapshot, snapshot.with_name(snapshot.name + ".wal")):
        if not shred(path):
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "a backup snapshot cannot be removed")
