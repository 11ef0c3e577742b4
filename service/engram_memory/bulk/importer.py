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
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import (
    CommitOutcomeUnknown,
    KeyStoreUnavailable,
    ProtocolRefusal,
    ToolError,
)
from engram_memory.contract.types import ToolName
from engram_memory.core import item_keys, steps
from engram_memory.core.call_audit import AuditFacts, CallAudit, ToolOutcome, refusal_outcome
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.key_batch import store_item_keys
from engram_memory.crypto.sealing import new_data_key, seal
from engram_memory.host.context import InvocationContext
from engram_memory.store import bulk_reads, key_intents, memory
from engram_memory.store.batched_writes import BatchedWrites
from engram_memory.store.transaction import Transaction
from engram_memory.tools import admission, capture
from engram_memory.tools.dispatch import parse_call

CAPTURE = ToolName.CAPTURE
ADMIT = ToolName.REQUEST_ADMISSION
IMPORT_HOST = "host:import"
Progress = Callable[[str], None]


def admission_key_for(capture_key: str) -> str:
    """The admission's idempotency key of a line: a digest of its capture key, so that a
    rerun of the same file replays the admission too."""
    return "import-admission-" + hashlib.sha256(capture_key.encode()).hexdigest()


@dataclass(frozen=True)
class ImportBinding:
    """The scope and caller every line is bound to, as a host binds an agent's call."""

    tenant: str
    workspace: str
    principal: str
    purpose_ref: str
    # Every line's audit entries carry it (as session_ref); the CLI uses the session of the
    # operator's `admin:import` entry, so an auditor finds a run's lines from that entry.
    session: str


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


