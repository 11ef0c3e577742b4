"""`audit-checkpoint` (maintenance channel, `read` authority): sign the chain heads now.

An auditor who is about to rely on the trail asks for a checkpoint and keeps the file; a
later `audit verify --checkpoint FILE` proves the chains still extend it. The checkpoint is
also kept in the store (`audit_checkpoints`), and the request is audited like every
maintenance operation. A checkpoint names every scope's journal head, so the operator needs
`read` in every scope of the store (as `backup` needs `maintain`).
"""

from __future__ import annotations

from pathlib import Path

from engram_memory.admin.maintenance import (
    Operator,
    Progress,
    authorize_operator,
    run_authorized,
)
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode, ToolError
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.checkpoints import keep_checkpoint, take_checkpoint, write_checkpoint_file
from engram_memory.core.runtime import CallContext, Services
from engram_memory.store import inventory


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
