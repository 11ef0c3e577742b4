"""The gateway's own audit log: one hash-chained JSON line per refusal, confirmation and
upstream failure.

The store audits every call the gateway forwards (with the approver a confirmation carried);
what never reaches the store is recorded here: a token or purpose refused, a human's answer
to a confirmation (accepted or not), an upstream that could not be reached or was restarted.

Each line is the RFC 8785 form of one entry:
`{seq, at, audit_id, gateway_id, event, reason, [tenant, workspace, principal_ref, agent_id,
session], [tool, target, op_digest], [detail], prev_hash, entry_hash}`, where `entry_hash` is
`sha256:` + hex SHA-256 of the JCS line without `entry_hash`, and `prev_hash` is the previous
entry's `entry_hash` (64 zeros first). The principal is the store audit's unkeyed hash
(`engram-memory audit principal-ref`); tokens, keys and memory content are never written.

Every line is bounded (audit_bound.py): per event, reason, principal and tool, the first
lines of a window are written, the rest counted into one summary line (`detail.summary_count`,
`first_at`, `last_at`), so a client provoking lines in a loop writes at most burst + 1 per
key and window, and the counts stay exact.

A line is written in one `write` and fsynced before `record` returns; a call whose entry
cannot be written fails closed. One process owns a log (an exclusive `flock`); inside it,
writers are serialized by a lock. On start the tail is checked and the chain continues.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from engram_memory.contract.canonical import canonical_json
from engram_memory.contract.digests import principal_ref
from engram_memory.contract.exceptions import GatewayAuditInvalid, GatewayAuditUnavailable
from engram_memory.gateway.audit_bound import AuditBound, Counted
from engram_memory.gateway.caller import Caller

GENESIS_HASH = "sha256:" + "0" * 64
FILE_MODE = 0o600
# The tail is read backwards in blocks of this size to find the last line.
_TAIL_BLOCK = 64 * 1024
# The summary timer's shortest wait (the bound's clock may be a test's, not the wall's).
_MIN_TIMER_S = 0.05

log = logging.getLogger("engram_memory.gateway")


def _now_iso_ms() -> str:
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def _entry_hash(entry_without_hash: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(dict(entry_without_hash))).hexdigest()


@dataclass
class _Head:
    seq: int
    entry_hash: str


class GatewayAudit:
    """An open, exclusively owned gateway audit log (see the module docstring)."""

    def __init__(
        self, path: Path, gateway_id: str, fd: int, head: _Head, bound: AuditBound | None = None
    ) -> None:
        self.path = path
        self.gateway_id = gateway_id
        self._fd = fd
        self._head = head
        self._lock = threading.Lock()
        self._bound = bound if bound is not None else AuditBound()
        self._timer: threading.Timer | None = None

    @classmethod
    def open(cls, path: Path, gateway_id: str, bound: AuditBound | None = None) -> GatewayAudit:
        """Open (or create, mode 0600) the log at `path` and continue its chain; `bound`
        decides how many lines a storm writes (audit_bound.py; its defaults when None).

        Raises:
            GatewayAuditUnavailable: the file cannot be created, opened or locked (another
                gateway writes it), or its last entry does not verify (a torn or edited tail
                is the operator's to inspect with `verify-audit`, never written on).
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise GatewayAuditUnavailable(f"audit log {path} cannot be opened: {reason}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                raise GatewayAuditUnavailable(
                    f"audit log {path} is in use by another gateway process: each MCP client "
                    "needs its own configuration with its own audit_log "
                    "(docs/operators/checking-configs.md, 'Several clients')"
                ) from exc
            head = _read_head(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, gateway_id, fd, head, bound)

    def close(self) -> None:
        """Write every summary still owed, then close (a failed write is logged)."""
        with self._lock:
            self._write_all_owed()
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def flush_all(self) -> None:
        """Write every summary still owed, ended or not (when serving stops)."""
        with self._lock:
            self._write_all_owed()

    def _write_all_owed(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._fd < 0:
            return
        try:
            self._write_summaries(self._bound.drain())
        except GatewayAuditUnavailable:
            log.error("gateway audit log: summaries owed at stop not written")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def record(
        self,
        event: str,
        *,
        reason: str,
        caller: Caller | None = None,
        tool: str | None = None,
        target: str | None = None,
        op_digest: str | None = None,
        detail: Mapping[str, str] | None = None,
    ) -> str:
        """Append one entry, fsynced before returning, or count it into its window's
        summary (audit_bound.py); its `audit_id` (`audit:gw-<uuid>`), the summary's when
        counted.

        Raises:
            GatewayAuditUnavailable: the entry (or a summary owed before it) could not be
                written durably.
        """
        fields: dict[str, Any] = {"event": event, "reason": reason}
        if caller is not None:
            fields.update(
                tenant=caller.tenant,
                workspace=caller.workspace,
                principal_ref=principal_ref(caller.tenant, caller.principal),
                agent_id=caller.agent_id,
                session=caller.session,
            )
        if tool is not None:
            fields["tool"] = tool
        key = (event, reason, str(fields.get("principal_ref", "")), tool or "")
        # What one call acted on is never summarised: a summary names no single target.
        acted_on = {"target": target, "op_digest": op_digest}
        with self._lock:
            if self._fd < 0:
                raise GatewayAuditUnavailable("audit log is closed")
            self._write_summaries(self._bound.due())
            counted_into = self._bound.admit(key, fields, dict(detail or {}))
            if counted_into is not None:
                self._schedule()
                return counted_into
            audit_id = f"audit:gw-{uuid.uuid4().hex}"
            entry = {"audit_id": audit_id, "gateway_id": self.gateway_id, **fields}
            entry.update({name: value for name, value in acted_on.items() if value is not None})
            if detail:
                entry["detail"] = dict(detail)
            self._append(entry)
        return audit_id

    def flush_due(self) -> None:
        """Write the summaries of the windows that have ended (the timer's work)."""
        with self._lock:
            self._timer = None
            if self._fd < 0:
                return
            try:
                self._write_summaries(self._bound.due())
            except GatewayAuditUnavailable:
                log.error("gateway audit log: summaries not written; retried")
            self._schedule()

    def _schedule(self) -> None:
        """Under the lock: a timer for the earliest summary owed, unless one is set."""
        if self._timer is not None:
            return
        next_end = self._bound.next_end_s()
        if next_end is None:
            return
        # Never busier than every _MIN_TIMER_S, never longer than a window.
        wait_s = min(max(next_end - self._bound.clock(), _MIN_TIMER_S), self._bound.interval_s)
        self._timer = threading.Timer(wait_s, self.flush_due)
        self._timer.daemon = True
        self._timer.start()

    def _write_summaries(self, owed: list[Counted]) -> None:
        """Under the lock: one line per window's counted lines.

        Raises:
            GatewayAuditUnavailable: a line could not be written (the rest stay owed).
        """
        for index, counted in enumerate(owed):
            entry: dict[str, Any] = {"audit_id": counted.audit_id, "gateway_id": self.gateway_id}
            entry.update(counted.fields)
            entry["detail"] = counted.summary_detail()
            try:
                self._append(entry)
            except GatewayAuditUnavailable:
                self._bound.owe(owed[index:])
                raise

    def _append(self, entry: dict[str, Any]) -> None:
        """Under the lock: chain, write and fsync one entry.

        Raises:
            GatewayAuditUnavailable: the entry could not be written durably.
        """
        entry["seq"] = self._head.seq + 1
        entry["at"] = _now_iso_ms()
        entry["prev_hash"] = self._head.entry_hash
        entry["entry_hash"] = _entry_hash(entry)
        line = canonical_json(entry) + b"\n"
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError("short write")
            os.fsync(self._fd)
        except OSError as exc:
            raise GatewayAuditUnavailable("audit log write failed") from exc
        self._head = _Head(entry["seq"], entry["entry_hash"])


def _read_head(fd: int, path: Path) -> _Head:
    """The last entry's seq and hash (genesis for an empty file), after checking it.

    Raises:
        GatewayAuditUnavailable: the last line is torn, not JSON, or its hash is wrong.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return _Head(0, GENESIS_HASH)
    start = max(0, size - _TAIL_BLOCK)
    tail = os.pread(fd, size - start, start)
    while tail.count(b"\n") < 2 and start > 0:
        start = max(0, start - _TAIL_BLOCK)
        tail = os.pread(fd, size - start, start)
    if not tail.endswith(b"\n"):
        raise GatewayAuditUnavailable(f"audit log {path} ends in a torn line; run verify-audit")
    last = tail[:-1].rsplit(b"\n", 1)[-1]
    try:
        entry = _checked_entry(last)
    except ValueError as exc:
        raise GatewayAuditUnavailable(
            f"audit log {path} last entry does not verify ({exc}); run verify-audit"
        ) from None
    return _Head(int(entry["seq"]), str(entry["entry_hash"]))


def _checked_entry(line: bytes) -> dict[str, Any]:
    """One line parsed, in canonical form, with a correct `entry_hash`.

    Raises:
        ValueError: not JSON, not canonical, or the hash does not match.
    """
    entry = json.loads(line)
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    claimed = entry.pop("entry_hash", None)
    if not isinstance(claimed, str) or claimed != _entry_hash(entry):
        raise ValueError("entry_hash mismatch")
    entry["entry_hash"] = claimed
    if canonical_json(entry) != line:
        raise ValueError("not in canonical form")
    if not isinstance(entry.get("seq"), int) or not isinstance(entry.get("prev_hash"), str):
        raise ValueError("seq or prev_hash missing")
    return entry


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        yield from handle


def verify_audit(path: Path) -> int:
    """Re-check the whole chain; the number of entries.

    Raises:
        GatewayAuditInvalid: the first line that is torn, edited, reordered, or whose
            `prev_hash`/`seq` does not follow its predecessor.
        OSError: the file cannot be read.
    """
    previous, count = GENESIS_HASH, 0
    for number, raw in enumerate(_lines(path), start=1):
        if not raw.endswith(b"\n"):
            raise GatewayAuditInvalid(number, "torn line (no newline)")
        try:
            entry = _checked_entry(raw[:-1])
        except ValueError as exc:
            raise GatewayAuditInvalid(number, str(exc)) from None
        if entry["prev_hash"] != previous:
            raise GatewayAuditInvalid(number, "prev_hash does not match the previous entry")
        if entry["seq"] != count + 1:
            raise GatewayAuditInvalid(number, "seq out of order")
        previous, count = str(entry["entry_hash"]), count + 1
    return count


@contextlib.contextmanager
def open_audit(path: Path, gateway_id: str) -> Iterator[GatewayAudit]:
    """`GatewayAudit.open` as a context manager.

    Raises:
        GatewayAuditUnavailable: as `GatewayAudit.open`.
    """
    audit = GatewayAudit.open(path, gateway_id)
    try:
        yield audit
    finally:
        audit.close()
