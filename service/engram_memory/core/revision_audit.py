"""Each change of the policy revision in use, recorded in the audit trail.

With an OPA fleet (policy/revision_trust.py) the revision deciding calls changes while the
service runs. Before a new revision decides anything, one entry of the `policy` stream is
written in the same hash chain: `scope_ref` `policy`, `tool` `policy_revision`, `outcome`
`revision_changed`, `bundle_revision`/`bundle_digest` the revision now in use and the
digest of its verified bundle, and `target_ids` = [the previous revision] (a revision is
`<label>+<content digest>`, so it names the previous digest too). Existing columns only:
nothing new joins the hashed entry, so every older entry re-derives unchanged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from engram_memory.contract.types import format_instant
from engram_memory.core.audit_writer import AuditGroupWriter
from engram_memory.policy.engine import BundleIdentity
from engram_memory.store.audit import AuditRecord

log = logging.getLogger("engram_memory.policy")

POLICY_SCOPE = "policy"
REVISION_TOOL = "policy_revision"
REVISION_CHANGED = "revision_changed"


def revision_change_record(
    previous: BundleIdentity, current: BundleIdentity, now_ms: int
) -> AuditRecord:
    """The audit entry saying `current` replaces `previous` at `now_ms`."""
    return AuditRecord(
        recorded_at=format_instant(now_ms),
        audit_id=f"policy:{uuid.uuid4().hex}",
        scope_ref=POLICY_SCOPE,
        principal_ref="",
        agent_ref="",
        session_ref="",
        tool=REVISION_TOOL,
        outcome=REVISION_CHANGED,
        bundle_digest=current.digest,
        bundle_revision=current.revision,
        target_ids=(previous.revision,),
    )


class RevisionChangeRecorder:
    """A `RevisionListener` writing each change through the audit group writer."""

    def __init__(self, writer: AuditGroupWriter, clock_ms: Callable[[], int]) -> None:
        self._writer = writer
        self._clock_ms = clock_ms

    def __call__(self, previous: BundleIdentity, current: BundleIdentity) -> bool:
        """True once the entry is durable; False (the change is not made) otherwise."""
        written = self._writer.write_records(
            [revision_change_record(previous, current, self._clock_ms())]
        )
        if not written:
            log.error("policy revision change not audited revision=%s", current.revision)
        return written
