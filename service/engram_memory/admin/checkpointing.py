"""`audit-checkpoint` (maintenance channel, `read` authority): sign the chain heads now.

An auditor who is about to rely on the trail asks for a checkpoint and keeps the file; a
later `audit verify --checkpoint FILE` proves the chains still extend it. The checkpoint is
also kept in the store (`audit_checkpoints`), and the request is audited like every
maintenance operation. A checkpoint names every scope's journal head, so the operator needs
`read` in every scope of the store (as `backup` needs `maintain`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engram_memory.admin.maintenance import (
    Operator,
    Progress,
    authorize_operator,
    run_authorized,
)
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    CheckpointInvalid,
    ConfigurationError,
    StoreCorrupt,
    StoreOpenFailed,
    ToolError,
)
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.checkpoint_verify import (
    CheckpointResult,
    file_sha256,
    verify_against_checkpoint,
)
from engram_memory.core.checkpoints import (
    CHECKPOINT_FILE,
    keep_checkpoint,
    take_checkpoint,
    verify_signature,
    write_checkpoint_file,
)
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.checkpoint_key import PUBLIC_KEY_VARIABLE, CheckpointPublicKey
from engram_memory.store import inventory
from engram_memory.store.database import Database
from engram_memory.store.export import MANIFEST_FILE
from engram_memory.store.transaction import Transaction


class CheckpointService:
    """Signs, keeps and writes a checkpoint on request."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def checkpoint(self, who: Operator, out: Path, progress: Progress) -> dict[str, JsonValue]:
        """Authorize (`read` in every scope), sign the heads, keep and write the checkpoint.

        Raises:
            ToolError: UNAUTHORIZED; CAPABILITY_UNAVAILABLE without a checkpoint key;
                STORE_UNAVAILABLE when the file cannot be written.
        """
        key = self.services.checkpoint_key
        database = self.services.database

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            with database.reading() as tx:
                scopes = inventory.scopes(tx)
            for scope_ref in (s for s in scopes if s != ctx.scope_ref):
                authorize_operator(ctx, audit, who, "read", "audit_checkpoint", scope_ref)
            if key is None:
                raise ToolError(ErrorCode.CAPABILITY_UNAVAILABLE, "no checkpoint key configured")
            with database.reading() as tx:
                document = take_checkpoint(tx, key, self.services.clock_ms())
            try:
                write_checkpoint_file(document, out)
            except OSError as exc:
                raise ToolError(ErrorCode.STORE_UNAVAILABLE, "checkpoint file not written") from exc
            progress(f"checkpoint written: {out}")
            head = document["audit_head"]
            sequence = head["sequence"] if isinstance(head, dict) else 0
            with database.transaction() as tx:
                keep_checkpoint(tx, document, "request")
                steps.audit_in_transaction(
                    tx, ctx, audit, "ok", f"audit_sequence={sequence} key_id={key.key_id}"
                )
            return ToolOutcome.succeeded(
                {
                    "out": str(out),
                    "audit_sequence": sequence,
                    "scopes": len(document["journal_heads"] or {}),
                    "key_id": key.key_id,
                    "signed_at": document["signed_at"],
                },
                audit,
            )

        return run_authorized(self.services, who, "audit_checkpoint", "read", act)


