"""Host-only key rotation: a new scope-key epoch, or a new root key (SPEC §1.6).

Authorized by `engram.maintenance` (`maintain`) and audited like every maintenance operation.
The re-wrap itself (crypto/rotation.py) runs beside a live service: called in the process
that serves (`RotationService(service.services)`), tool calls continue throughout; run from
`engram-memory admin` on a stopped server's data directory, a restarted server reads keys of
both epochs or roots, so an interrupted rotation never stops service and resumes when run
again.
"""

from __future__ import annotations

from collections.abc import Callable

from engram_memory.admin.maintenance import Operator, Progress, authorize_operator, run_authorized
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    ConfigurationError,
    KeyStoreBusy,
    KeyStoreUnavailable,
    ToolError,
)
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit, ToolOutcome
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto import rotation
from engram_memory.crypto.keys import RootKey
from engram_memory.store import inventory


class RotationService:
    """Scope- and root-key rotation over a service's key store, policy and audit trail."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def rotate_scope_key(self, who: Operator, progress: Progress) -> dict[str, JsonValue]:
        """Move the operator's workspace scope to a new epoch; re-wrap its key files.

        Raises:
            ToolError: UNAUTHORIZED; STORE_UNAVAILABLE when another rotation or backup runs
                or a file cannot be replaced.
            ConfigurationError: the service's key ring lacks the store's root key.
        """
        self._check_ring(self.services.root_key)

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            return self._finish(
                ctx,
                audit,
                lambda legacy: rotation.rotate_scope_key(
                    self.services.keys, self.services.root_key, ctx.scope_ref, progress, legacy
                ),
            )

        return run_authorized(self.services, who, "rotate_scope_key", "maintain", act)

    def rotate_root_key(
        self, who: Operator, new_root: RootKey, progress: Progress
    ) -> dict[str, JsonValue]:
        """Make `new_root`'s current key the store's root and re-wrap every key file.

        The operator needs `maintain` in every scope of the store, since every scope's keys
        move. On success this service already uses `new_root` (it keeps reading keys still
        under a previous root of `new_root` until the sweep has re-wrapped them).

        Raises:
            ToolError: UNAUTHORIZED; STORE_UNAVAILABLE as for `rotate_scope_key`.
            ConfigurationError: `new_root` lacks the store's root or its index root differs.
        """
        if new_root.stable_index_root != self.services.root_key.stable_index_root:
            raise ConfigurationError(
                "the new root key file does not carry this store's index root "
                "(create it with `engram-memory host new-root-key --current ...`)"
            )
        self._check_ring(new_root)

        def act(ctx: CallContext, audit: CallAudit) -> ToolOutcome:
            with self.services.database.transaction() as tx:
                scopes = inventory.scopes(tx)
            for scope_ref in (s for s in scopes if s != ctx.scope_ref):
                authorize_operator(ctx, audit, who, "maintain", "rotate_root_key", scope_ref)
            # From here on this service reads under both rings' roots and writes under the
            # root the key state names, which the sweep is about to flip.
            self.services.root_key = new_root
            return self._finish(
                ctx,
                audit,
                lambda legacy: rotation.rotate_root_key(
                    self.services.keys, new_root, progress, legacy
                ),
            )

        return run_authorized(self.services, who, "rotate_root_key", "maintain", act)

    def _check_ring(self, ring: RootKey) -> None:
        state = self.services.keys.read_state()
        if state.root_id is not None and state.root_id not in ring.known_ids:
            raise ConfigurationError(
                f"the root key file does not hold this store's root key {state.root_id.hex()}"
            )

    def _legacy_refs(self) -> dict[str, tuple[str, str]]:
        with self.services.database.transaction() as tx:
            refs = inventory.item_refs(tx)
        return {self.services.keys.path_for(s, i).name: (s, i) for s, i in refs}

    def _finish(
        self,
        ctx: CallContext,
        audit: CallAudit,
        run: Callable[[rotation.LegacyRefs], rotation.RotationOutcome],
    ) -> ToolOutcome:
        try:
            outcome = run(self._legacy_refs())
        except KeyStoreBusy as exc:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "another rotation or backup runs") from exc
        except KeyStoreUnavailable as exc:
            raise ToolError(ErrorCode.STORE_UNAVAILABLE, "key files cannot be re-wrapped") from exc
        report = outcome.report.as_json()
        detail = (
            f"root_key_id={outcome.root_key_id} epoch={outcome.epoch} "
            f"rewrapped={report['rewrapped'] + report['upgraded']} "
            f"unreadable={report['unreadable']} complete={outcome.complete}"
        )
        with self.services.database.transaction() as tx:
            steps.audit_in_transaction(tx, ctx, audit, "ok", detail)
        result: dict[str, JsonValue] = {
            "rotation": outcome.kind,
            "resumed": outcome.resumed,
            "root_key_id": outcome.root_key_id,
            "complete": outcome.complete,
            **report,
        }
        if outcome.epoch is not None:
            result["epoch"] = outcome.epoch
        return ToolOutcome.succeeded(result, audit)
