"""Encrypted backup of a data directory (SPEC §1.6, §8; restore is in admin/restore.py).

A backup is one archive (crypto/archive.py) whose plaintext stream is

    4-byte big-endian manifest length, manifest (canonical JSON), then every file's bytes in
    manifest order

and the manifest names the format and schema versions, each file with its size and SHA-256,
the audit and journal chain heads, the creation time and the root key id. The archive is
written encrypted as it streams: no plaintext copy ever touches the disk. The store must be
quiescent (the CLI holds its single writer slot; the server is stopped).

Crypto-shredding and backups: a key destroyed after a backup was made still lives in that
backup. Restore therefore refuses archives older than `max_age_days` (default 30), so that a
forgotten item is recoverable from a backup at most that long after `forget`; see README.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from engram_memory.admin.maintenance import (
    Operator,
    Progress,
    authorize_operator,
    run_authorized,
)
from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.errors import ErrorCode, ToolError
from engram_memory.contract.types import format_instant
from engram_memory.crypto.archive import ArchiveWriter
from engram_memory.crypto.keystore import (
    KEY_SUFFIX,
    KEYS_DIRECTORY,
    STATE_FILE,
    KeyStoreBusy,
)
from engram_memory.durable_files import fsync_directory
from engram_memory.store import inventory
from engram_memory.store.database import DATABASE_FILE, SCHEMA_VERSION
from engram_memory.tools import steps
from engram_memory.tools.runtime import CallContext, Services

FORMAT = "engram-memory-backup"
FORMAT_VERSION = 1
DEFAULT_MAX_AGE_DAYS = 30
PIECE = 1 << 20
KEY_PATH = re.compile(r"^keys/[0-9a-f]{2}/[0-9a-f]{64}\.key$")
FIXED_PATHS = frozenset({DATABASE_FILE, DATABASE_FILE + ".wal", f"{KEYS_DIRECTORY}/{STATE_FILE}"})


def stepper(total: int) -> Callable[[int], bool]:
    """Report about every 5% of a long list, and its last item."""
    step = max(1, total // 20)
    return lambda index: index == total or index % step == 0


def _store_files(data_dir: Path) -> list[str]:
    """What a backup holds: the DuckDB file (and WAL), the key state and every key file;
    never lock files or interrupted temporaries."""
    names = [n for n in (DATABASE_FILE, DATABASE_FILE + ".wal") if (data_dir / n).is_file()]
    keys = data_dir / KEYS_DIRECTORY
    if (keys / STATE_FILE).is_file():
        names.append(f"{KEYS_DIRECTORY}/{STATE_FILE}")
    names += sorted(
        f"{KEYS_DIRECTORY}/{p.parent.name}/{p.name}" for p in keys.glob(f"??/*{KEY_SUFFIX}")
    )
    return names


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
    """Writes the encrypted archive of a stopped (or quiescent) service's data directory."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.data_dir = services.keys.directory.parent

    def backup(self, who: Operator, out: Path, progress: Progress) -> dict[str, JsonValue]:
        """Authorize (`maintain` in every scope of the store), archive, audit.

        Raises:
            ToolError: UNAUTHORIZED; STORE_UNAVAILABLE when a rotation runs, the store
                changes during the backup, or the archive cannot be written.
        """

        def act(ctx: CallContext) -> dict[str, JsonValue]:
            with self.services.database.transaction() as tx:
                scopes = inventory.scopes(tx)
            for scope_ref in (s for s in scopes if s != ctx.scope_ref):
                authorize_operator(ctx, who, "maintain", "backup", scope_ref)
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
                steps.write_audit(tx, ctx, "ok", detail)
            return result

        return run_authorized(self.services, who, "backup", "maintain", act)

    def _write(self, out: Path, progress: Progress) -> dict[str, JsonValue]:
        self.services.database.checkpoint()
        with self.services.database.transaction() as tx:
            heads = inventory.chain_heads(tx)
        root = self.services.root_key
        names = _store_files(self.data_dir)
        due = stepper(len(names))
        files: list[JsonValue] = []
        for index, name in enumerate(names, start=1):
            path = self.data_dir / name
            files.append({"path": name, "size": path.stat().st_size, "sha256": _sha256_file(path)})
            if due(index):
                progress(f"backup: hashed {index}/{len(names)} files")
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
                for index, entry in enumerate(files, start=1):
                    assert isinstance(entry, dict)
                    self._stream(writer, str(entry["path"]), str(entry["sha256"]))
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

    def _stream(self, writer: ArchiveWriter, name: str, expected: str) -> None:
        digest = hashlib.sha256()
        with (self.data_dir / name).open("rb") as handle:
            while piece := handle.read(PIECE):
                digest.update(piece)
                writer.write(piece)
        if digest.hexdigest() != expected:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "store changed during the backup")
