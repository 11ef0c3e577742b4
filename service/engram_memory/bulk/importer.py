"""`engram-memory import`: JSONL captures of one scope, through the tools' own steps, batched.

Each line holds exactly the arguments of `engram_memory_capture`. It is captured and then
admitted as if the bound principal had called both tools: the same parsing and never-store
scan (tools/dispatch.py `parse_call`), the same gate and authorization, idempotency,
retention, reconciliation and admission decisions, sealing, journal events, idempotency
results and audit entries, through the functions the tools run (tools/capture.py and
tools/admission.py `guard` / `plan` / `decide` / `write`). The admission's idempotency key is
derived from the line's capture key (`admission_key_for`), so a rerun replays every line done.

What differs is only how the work is grouped, never what is decided or kept:
- `batch` lines share one write transaction (one COMMIT); a refused line writes only its
  audit entry, as a refused tool call does, and never refuses the batch.
- The keys of a batch are made durable together before the COMMIT that refers to them
  (crypto/key_batch.py). A candidate the same batch accepts or rejects is ended in the
  transaction that creates it, so its key is never written at all (the tool writes it, then
  shreds it after COMMIT): its content is sealed under a key that never reaches the disk.
- A record's index rows are written in the batch transaction (never staged: the import is
  the store's only writer, so there is no one to keep waiting).
- The rows themselves wait in memory and reach DuckDB as one statement per table at the end
  of the batch (store/batched_writes.py): hash chains, cursors and sequences are computed in
  line order exactly as before, only the statements are fewer.
The audit entries of a batch are appended in line order with one group write.

The part of each line's work that depends only on the line (argument checks, never-store
scan, classifiers, the decisions before the store is asked, sealing the candidate, index
terms) is prepared by bulk/line_work.py, in worker processes when `workers` > 1
(bulk/pool.py); this module takes each prepared line in input order and does what needs the
store or the order: rate limits, idempotency lookups, cursors, records, the admission
decision, chains and audit entries. The workers also build each record and ask its
admission decision at the capture cursor this module guesses for it: used only when the
capture lands there (bulk/admission_guess.py), asked again here otherwise.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from engram_memory.bulk.admission_guess import CursorGuesses, sealed_record, verified
from engram_memory.bulk.line_work import (
    ADMIT,
    CAPTURE,
    IMPORT_HOST,
    ImportBinding,
    LineWork,
    PreparedAdmission,
    PreparedCall,
    PreparedLine,
    Refused,
    admission_key_for,
    context,
    refused,
    upto,
)
from engram_memory.bulk.pool import LinePool, chunks, same_revision, setup_for
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    CommitOutcomeUnknown,
    KeyStoreUnavailable,
    ProtocolRefusal,
    ToolError,
)
from engram_memory.core import item_keys, steps
from engram_memory.core.call_audit import AuditFacts, CallAudit
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.key_batch import store_item_keys
from engram_memory.store import bulk_reads, journal, key_intents, memory
from engram_memory.store.batched_writes import BatchedWrites
from engram_memory.store.transaction import Transaction
from engram_memory.tools import admission, capture

__all__ = ["IMPORT_HOST", "ImportBinding", "Importer", "admission_key_for"]

Progress = Callable[[str], None]


@dataclass
class _Batch:
    """What one batch's transaction knows and must still do before its COMMIT, and after."""

    # Idempotency key digests asked about at the batch's start, and those found with a result.
    queried: set[str] = field(default_factory=set)
    known: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)  # key digests this batch stored results for
    tombstones: bool = True  # whether the scope holds a tombstoned record (forget guard)
    audits: list[tuple[CallContext, AuditFacts]] = field(default_factory=list)
    keys: list[tuple[str, bytes]] = field(default_factory=list)  # (item id, data key)
    # Candidates captured in this batch whose key is not written yet.
    fresh: dict[str, _FreshCandidate] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _FreshCandidate:
    row: memory.CandidateRow
    envelope: dict[str, JsonValue]
    data_key: bytes
    record: dict[str, JsonValue]  # built by its capture, from this envelope and cursor


