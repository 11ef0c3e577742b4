"""Verified restore of an encrypted backup (admin/backup.py) into a new data directory.

Restore authenticates every chunk, checks every file against the manifest, verifies the
restored journal and audit chains against the manifest's heads, and only then moves the
staged directory into place. Damage of any kind is BACKUP_INVALID; an intact archive that must
not be restored here (another root key, schema or format version, a non-empty target, an
archive older than the retention bound) is RESTORE_REFUSED.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_memory._internal.durable_files import fsync_directory, shred
from engram_memory.admin.backup import (
    FIXED_PATHS,
    FORMAT,
    FORMAT_VERSION,
    KEY_PATH,
    PIECE,
    stepper,
)
from engram_memory.admin.maintenance import Operator, Progress, operator_context, split_scope_ref
from engram_memory.admin.names import DEFAULT_MAX_AGE_DAYS
from engram_memory.admin.verification import verify_data_dir
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    ArchiveForeign,
    ArchiveInvalid,
    AuditChainBroken,
    JournalCorrupt,
    StoreUnavailable,
    StoreVersionSkew,
    ToolError,
)
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit
from engram_memory.core.runtime import Services
from engram_memory.crypto.archive import ArchiveReader
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import (
    KEY_SUFFIX,
    KEYS_DIRECTORY,
    KeyStore,
)
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.store import inventory
from engram_memory.store.anchors import anchor_afresh
from engram_memory.store.database import Database
from engram_memory.store.projection import reset_position
from engram_memory.store.schema import SCHEMA_VERSION

_MAX_MANIFEST = 1 << 26
_DAY_MS = 86_400_000


def _invalid(detail: str) -> ToolError:
    return ToolError(ErrorCode.BACKUP_INVALID, detail)


def _refused(detail: str) -> ToolError:
    return ToolError(ErrorCode.RESTORE_REFUSED, detail)


@dataclass(frozen=True)
class RestoreRequest:
    """What a restore needs besides the archive: the operator's key ring, policy and host."""

    root: RootKey
    decider: PolicyDecider
    host_keys: HostKeyring
    clock_ms: Callable[[], int]
    max_age_days: int = DEFAULT_MAX_AGE_DAYS


def restore(
    request: RestoreRequest, who: Operator, archive: Path, target: Path, progress: Progress
) -> dict[str, JsonValue]:
    """Decrypt, verify and stage `archive`, then move it into place as `target`.

    Authorized by `maintain` in the operator's workspace (before the archive is read) and in
    every scope the archive holds (before anything is written). The audit entry goes into the
    restored store's own chain, after its verification; a refused restore has no store to be
    audited in and is reported to the operator only.

    Raises:
        ToolError: UNAUTHORIZED; BACKUP_INVALID (damaged, truncated, tampered, digests or
            chain heads do not match); RESTORE_REFUSED (target not empty, archive under
            another root key, format or schema version skew, older than the bound).
    """
    # The restored store's entry is written once the store exists; its receipts gather here.
    audit = CallAudit()

    def allow(scope_ref: str | None) -> None:
        tenant, workspace = (who.tenant, who.workspace)
        if scope_ref is not None:
            tenant, workspace = split_scope_ref(scope_ref)
        result = request.decider.maintenance(tenant, workspace, who.operator, "maintain", "restore")
        audit.decided(result.decision)
        if not result.allow:
            raise ToolError(ErrorCode.UNAUTHORIZED, "maintenance authority not held")

    allow(None)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise _refused("target is not an empty directory")
    try:
        source = archive.open("rb")
    except OSError as exc:
        raise _invalid("archive cannot be read") from exc
    with source, _staging(target) as staging:
        try:
            reader = ArchiveReader(source, request.root)
            manifest = _read_manifest(reader, request)
            own = f"tenant:{who.tenant}/workspace:{who.workspace}"
            for scope_ref in _manifest_scopes(manifest):
                if scope_ref != own:
                    allow(scope_ref)
            _unpack(reader, manifest, staging, progress)
            reader.expect_end()
        except ArchiveInvalid as exc:
            raise _invalid("archive does not authenticate") from exc
        except ArchiveForeign as exc:
            raise _refused("archive made under another root key") from exc
        except OSError as exc:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "archive or target unusable") from exc
        _verify_restored(staging, manifest, progress)
        _audit_restore(request, who, staging, audit, manifest)
        try:
            os.replace(staging, target)  # POSIX: replaces a missing or empty directory
            fsync_directory(target.parent)
        except OSError as exc:
            raise _refused("target changed during the restore") from exc
    progress(f"restore: verified and moved into place at {target}")
    return {
        "restored_to": str(target),
        "files": len(manifest["files"]),
        "created_at": manifest["created_at"],
        "root_key_id": manifest["root_key_id"],
        "audit_head": manifest["audit_head"],
    }