def _read_json(path: Path, what: str) -> object:
    """Raises: ConfigurationError: unreadable file; CheckpointInvalid: not JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{what} {path} cannot be read") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CheckpointInvalid(f"{what} {path} is not JSON") from exc


def checkpoint_lines(
    data_dir: Path, checkpoint: Path, public_key_path: str | None
) -> tuple[int, list[str]]:
    """Compare the stopped store in `data_dir` with a checkpoint file: (exit code, lines).

    The chains must have verified already (`audit verify` does that first); an export
    beside the checkpoint (manifest.json) is used to name the exact divergent entry.
    """
    try:
        database = Database.open(data_dir, read_only=True)
    except (StoreOpenFailed, StoreCorrupt) as exc:
        return EXIT_UNREADABLE, [f"FAILED: store cannot be read for the checkpoint: {exc}"]
    try:
        with database.transaction() as tx:
            return checkpoint_lines_in(tx, checkpoint, public_key_path)
    finally:
        database.close()


def checkpoint_lines_in(
    tx: Transaction, checkpoint: Path, public_key_path: str | None
) -> tuple[int, list[str]]:
    """`checkpoint_lines` on the snapshot `tx` reads (a running server's verification runs
    it inside its own snapshot)."""
    try:
        key = _public_key(public_key_path)
        document = _read_json(checkpoint, "checkpoint")
        result = verify_against_checkpoint(
            tx, document, key, export_dir=checkpoint.absolute().parent
        )
    except ConfigurationError as exc:
        return EXIT_UNREADABLE, [f"FAILED: {exc}"]
    except CheckpointInvalid as exc:
        return EXIT_UNTRUSTED, [f"FAILED: checkpoint not trusted: {exc}"]
    except StoreCorrupt as exc:
        return EXIT_UNREADABLE, [f"FAILED: store cannot be read for the checkpoint: {exc}"]
    return _result_lines(result)


def _result_lines(result: CheckpointResult) -> tuple[int, list[str]]:
    signed = result.checkpoint
    sequence = 0 if signed.audit is None else signed.audit[0]
    scopes = len(signed.journal)
    what = (
        f"checkpoint signed {signed.signed_at} (audit sequence {sequence}, "
        f"{scopes} journal scope{'' if scopes == 1 else 's'})"
    )
    notes = [f"note: {result.export_used}"] if result.export_used else []
    if result.extends:
        return 0, [f"extends {what}", *notes]
    lines = [f"FAILED: the chains do not extend the {what}"]
    lines += [f"  {d.line()}" for d in result.divergences]
    return EXIT_NOT_EXTENDED, lines + notes


def verify_manifest(directory: Path, key: CheckpointPublicKey) -> list[str]:
    """What is wrong with an export (empty: nothing): its manifest's signature, every listed
    file's sha256, and its checkpoint's signature and heads.

    Raises:
        ConfigurationError: the manifest cannot be read.
        CheckpointInvalid: the manifest is malformed or not signed by `key`.
    """
    manifest = _read_json(directory / MANIFEST_FILE, "manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise CheckpointInvalid("not an export manifest")
    verify_signature(manifest, key)
    problems = []
    for entry in manifest["files"]:
        name = str(entry.get("name", "")) if isinstance(entry, dict) else ""
        target = directory / name
        if not name or "/" in name or not target.is_file():
            problems.append(f"{name or '(unnamed)'}: missing")
        elif file_sha256(target) != entry.get("sha256"):
            problems.append(f"{name}: sha256 differs from the signed manifest")
    if (directory / CHECKPOINT_FILE).is_file():
        checkpoint = _read_json(directory / CHECKPOINT_FILE, "checkpoint")
        if not isinstance(checkpoint, dict):
            raise CheckpointInvalid("checkpoint.json is not a checkpoint")
        verify_signature(checkpoint, key)
        for field in ("audit_head", "journal_heads"):
            if checkpoint.get(field) != manifest.get(field):
                problems.append(f"{CHECKPOINT_FILE}: {field} differs from the manifest")
    return problems


EXIT_NOT_EXTENDED = 1


EXIT_UNREADABLE = 2


EXIT_UNTRUSTED = 5


def _public_key(path_text: str | None) -> CheckpointPublicKey:
    """Raises: ConfigurationError: none named, or unreadable."""
    text = path_text or os.environ.get(PUBLIC_KEY_VARIABLE)
    if not text:
        raise ConfigurationError(
            f"no checkpoint public key: pass --checkpoint-public-key or set {PUBLIC_KEY_VARIABLE}"
        )
    return CheckpointPublicKey.from_pem_file(Path(text))
