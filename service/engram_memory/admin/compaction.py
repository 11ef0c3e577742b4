"""Host-only store compaction: rewrite the DuckDB file so deleted rows leave no residue.

DuckDB does not overwrite freed blocks, so rows deleted by `forget` (the keyed term hashes of
a forgotten record's lexical postings) stay readable in the file until the space is reused.
Compaction copies the live rows into a fresh file and shreds the old one (store/database.py).
Run it on a schedule that bounds how long such residue may exist; it also returns the space.
It first forgets the decision inputs kept past their retention (core/decision_keeping.py), so
their bytes leave the file in the same run.
Calls wait while the file is rewritten. Needs `maintain` in every scope of the store, since
every scope's rows move, and is audited like every maintenance operation.
"""

from __future__ import annotations

from engram_memory.admin.maintenance import Operator, Progress, authorize_operator, run_authorized
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import KeyStoreBusy, ToolError
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.decision_keeping import prune_before_ms
from engram_memory.core.runtime import CallContext, Services
from engram_memory.store import decision_inputs, inventory


class CompactionService:
    def __init__(self, services: Services) -> None:
        self.services = services

    def compact(self, who: Operator, progress: Progress) -> dict[str, JsonValue]:
        """Rewrite the store file; returns its size before and after.

        Raises:
            ToolError: UNAUTHORIZED without `maintain` in every scope; STORE_UNAVAILABLE when
                a rotation or backup runs, or the copy or swap fails (the old file serves).
        """

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            with self.services.database.transaction() as tx:
                scopes = inventory.scopes(tx)
            for scope_ref in (s for s in scopes if s != ctx.scope_ref):
                authorize_operator(ctx, audit, who, "maintain", "compact", scope_ref)
            days = self.services.settings.decision_input_retention_days
            with self.services.database.transaction() as tx:
                pruned = decision_inputs.prune(tx, prune_before_ms(ctx.now_ms, days))
            progress(f"compact: {pruned} decision inputs older than {days} days forgotten")
            progress("compact: copying live rows to a fresh store file (calls wait)")
            try:
                # A backup's snapshot cursor must not see its store file swapped away.
                with self.services.keys.rotation_lock():
                    before, after = self.services.database.compact()
            except KeyStoreBusy as exc:
                raise ToolError(ErrorCode.STORE_UNAVAILABLE, "a rotation or backup runs") from exc
            progress(f"  done: {before} -> {after} bytes; the old file is shredded")
            return ToolOutcome.succeeded(
                {
                    "bytes_before": before,
                    "bytes_after": after,
                    "decision_inputs_pruned": pruned,
                },
                audit,
            )

        return run_authorized(self.services, who, "compact", "maintain", act)
