"""`admin accept-loss`: serve a store again after its loss was detected, and audit the loss.

A store behind its head anchor (store/anchors.py) is refused at startup. When no backup holds
the missing writes, an operator may accept the loss: the store is re-anchored at its current
heads, and an audit entry records the anchored and the actual heads, so the trail says what
was acknowledged and is gone. Idempotency keys of the lost calls are unknown to the store
afterwards: a retry of one of them runs as a new call. Needs `maintain` in every scope of the
store and of the anchor (a scope may have vanished entirely), like compaction.
"""

from __future__ import annotations

from engram_memory.admin.maintenance import Operator, Progress, authorize_operator, run_authorized
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import digest
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.runtime import CallContext, Services
from engram_memory.store import inventory
from engram_memory.store.anchors import HeadAnchor


class LossService:
    def __init__(self, services: Services) -> None:
        self.services = services

    def accept_loss(
        self, who: Operator, reason_ref: str, progress: Progress
    ) -> dict[str, JsonValue]:
        """Re-anchor the store at its current heads and audit what was lost.

        Returns `{"loss_found": false}` when the store is not behind its anchor (nothing is
        changed), else the anchored and actual heads and the problems found.

        Raises:
            ToolError: UNAUTHORIZED without `maintain` in every scope; STORE_UNAVAILABLE when
                the audit entry or the anchor cannot be written.
        """
        database = self.services.database

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            anchor = database.anchor
            loss = anchor.loss if isinstance(anchor, HeadAnchor) else None
            with database.transaction() as tx:
                scopes = set(inventory.scopes(tx))
            if loss is not None and loss.anchored is not None:
                scopes |= set(loss.anchored.journal)
            for scope_ref in sorted(scopes - {ctx.scope_ref}):
                authorize_operator(ctx, audit, who, "maintain", "accept-loss", scope_ref)
            if loss is None or not isinstance(anchor, HeadAnchor):
                progress("accept-loss: the store is not behind its head anchor; nothing changed")
                return ToolOutcome.succeeded({"loss_found": False}, audit)
            reason = digest("reason", {"reason_ref": reason_ref})
            with database.transaction() as tx:
                detail = f"loss accepted {reason}: {loss.audit_detail()}"
                steps.audit_in_transaction(tx, ctx, audit, "ok", detail)
            anchor.accept_loss()
            progress(f"accept-loss: re-anchored at the store's heads; lost: {loss.summary()}")
            return ToolOutcome.succeeded(
                {
                    "loss_found": True,
                    "anchored": None if loss.anchored is None else loss.anchored.as_json(),
                    "actual": loss.actual.as_json(),
                    "problems": list(loss.problems),
                },
                audit,
            )

        return run_authorized(self.services, who, "accept-loss", "maintain", act)
