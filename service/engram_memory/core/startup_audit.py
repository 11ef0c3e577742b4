"""Start-up check of the audit trail: from the last signed checkpoint to the head.

`audit verify` re-derives every chain, but only when someone runs it; a service that starts
on a store whose audit rows were rewritten would serve, and write new entries on top of the
rewrite. So before serving, the entries written since the newest kept checkpoint that the
service's own checkpoint key signed are re-derived, linked from the hash it signed, and the
entry at the checkpointed position must still hold that hash. The work is bounded by what
was written since that checkpoint (one interval, ENGRAM_CHECKPOINT_INTERVAL_S, when the
service ran with its key), and capped at MAX_ENTRIES; the count and the time are reported.

Without a checkpoint key, or without a checkpoint it signed, the last MAX_ENTRIES entries
are re-derived from the stored link before them: that finds a row edited without
recomputing the chain, not a recomputed chain (which only a signed position exposes).
`serve` prints the result's `summary()` as one line once the store is served.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from engram_memory.contract.digests import ZERO_DIGEST
from engram_memory.contract.exceptions import (
    AuditChainBroken,
    AuditTrailUntrusted,
    CheckpointInvalid,
    StoreBehindAnchor,
)
from engram_memory.core.checkpoints import CHECKPOINT_FORMATS, verify_signature
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey
from engram_memory.store import audit
from engram_memory.store import checkpoints as rows
from engram_memory.store.database import Database
from engram_memory.store.transaction import Transaction

# ~1 s of re-derivation per 20k-50k entries on one core: far above one checkpoint interval
# of a busy service, low enough that a start without any checkpoint stays bounded.
MAX_ENTRIES = 1_000_000
# Kept checkpoints tried, newest first, before the check falls back to the unsigned start.
_CANDIDATES = 16


@dataclass(frozen=True)
class StartupAudit:
    """What the start-up check did: from which position, how many entries, how long."""

    anchored_at: int  # the signed position the segment links from (0: none signed)
    signed_at: str | None  # that checkpoint's instant, None when none was used
    start: int  # the segment began after this entry (below `anchored_at` never)
    head: int
    checked: int
    elapsed_ms: int

    def summary(self) -> str:
        """The one start-up line `serve` prints."""
        counted = f"{self.checked} entries in {self.elapsed_ms} ms"
        if self.signed_at is None:
            return (
                "audit trail: no checkpoint signed by this service's key to start from;"
                f" re-derived entries {self.start + 1}..{self.head} ({counted})"
            )
        capped = "" if self.start == self.anchored_at else f", capped: from {self.start + 1}"
        return (
            f"audit trail verified from the signed checkpoint of {self.signed_at}"
            f" (entry {self.anchored_at}) to the head (entry {self.head}): {counted}{capped}"
        )


def _signed_head(tx: Transaction, key: CheckpointPublicKey) -> tuple[int, str, str] | None:
    """(sequence, entry hash, signed_at) of the newest kept checkpoint `key` signed."""
    for text in rows.latest_documents(tx, key.key_id, _CANDIDATES):
        try:
            document = json.loads(text)
            verify_signature(document, key)
        except (ValueError, CheckpointInvalid):
            continue  # a row that does not verify proves nothing; an older one may
        head = document.get("audit_head")
        if document.get("format") not in CHECKPOINT_FORMATS:
            continue
        if head is None:
            return 0, "", str(document.get("signed_at"))
        return int(head["sequence"]), str(head["entry_hash"]), str(document["signed_at"])
    return None


def verify_trail_at_startup(
    database: Database, key: CheckpointPublicKey | None, *, max_entries: int = MAX_ENTRIES
) -> StartupAudit:
    """Re-derive the audit entries since the last signed checkpoint (see the module).

    Raises:
        StoreBehindAnchor: the trail ends before the signed checkpoint (exit 3).
        AuditTrailUntrusted: an entry after it, or the signed entry itself, was rewritten
            (exit 5: the trail does not verify against its signed checkpoint).
    """
    started = time.monotonic()
    with database.reading() as tx:  # a snapshot holding every acknowledged entry
        head = rows.last_sequence(tx)
        signed = None if key is None else _signed_head(tx, key)
        anchored, link, signed_at = signed if signed is not None else (0, "", None)
        if anchored > head:
            raise StoreBehindAnchor(
                f"audit trail ends at entry {head}, before entry {anchored} of the signed"
                f" checkpoint of {signed_at}"
            )
        if anchored > 0 and rows.entry_hash_at(tx, anchored) != link:
            raise AuditTrailUntrusted(_broken(f"entry {anchored} was rewritten", signed_at))
        start = max(anchored, head - max_entries)
        if start > anchored or anchored == 0:
            # No signed position to link from: the stored link before the segment.
            link = ZERO_DIGEST if start == 0 else (rows.entry_hash_at(tx, start) or "")
        try:
            checked = audit.verify_since(tx, start, link)
        except AuditChainBroken as exc:
            raise AuditTrailUntrusted(_broken(str(exc), signed_at)) from exc
    return StartupAudit(
        anchored, signed_at, start, head, checked, int((time.monotonic() - started) * 1000)
    )


def _broken(what: str, signed_at: str | None) -> str:
    since = f"since the signed checkpoint of {signed_at}" if signed_at else "(no signed checkpoint)"
    return (
        f"audit trail does not verify {since}: {what}; not serving"
        " (locate it with `engram-memory audit verify --checkpoint FILE`)"
    )
