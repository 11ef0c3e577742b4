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
from engram_memory.contract.errors import ErrorCode, ProtocolRefusal, ToolError
from engram_memory.core import item_keys, steps
from engram_memory.core.call_audit import AuditFacts, CallAudit, ToolOutcome, refusal_outcome
from engram_memory.core.runtime import CallContext, Services
from engram_memory.crypto.key_batch import store_item_keys
from engram_memory.crypto.keystore import KeyStoreUnavailable
from engram_memory.crypto.sealing import new_data_key, seal
from engram_memory.host.context import InvocationContext
from engram_memory.store import key_intents, memory
from engram_memory.store.database import Transaction
from engram_memory.tools import admission, capture
from engram_memory.tools.dispatch import parse_call

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
IMPORT_HOST = "host:import"
DEFAULT_BATCH = 500
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
    session: str  # links the lines' audit entries to the operator's run (session_ref)


@dataclass
class _Batch:
    """What one batch's transaction must still do before its COMMIT, and after it."""

    audits: list[tuple[CallContext, AuditFacts]] = field(default_factory=list)
    keys: list[tuple[str, bytes]] = field(default_factory=list)  # (item id, data key)
    # Candidates captured in this batch whose key is not written yet: item id -> envelope.
    fresh: dict[str, tuple[dict[str, JsonValue], bytes]] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)


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
            with database.transaction() as tx:
                outcomes = [self._line(tx, batch, number, text) for number, text in chunk]
                self._make_keys_durable(tx, batch)
                steps.write_audits(tx, batch.audits)
        except BaseException:
            if database.commits_on_this_thread() == commits_before:
                self._discard_keys(batch)
            raise
        self.counts.update(outcomes)
        # Accept and reject end the candidate: carry out the promised key destructions.
        item_keys.after_commit(self._context(ADMIT, "end"), batch.ended)

    def _make_keys_durable(self, tx: Transaction, batch: _Batch) -> None:
        """Every key the batch's rows need, durable before its COMMIT: the accepted records'
        and those of candidates left pending."""
        batch.keys.extend((item, key) for item, (_, key) in batch.fresh.items())
        if not batch.keys:
            return
        keys = self.services.keys
        scope = self._context(ADMIT, "keys").scope_ref
        for item_id, _ in batch.keys:
            # A crashed earlier run may have left this item's key without a committed owner.
            if keys.path_for(scope, item_id).exists():
                if key_intents.has_row(tx, scope, item_id) and item_id not in batch.fresh:
                    raise KeyStoreUnavailable("a committed item already owns this key")
                if not keys.destroy(scope, item_id):
                    raise KeyStoreUnavailable("an orphan key file cannot be removed")
        store_item_keys(keys, self.services.root_key, scope, batch.keys)
        self.services.settings.failpoints.kill_after_key_write(ADMIT)

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

    def _line(self, tx: Transaction, batch: _Batch, number: int, text: str) -> str:
        """Capture then admit one line in `tx`; returns the line's outcome for the summary."""
        ctx = self._context(CAPTURE, f"line-{number}:capture")
        audit = CallAudit()
        try:
            parsed = parse_call(ctx, audit, _decoded(text))
            mutation, authz = capture.guard(ctx, audit, parsed, None)
            replay = steps.stored_result(tx, ctx, mutation)
            planned = (
                None if replay is not None else capture.plan(ctx, audit, parsed, mutation, authz)
            )
        except (ToolError, ProtocolRefusal) as refusal:
            batch.audits.append((ctx, ToolOutcome.failed(refusal, audit).facts))
            return refusal_outcome(refusal)
        if replay is not None:
            candidate_id = str(capture.duplicate(audit, replay)["candidate_id"])
            written = None
        else:
            assert planned is not None
            candidate_id = planned.candidate_id
            data_key = new_data_key()
            envelope = planned.envelope(ctx)
            written = capture.write(
                tx, ctx, audit, planned, self._seal(ctx, candidate_id, data_key, envelope)
            )
            batch.fresh[candidate_id] = (envelope, data_key)
        batch.audits.append((ctx, audit.facts("ok")))
        key = admission_key_for(str(parsed.arguments["idempotency_key"]))
        return self._admit(tx, batch, number, candidate_id, key, replayed=written is None)

    def _admit(
        self,
        tx: Transaction,
        batch: _Batch,
        number: int,
        candidate_id: str,
        key: str,
        *,
        replayed: bool,
    ) -> str:
        ctx = self._context(ADMIT, f"line-{number}:admission")
        audit = CallAudit()
        try:
            parsed = parse_call(ctx, audit, {"candidate_id": candidate_id, "idempotency_key": key})
            audit.targets(candidate_id)
            mutation, _ = steps.guard_mutation(ctx, audit, parsed, None, target=candidate_id)
            stored = steps.stored_result(tx, ctx, mutation)
            if stored is None:
                planned = admission.decide(
                    ctx, audit, mutation, self._subject(tx, ctx, batch, candidate_id)
                )
        except (ToolError, ProtocolRefusal) as refusal:
            batch.audits.append((ctx, ToolOutcome.failed(refusal, audit).facts))
            return refusal_outcome(refusal)
        if stored is not None:
            batch.audits.append((ctx, audit.facts("ok")))
            return "replayed" if replayed else _status(stored)
        sealed = None
        if planned.outcome == "accept":
            record = planned.subject.record
            record_key = new_data_key()
            sealed = self._seal(ctx, str(record["record_id"]), record_key, record)
            batch.keys.append((str(record["record_id"]), record_key))
        output = admission.write(tx, ctx, audit, planned, sealed, planned.index)
        batch.audits.append((ctx, audit.facts("ok")))
        if planned.ends_candidate:
            batch.fresh.pop(candidate_id, None)  # ended with this transaction: no key needed
            batch.ended.append(candidate_id)
        return _status(output)

    def _subject(
        self, tx: Transaction, ctx: CallContext, batch: _Batch, candidate_id: str
    ) -> admission.AdmissionSubject:
        """The admission's subject: read from the store as the tool reads it, unless the
        candidate was captured in this batch and its key is not written yet."""
        fresh = batch.fresh.get(candidate_id)
        if fresh is None:
            return admission.read_subject(tx, ctx, candidate_id)
        candidate = memory.get_candidate(tx, ctx.scope_ref, candidate_id)
        if candidate is None or candidate.state != "pending":
            raise ToolError(ErrorCode.NOT_FOUND, "candidate unknown, foreign or not pending")
        return admission.subject_of(tx, ctx, candidate, dict(fresh[0]))

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