class Importer:
    """Loads lines for one binding; one instance per run."""

    def __init__(self, services: Services, binding: ImportBinding, progress: Progress) -> None:
        self.services = services
        self.binding = binding
        self.progress = progress
        self.counts: Counter[str] = Counter()

    def run(self, lines: Iterable[tuple[int, str]], total: int, batch_size: int) -> None:
        """Import numbered `lines` (blank ones already skipped), `batch_size` per COMMIT.

        Raises:
            StoreUnavailable / KeyStoreUnavailable / PolicyUnavailable / PolicyStale: the run
                stops; committed batches stay, the failing batch leaves nothing.
        """
        started = time.monotonic()
        done = 0
        for chunk in _chunks(lines, batch_size):
            self._batch(chunk)
            done += len(chunk)
            elapsed = max(time.monotonic() - started, 1e-9)
            rate = done / elapsed
            eta = (total - done) / rate if rate > 0 else 0.0
            self.progress(
                f"import: {done}/{total} lines committed, {rate:.1f} lines/s, ETA {eta:.0f} s"
            )

    def _batch(self, chunk: list[tuple[int, str]]) -> None:
        batch = _Batch()
        database = self.services.database
        commits_before = database.commits_on_this_thread()
        outcomes: list[str] = []
        try:
            with database.transaction() as direct:
                tx = BatchedWrites(direct)
                lines = [(number, _decoded(text)) for number, text in chunk]
                self._look_ahead(tx, batch, lines)
                outcomes = [self._line(tx, batch, number, raw) for number, raw in lines]
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

    def _look_ahead(self, tx: Transaction, batch: _Batch, lines: list[tuple[int, object]]) -> None:
        """Ask once for the batch what each line would ask the store: which of its keys hold
        a result, and whether the forget guard can match at all. A key found without one
        (and not written by the batch since) is looked up no further (`_stored`)."""
        ctx = self._context(CAPTURE, "look-ahead")
        for _, arguments in lines:
            key = arguments.get("idempotency_key") if isinstance(arguments, dict) else None
            if isinstance(key, str):
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
        if not keys.path_for(ctx.scope_ref, item_id).exists():
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

    def _context(self, tool: str, label: str) -> CallContext:
        now_ms = self.services.clock_ms()
        binding = self.binding
        invocation = InvocationContext(
            host_id=IMPORT_HOST,
            tenant=binding.tenant,
            workspace=binding.workspace,
            principal=binding.principal,
            agent_id=IMPORT_HOST,
            session=binding.session,
            purpose_ref=binding.purpose_ref,
            audit_id=f"{binding.session}:{label}",
            issued_at_s=now_ms // 1000,
            expires_at_s=now_ms // 1000 + 300,
        )
        return CallContext(self.services, invocation, tool, now_ms)

    def _line(self, tx: Transaction, batch: _Batch, number: int, raw: object) -> str:
        """Capture then admit one line in `tx`; returns the line's outcome for the summary."""
        ctx = self._context(CAPTURE, f"line-{number}:capture")
        audit = CallAudit()
        try:
            parsed = parse_call(ctx, audit, raw)
            mutation, authz = capture.guard(ctx, audit, parsed, None)
            mutation, replay = self._stored(tx, ctx, batch, mutation)
            if replay is None:
                planned = capture.plan(ctx, audit, parsed, mutation, authz)
                self._clear_path(tx, ctx, planned.candidate_id)
        except (ToolError, ProtocolRefusal) as refusal:
            return self._refused(batch, number, ctx, audit, refusal)
        if replay is not None:
            candidate_id = str(capture.duplicate(audit, replay)["candidate_id"])
        else:
            candidate_id = planned.candidate_id
            data_key = new_data_key()
            envelope = planned.envelope(ctx)
            sealed = self._seal(ctx, candidate_id, data_key, envelope)
            written = capture.write(tx, ctx, audit, planned, sealed)
            batch.written.add(mutation.key_digest)
            batch.fresh[candidate_id] = _FreshCandidate(written.candidate, envelope, data_key)
        batch.audits.append((ctx, audit.facts("ok")))
        key = admission_key_for(str(parsed.arguments["idempotency_key"]))
        outcome = self._admit(tx, batch, number, candidate_id, key)
        return "replayed" if replay is not None and outcome == "replayed" else outcome

    def _admit(
        self, tx: Transaction, batch: _Batch, number: int, candidate_id: str, key: str
    ) -> str:
        """Admit the line's candidate in `tx` with the derived key; returns the outcome
        (`replayed` when the admission's result was stored before)."""
        ctx = self._context(ADMIT, f"line-{number}:admission")
        audit = CallAudit()
        try:
            decided = self._decide_admission(tx, ctx, audit, batch, candidate_id, key)
        except (ToolError, ProtocolRefusal) as refusal:
            return self._refused(batch, number, ctx, audit, refusal)
        if not isinstance(decided, admission.AdmissionPlan):
            batch.audits.append((ctx, audit.facts("ok")))  # a replay writes only its entry
            return "replayed"
        sealed = None
        if decided.outcome == "accept":
            record = decided.subject.record
            record_id, record_key = str(record["record_id"]), new_data_key()
            self._clear_path(tx, ctx, record_id)
            sealed = self._seal(ctx, record_id, record_key, record)
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
        candidate_id: str,
        key: str,
    ) -> admission.AdmissionPlan | dict[str, JsonValue]:
        """The admission's steps up to its decision, as the tool takes them; the stored
        result instead when the key has one.

        Raises:
            ToolError / ProtocolRefusal: as the tool refuses (the line's admission only).
        """
        parsed = parse_call(ctx, audit, {"candidate_id": candidate_id, "idempotency_key": key})
        audit.targets(candidate_id)
        mutation, _ = steps.guard_mutation(ctx, audit, parsed, None, target=candidate_id)
        mutation, stored = self._stored(tx, ctx, batch, mutation)
        if stored is not None:
            return stored
        fresh = batch.fresh.get(candidate_id)
        if fresh is None:
            subject = admission.read_subject(tx, ctx, candidate_id)
        else:
            # Captured by this batch: its key is not written yet, its envelope is at hand.
            subject = admission.subject_of(
                tx, ctx, fresh.row, dict(fresh.envelope), tombstones=batch.tombstones
            )
        return admission.decide(ctx, audit, mutation, subject, parsed.classifiers)

    def _refused(
        self,
        batch: _Batch,
        number: int,
        ctx: CallContext,
        audit: CallAudit,
        refusal: ToolError | ProtocolRefusal,
    ) -> str:
        """Audit a refused call as the tool's entry point would; say which line, by code."""
        outcome = refusal_outcome(refusal)
        batch.audits.append((ctx, ToolOutcome.failed(refusal, audit).facts))
        self.progress(f"import: line {number} refused: {outcome}")
        return outcome

    @staticmethod
    def _seal(ctx: CallContext, item_id: str, data_key: bytes, body: dict[str, JsonValue]) -> bytes:
        return seal(data_key, canonical_json(dict(body)), ctx.scope_ref, item_id)


def _status(output: dict[str, JsonValue]) -> str:
    outcome = output.get("outcome")
    status = outcome.get("status") if isinstance(outcome, dict) else None
    return str(status) if isinstance(status, str) else "replayed"


def _decoded(text: str) -> object:
    """The line's arguments; a line that is not JSON reaches the argument checks as a
    non-object and is refused there (INVALID_SCHEMA), like such arguments from a client."""
    try:
        value: object = json.loads(text)
    except ValueError:
        return None
    return value


def _chunks(lines: Iterable[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    chunk: list[tuple[int, str]] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