class Importer:
    """Loads lines for one binding; one instance per run."""

    def __init__(self, services: Services, binding: ImportBinding, progress: Progress) -> None:
        self.services = services
        self.binding = binding
        self.progress = progress
        self.counts: Counter[str] = Counter()
        # The importer's own line work: every line's when there are no workers, and the
        # admission of a line whose capture replayed another candidate.
        self.local = LineWork(services, binding, index_terms=services.search_index is None)
        self._scope = self._context(CAPTURE, "scope").scope_ref
        self._cursors = CursorGuesses()  # handed to the workers with the chunks

    def run(
        self, lines: Iterable[tuple[int, str]], total: int, batch_size: int, workers: int = 1
    ) -> None:
        """Import numbered `lines` (blank ones already skipped), `batch_size` per COMMIT, the
        line-only work spread over `workers` processes (1: all in this one).

        Raises:
            StoreUnavailable / KeyStoreUnavailable / PolicyUnavailable / PolicyStale: the run
                stops; committed batches stay, the failing batch leaves nothing.
        """
        setup = setup_for(self.services, self.binding) if workers > 1 else None
        if setup is None:
            clock = self.services.clock_ms
            here = (self.local.prepare(number, text, clock()) for number, text in lines)
            self._load(here, total, batch_size)
            return
        self.progress(f"import: {workers} worker processes prepare the lines")
        with self.services.database.reading(audit_complete=False) as tx:
            self._cursors.head = journal.head(tx, self._scope)[0]
        with LinePool(setup, workers) as pool:
            prepared = pool.prepared(lines, self.services.clock_ms, self._cursors.guess)
            self._load(same_revision(prepared, self.services.decider), total, batch_size)

    def _load(self, prepared: Iterable[PreparedLine], total: int, batch_size: int) -> None:
        started = time.monotonic()
        done = 0
        for chunk in chunks(prepared, batch_size):
            self._batch(chunk)
            done += len(chunk)
            elapsed = max(time.monotonic() - started, 1e-9)
            rate = done / elapsed
            eta = (total - done) / rate if rate > 0 else 0.0
            self.progress(
                f"import: {done}/{total} lines committed, {rate:.1f} lines/s, ETA {eta:.0f} s"
            )

    def _batch(self, lines: list[PreparedLine]) -> None:
        batch = _Batch()
        database = self.services.database
        commits_before = database.commits_on_this_thread()
        outcomes: list[str] = []
        try:
            with database.transaction() as direct:
                tx = BatchedWrites(direct)
                self._look_ahead(tx, batch, lines)
                for line in lines:
                    outcomes.append(self._line(tx, batch, line))
                    self._cursors.placed(journal.head(tx, self._scope)[0])
                self._make_keys_durable(batch)
                steps.write_audits(tx, batch.audits)
                tx.flush()  # every row before the COMMIT
                if batch.keys:
                    # The batch's rows are in the open transaction, its keys durable: a crash
                    # here must leave the store as if the batch never ran (tests/faults).
                    self.services.settings.failpoints.kill_after_staging(ADMIT)
        except BaseException as exc:
            # As `item_keys.fresh_key`: keys of a batch that certainly did not commit are
            # orphans, shredded now; after an unknown COMMIT they stay for the start-up sweep,
            # which keeps every key a committed row owns.
            committed = database.commits_on_this_thread() > commits_before
            if not committed and not isinstance(exc, CommitOutcomeUnknown):
                self._discard_keys(batch)
            raise
        self.counts.update(outcomes)
        # Accept and reject end the candidate: carry out the promised key destructions.
        item_keys.after_commit(self._context(ADMIT, "end"), batch.ended)

    def _look_ahead(self, tx: Transaction, batch: _Batch, lines: list[PreparedLine]) -> None:
        """Ask once for the batch what each line would ask the store: which of its keys hold
        a result, and whether the forget guard can match at all. A key found without one
        (and not written by the batch since) is looked up no further (`_stored`)."""
        ctx = self._context(CAPTURE, "look-ahead")
        for line in lines:
            key = line.lookahead_key
            if key is not None:
                batch.queried.add(steps.idempotency_key_digest(key))
                batch.queried.add(steps.idempotency_key_digest(admission_key_for(key)))
        batch.known = bulk_reads.known_idempotency_keys(
            tx, ctx.scope_ref, ctx.principal_ref, sorted(batch.queried)
        )
        batch.tombstones = bulk_reads.any_tombstone(tx, ctx.scope_ref)

    def _make_keys_durable(self, batch: _Batch) -> None:
        """Every key the batch's rows need, durable before its COMMIT: the accepted records'
        and those of candidates left pending."""
        batch.keys.extend((item, fresh.data_key) for item, fresh in batch.fresh.items())
        if not batch.keys:
            return
        scope = self._context(ADMIT, "keys").scope_ref
        store_item_keys(self.services.keys, self.services.root_key, scope, batch.keys)
        self.services.settings.failpoints.kill_after_key_write(ADMIT)

    def _clear_path(self, tx: Transaction, ctx: CallContext, item_id: str) -> None:
        """Before a new item's rows are written: a crashed earlier run may have left its key
        file with no committed owner (an orphan); it is shredded, as `fresh_key` does.

        Raises:
            ToolError: MUTATION_OUTCOME_UNKNOWN when a committed row owns it (never for new ids).
            KeyStoreUnavailable: the orphan cannot be removed.
        """
        keys = self.services.keys
        if not keys.holds(ctx.scope_ref, item_id):
            return
        if key_intents.has_row(tx, ctx.scope_ref, item_id):
            raise ToolError(ErrorCode.MUTATION_OUTCOME_UNKNOWN, "item committed meanwhile")
        if not keys.destroy(ctx.scope_ref, item_id):
            raise KeyStoreUnavailable("an orphan key file cannot be removed")

    def _stored(
        self, tx: Transaction, ctx: CallContext, batch: _Batch, mutation: steps.MutationKey
    ) -> tuple[steps.MutationKey, dict[str, JsonValue] | None]:
        """`steps.stored_result`, without a lookup for a key the batch's look-ahead found
        without a result and no line of the batch stored one for since.

        Raises:
            ToolError: DIGEST_CONFLICT when the key is bound to another operation.
        """
        digest = mutation.key_digest
        if digest in batch.queried and digest not in batch.known and digest not in batch.written:
            mutation = mutation.absent_in(tx)  # nothing has committed since the look-ahead
        return mutation, steps.stored_result(tx, ctx, mutation)

    def _discard_keys(self, batch: _Batch) -> None:
        """Shred the keys of a batch that did not commit (best effort: the next start's
        sweep removes what stays)."""
        scope = self._context(ADMIT, "keys").scope_ref
        for item_id, _ in batch.keys:
            self.services.keys.destroy(scope, item_id)

    # -- one line ------------------------------------------------------------------------

    def _context(self, tool: str, label: str, now_ms: int | None = None) -> CallContext:
        now = self.services.clock_ms() if now_ms is None else now_ms
        return context(self.services, self.binding, tool, label, now)

    def _counted(self, ctx: CallContext, call: PreparedCall) -> Refused | None:
        """Count the call against the rate limits it reached, in line order, where the tool
        counts them; its refusal, if a limit is exhausted or a prepared step refused it."""
        if call.limits is None:
            return call.refusal
        limits, made = call.limits
        exhausted = self.services.rate_limiter.admit(
            ctx.scope_ref, ctx.invocation.principal, limits, ctx.now_ms
        )
        if exhausted is not None:
            error = ToolError(ErrorCode.RATE_LIMITED, f"rate limit {exhausted}")
            return refused(error, upto(call.audit, made, 0, keyed=False))
        return call.refusal

    def _line(self, tx: Transaction, batch: _Batch, line: PreparedLine) -> str:
        """Capture then admit one line in `tx`; returns the line's outcome for the summary."""
        number, prepared = line.number, line.capture
        ctx = self._context(CAPTURE, f"line-{number}:capture", line.now_ms)
        failed = self._counted(ctx, prepared.call)
        if failed is not None:
            return self._refused(batch, number, ctx, failed)
        call = prepared.call
        assert call.mutation is not None  # prepared.call refused otherwise
        # The facts of the call at its idempotency lookup; the plan's stand if it is new.
        audit = upto(call.audit, *call.at_lookup)
        try:
            mutation, replay = self._stored(tx, ctx, batch, call.mutation)
            if replay is None:
                if prepared.plan_refusal is not None:
                    return self._refused(batch, number, ctx, prepared.plan_refusal)
                assert prepared.planned is not None  # as plan_refusal is None
                audit = call.audit
                planned = replace(prepared.planned, mutation=mutation)
                self._clear_path(tx, ctx, planned.candidate_id)
        except (ToolError, ProtocolRefusal) as refusal:
            return self._refused(batch, number, ctx, refused(refusal, audit))
        if replay is not None:
            candidate_id = str(capture.duplicate(audit, replay)["candidate_id"])
        else:
            candidate_id = planned.candidate_id
            guess = None if line.admission is None else line.admission.guess
            built = None if guess is None else (guess.cursor, guess.record)
            written = capture.write(tx, ctx, audit, planned, prepared.sealed, built)
            batch.written.add(mutation.key_digest)
            envelope = prepared.envelope or {}  # set whenever `planned` is
            batch.fresh[candidate_id] = _FreshCandidate(
                written.candidate, envelope, prepared.data_key, written.record
            )
        batch.audits.append((ctx, audit.facts("ok")))
        key = admission_key_for(prepared.idempotency_key)
        own = replay is None and line.admission is not None
        prepared_admission = line.admission if own else None
        if prepared_admission is None:
            prepared_admission = self.local.admission(number, candidate_id, key, line.now_ms, None)
        outcome = self._admit(tx, batch, number, line.now_ms, prepared_admission)
        return "replayed" if replay is not None and outcome == "replayed" else outcome

    def _admit(
        self, tx: Transaction, batch: _Batch, number: int, now_ms: int, prepared: PreparedAdmission
    ) -> str:
        """Admit the line's candidate in `tx` with the derived key; returns the outcome
        (`replayed` when the admission's result was stored before)."""
        ctx = self._context(ADMIT, f"line-{number}:admission", now_ms)
        failed = self._counted(ctx, prepared.call)
        if failed is not None:
            return self._refused(batch, number, ctx, failed)
        audit = prepared.call.audit
        try:
            decided = self._decide_admission(tx, ctx, audit, batch, prepared)
        except (ToolError, ProtocolRefusal) as refusal:
            return self._refused(batch, number, ctx, refused(refusal, audit))
        if not isinstance(decided, admission.AdmissionPlan):
            batch.audits.append((ctx, audit.facts("ok")))  # a replay writes only its entry
            return "replayed"
        sealed = None
        candidate_id = prepared.candidate_id
        if decided.outcome == "accept":
            record = decided.subject.record
            record_id = str(record["record_id"])
            self._clear_path(tx, ctx, record_id)
            record_key, sealed = sealed_record(ctx, prepared.guess, record)
            batch.keys.append((record_id, record_key))
        output = admission.write(tx, ctx, audit, decided, sealed, decided.index)
        batch.written.add(decided.mutation.key_digest)
        batch.audits.append((ctx, audit.facts("ok")))
        if decided.ends_candidate:
            batch.fresh.pop(candidate_id, None)  # ended with this transaction: no key needed
            batch.ended.append(candidate_id)
        return _status(output)

    def _decide_admission(
        self,
        tx: Transaction,
        ctx: CallContext,
        audit: CallAudit,
        batch: _Batch,
        prepared: PreparedAdmission,
    ) -> admission.AdmissionPlan | dict[str, JsonValue]:
        """The admission's steps from its idempotency lookup to its decision, as the tool
        takes them; the stored result instead when the key has one.

        Raises:
            ToolError / ProtocolRefusal: as the tool refuses (the line's admission only).
        """
        assert prepared.call.mutation is not None  # prepared.call refused otherwise
        mutation, stored = self._stored(tx, ctx, batch, prepared.call.mutation)
        if stored is not None:
            return stored
        candidate_id = prepared.candidate_id
        fresh = batch.fresh.get(candidate_id)
        if fresh is None:
            subject = admission.read_subject(tx, ctx, candidate_id)
            return admission.decide(ctx, audit, mutation, subject, prepared.classifiers)
        # Captured by this batch: its key is not written yet, its envelope and record at hand.
        subject = admission.subject_of(
            tx,
            ctx,
            fresh.row,
            dict(fresh.envelope),
            tombstones=batch.tombstones,
            record=fresh.record,
        )
        if not prepared.from_payload:
            return admission.decide(ctx, audit, mutation, subject, prepared.classifiers)
        index = prepared.index
        if index is not None:
            index = replace(index, record_id=str(subject.record["record_id"]))
        # The decision a worker asked at the cursor it guessed, if the capture landed there.
        guess = verified(prepared.guess, subject.record, self.services.clock_ms)
        if guess is not None:
            return admission.concluded(
                ctx, audit, mutation, subject, guess.result, index, guess.decision
            )
        return admission.decide_with_facts(ctx, audit, mutation, subject, prepared.facts, index)

    def _refused(self, batch: _Batch, number: int, ctx: CallContext, failed: Refused) -> str:
        """Audit a refused call as the tool's entry point would; say which line, by code."""
        batch.audits.append((ctx, failed.facts))
        self.progress(f"import: line {number} refused: {failed.outcome}")
        return failed.outcome


def _status(output: dict[str, JsonValue]) -> str:
    outcome = output.get("outcome")
    status = outcome.get("status") if isinstance(outcome, dict) else None
    return str(status) if isinstance(status, str) else "replayed"