def _read_manifest(reader: ArchiveReader, request: RestoreRequest) -> dict[str, Any]:
    length = int.from_bytes(reader.read(4), "big")
    if length > _MAX_MANIFEST:
        raise _invalid("manifest too large")
    try:
        manifest: dict[str, Any] = json.loads(reader.read(length))
        if manifest["format"] != FORMAT:
            raise ValueError("format")
        version, schema = manifest["format_version"], manifest["schema_version"]
        created_ms, root_id = int(manifest["created_at_ms"]), str(manifest["root_key_id"])
        _check_files(manifest["files"])
    except (ValueError, KeyError, TypeError) as exc:
        raise _invalid("manifest malformed") from exc
    if root_id != reader.root_id.hex():
        raise _invalid("manifest names another root key than the archive")
    if version != FORMAT_VERSION:
        raise _refused("backup format version not supported")
    if schema != SCHEMA_VERSION:
        raise _refused("backup schema version differs from this build")
    if request.clock_ms() - created_ms > request.max_age_days * _DAY_MS:
        raise _refused("backup older than the retention bound")
    return manifest


def _check_files(files: Any) -> None:
    """Raises: ValueError: a path outside the store's layout, a duplicate, a bad digest."""
    seen: set[str] = set()
    for entry in files:
        path, size, sha = str(entry["path"]), int(entry["size"]), str(entry["sha256"])
        if path in seen or not (path in FIXED_PATHS or KEY_PATH.fullmatch(path)):
            raise ValueError("path")
        if size < 0 or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError("entry")
        seen.add(path)


def _manifest_scopes(manifest: dict[str, Any]) -> list[str]:
    heads = manifest.get("journal_heads")
    if not isinstance(heads, dict):
        raise _invalid("manifest malformed")
    return sorted(str(scope) for scope in heads)


def _unpack(
    reader: ArchiveReader, manifest: dict[str, Any], staging: Path, progress: Progress
) -> None:
    files = manifest["files"]
    due = stepper(len(files))
    for index, entry in enumerate(files, start=1):
        path = staging / entry["path"]
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        digest, remaining = hashlib.sha256(), int(entry["size"])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            while remaining:
                piece = reader.read(min(PIECE, remaining))
                digest.update(piece)
                handle.write(piece)
                remaining -= len(piece)
            handle.flush()
            os.fsync(handle.fileno())
        if digest.hexdigest() != entry["sha256"]:
            raise _invalid("file digest does not match the manifest")
        if due(index):
            progress(f"restore: unpacked {index}/{len(files)} files")


def _verify_restored(staging: Path, manifest: dict[str, Any], progress: Progress) -> None:
    try:
        events, entries, receipts = verify_data_dir(staging)
        database = Database.open(staging, read_only=True)
        try:
            with database.transaction() as tx:
                heads = inventory.chain_heads(tx)
        finally:
            database.close()
    except StoreVersionSkew as exc:
        raise _refused("restored store has another schema version") from exc
    except (JournalCorrupt, AuditChainBroken, StoreUnavailable) as exc:
        raise _invalid("restored store does not verify") from exc
    if heads["audit_head"] != manifest["audit_head"] or (
        heads["journal_heads"] != manifest["journal_heads"]
    ):
        raise _invalid("restored chain heads differ from the manifest")
    progress(
        f"restore: verified {events} journal events, {entries} audit entries, "
        f"{receipts} decision receipts"
    )


def _audit_restore(
    request: RestoreRequest,
    who: Operator,
    staging: Path,
    audit: CallAudit,
    manifest: dict[str, Any],
) -> None:
    database = Database.open(staging)
    try:
        services = Services(
            database=database,
            keys=KeyStore(staging / KEYS_DIRECTORY),
            decider=request.decider,
            root_key=request.root,
            host_keys=request.host_keys,
            clock_ms=request.clock_ms,
        )
        ctx = operator_context(services, who, "restore")
        detail = f"backup_created_at={manifest['created_at']} restored"
        with database.transaction() as tx:
            # The restored file starts a new call log: the one beside it is not its own.
            reset_position(tx)
            steps.write_audit(tx, ctx, audit.facts("ok", detail))
        anchor_afresh(database, staging, request.root.head_anchor_key())
        database.checkpoint()
    finally:
        database.close()


@contextmanager
def _staging(target: Path) -> Iterator[Path]:
    """A fresh directory beside `target`; shredded and removed unless moved into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.restoring-{secrets.token_hex(6)}"
    staging.mkdir(mode=0o700)
    try:
        yield staging
    finally:
        if staging.exists():
            for key_file in staging.rglob(f"*{KEY_SUFFIX}"):
                shred(key_file)  # wrapped keys are not left in freed blocks needlessly
            shutil.rmtree(staging, ignore_errors=True)
