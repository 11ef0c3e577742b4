"""SIGKILL the real server at each named point of capture, admission (accept and reject),
withdraw and forget; restart it; prove nothing acknowledged is lost or re-executed, no shredded
content opens with the root key, and `audit verify` (the CLI) tells the truth.

One data directory lives through a chain of server runs, to keep the suite fast: run N is
started armed with crash N (`ENGRAM_UNSAFE_FAILPOINTS`), first retries crash N-1's call with
the same idempotency key, then makes the call that kills it. Between runs the stopped store is
checked by `audit verify`. The journey is recorded once per module and each crash is asserted
by its own test.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.failpoints import (
    KILL_AFTER_COMMIT,
    KILL_AFTER_KEY_WRITE,
    KILL_DURING_DESTRUCTION,
)
from tests.faults.keys_support import (
    ADMIT,
    CAPTURE,
    FORGET,
    GET,
    WITHDRAW,
    Life,
    Secrets,
    audit_verify,
    audit_verify_of_a_copy,
    candidate_id,
    key_path,
    openable,
    server_life,
    stored_items,
)

pytestmark = pytest.mark.e2e

SIGKILLED = -9


@dataclass
class Crash:
    """What one armed crash did, and what the next run and `audit verify` made of it."""

    status: int = 0
    fired: bool = False
    audit_after_crash: int = -1
    audit_text: str = ""
    ended_keys_left_after_crash: int = 0
    ended_keys_left_after_restart: int = -1
    retry: dict[str, Any] = field(default_factory=dict)


@dataclass
class Journey:
    data_dir: Path
    secrets: Secrets
    crashes: dict[str, Crash] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    surviving_key_copy: bytes = b""
    final_get: dict[str, Any] = field(default_factory=dict)


def _key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def _value(envelope: dict[str, Any]) -> dict[str, Any]:
    assert envelope.get("ok") is True, envelope
    value: dict[str, Any] = envelope["output"]["value"]
    return value


class JourneyRunner:
    """Runs the chain; `ended` lists the items whose keys a committed call promised to destroy."""

    def __init__(self, journey: Journey) -> None:
        self.journey = journey
        self.ended: list[str] = []
        self.verdicts: dict[str, subprocess.CompletedProcess[str]] = {}

    def _ended_keys_left(self) -> int:
        return sum(key_path(self.journey.data_dir, item).exists() for item in self.ended)

    async def crash(
        self, life: Life, name: str, tool: str, arguments: dict[str, Any], target: str | None
    ) -> None:
        crash = self.journey.crashes.setdefault(name, Crash())
        crash.status = await life.call_until_killed(tool, arguments, target)
        point = name.split("@")[1]
        crash.fired = any(f"fired: {point}:{tool}".encode() in line for line in life.log)

    def after_crash(self, name: str) -> None:
        """The stopped store, before any restart: what `audit verify` says about it (run on a
        copy, so that the next run starts on the store as the crash left it)."""
        crash = self.journey.crashes[name]
        crash.ended_keys_left_after_crash = self._ended_keys_left()
        copy = self.journey.data_dir.with_name(f"after-{len(self.journey.crashes)}")
        self.verdicts[name] = audit_verify_of_a_copy(self.journey.data_dir, copy)

    def restarted(self, name: str) -> None:
        """Called as soon as the next run listens, before it served any call."""
        crash = self.journey.crashes[name]
        crash.ended_keys_left_after_restart = self._ended_keys_left()
        verdict = self.verdicts[name]
        crash.audit_text = verdict.stdout + verdict.stderr
        crash.audit_after_crash = verdict.returncode

    async def run(self) -> None:
        """The chain. An armed failpoint fires at the first call that reaches it, so a run
        retries only calls that cannot reach its own point (a replay returns before it)."""
        j, ids = self.journey, self.journey.ids
        capture_a = demo_capture_arguments("Refund approved for order 4711.", _key("a"))
        capture_b = demo_capture_arguments("Refund approved for order 4712.", _key("b"))
        capture_c = demo_capture_arguments(
            "Unverified claim.", _key("c"), evidence_ref="evidence:untrusted/x"
        )
        capture_d = demo_capture_arguments("Withdraw me.", _key("d"))
        captures = (capture_a, capture_b, capture_c, capture_d)
        for label, arguments in zip("abcd", captures, strict=True):
            ids[label] = candidate_id(arguments["idempotency_key"])
        admit_a = {"candidate_id": ids["a"], "idempotency_key": _key("admit-a")}
        admit_b = {"candidate_id": ids["b"], "idempotency_key": _key("admit-b")}
        admit_c = {"candidate_id": ids["c"], "idempotency_key": _key("admit-c")}
        withdraw_d = {
            "candidate_id": ids["d"],
            "idempotency_key": _key("withdraw-d"),
            "reason_ref": "reason:test",
        }

        first = f"capture@{KILL_AFTER_KEY_WRITE}"
        async with server_life(j.data_dir, j.secrets, f"{KILL_AFTER_KEY_WRITE}:{CAPTURE}") as life:
            await self.crash(life, first, CAPTURE, capture_a, None)
        self.after_crash(first)
        ids["orphan_after_key_write"] = str(key_path(j.data_dir, ids["a"]).exists())

        second = f"capture@{KILL_AFTER_COMMIT}"
        async with server_life(j.data_dir, j.secrets, f"{KILL_AFTER_COMMIT}:{CAPTURE}") as life:
            self.restarted(first)
            await self.crash(life, second, CAPTURE, capture_b, None)
        self.after_crash(second)

        previous, name = second, f"accept@{KILL_AFTER_KEY_WRITE}"
        async with server_life(j.data_dir, j.secrets, f"{KILL_AFTER_KEY_WRITE}:{ADMIT}") as life:
            self.restarted(previous)
            j.crashes[first].retry = await life.call(CAPTURE, capture_a)
            j.crashes[second].retry = await life.call(CAPTURE, capture_b)
            await self.crash(life, name, ADMIT, admit_a, None)
        self.after_crash(name)

        previous, name = name, f"withdraw@{KILL_AFTER_COMMIT}"
        async with server_life(j.data_dir, j.secrets, f"{KILL_AFTER_COMMIT}:{WITHDRAW}") as life:
            self.restarted(previous)
            j.crashes[previous].retry = await life.call(ADMIT, admit_a)
            ids["record_a"] = _value(j.crashes[previous].retry)["outcome"]["record_id"]
            self.ended.append(ids["a"])
            _value(await life.call(CAPTURE, capture_d))
            await self.crash(life, name, WITHDRAW, withdraw_d, ids["d"])
            self.ended.append(ids["d"])
        self.after_crash(name)

        previous, name = name, f"accept@{KILL_AFTER_COMMIT}"
        async with server_life(j.data_dir, j.secrets, f"{KILL_AFTER_COMMIT}:{ADMIT}") as life:
            self.restarted(previous)
            j.crashes[previous].retry = await life.call(WITHDRAW, withdraw_d, ids["d"])
            await self.crash(life, name, ADMIT, admit_b, None)
            self.ended.append(ids["b"])
        self.after_crash(name)

        previous, name = name, f"reject@{KILL_AFTER_COMMIT}"
        async with server_life(j.data_dir, j.secrets, f"{KILL_AFTER_COMMIT}:{ADMIT}") as life:
            self.restarted(previous)
            j.crashes[previous].retry = await life.call(ADMIT, admit_b)
            ids["record_b"] = _value(j.crashes[previous].retry)["outcome"]["record_id"]
            _value(await life.call(CAPTURE, capture_c))
            await self.crash(life, name, ADMIT, admit_c, None)
            self.ended.append(ids["c"])
        self.after_crash(name)

        forget_a = {
            "record_id": ids["record_a"],
            "idempotency_key": _key("forget-a"),
            "reason_ref": "reason:test",
        }
        previous, name = name, f"forget@{KILL_DURING_DESTRUCTION}"
        async with server_life(
            j.data_dir, j.secrets, f"{KILL_DURING_DESTRUCTION}:{FORGET}"
        ) as life:
            self.restarted(previous)
            j.crashes[previous].retry = await life.call(ADMIT, admit_c)
            await self.crash(life, name, FORGET, forget_a, ids["record_a"])
            self.ended.append(ids["record_a"])
        self.after_crash(name)
        # Kept to plant it back later: a key that outlived its record's forget.
        j.surviving_key_copy = key_path(j.data_dir, ids["record_a"]).read_bytes()

        forget_b = {
            "record_id": ids["record_b"],
            "idempotency_key": _key("forget-b"),
            "reason_ref": "reason:test",
        }
        previous, name = name, f"forget@{KILL_AFTER_COMMIT}"
        async with server_life(j.data_dir, j.secrets, f"{KILL_AFTER_COMMIT}:{FORGET}") as life:
            self.restarted(previous)
            j.crashes[previous].retry = await life.call(FORGET, forget_a, ids["record_a"])
            await self.crash(life, name, FORGET, forget_b, ids["record_b"])
            self.ended.append(ids["record_b"])
        self.after_crash(name)

        async with server_life(j.data_dir, j.secrets) as life:
            self.restarted(name)
            j.crashes[name].retry = await life.call(FORGET, forget_b, ids["record_b"])
            j.final_get = await life.call(
                GET, {"record_id": ids["record_b"], "purpose_ref": "purpose:support-case"}
            )
            # One item stays live, so the final checks see a key that must open its content.
            live = demo_capture_arguments("Still remembered.", _key("e"))
            ids["e"] = _value(await life.call(CAPTURE, live))["candidate_id"]
            admit_e = {"candidate_id": ids["e"], "idempotency_key": _key("admit-e")}
            ids["record_e"] = _value(await life.call(ADMIT, admit_e))["outcome"]["record_id"]
            self.ended.append(ids["e"])


@pytest.fixture(scope="module")
def journey(tmp_path_factory: pytest.TempPathFactory) -> Journey:
    base = tmp_path_factory.mktemp("key-crashes")
    secrets = Secrets(*init_host_dir(base / "secrets"))
    recorded = Journey(base / "data", secrets)
    asyncio.run(JourneyRunner(recorded).run())
    return recorded


# Per crash: does the stopped store right after it hold a key that must go (so `audit verify`
# must fail), and what must the retry with the same idempotency key after the restart return.
EXPECTED = {
    f"capture@{KILL_AFTER_KEY_WRITE}": (0, "first execution"),
    f"capture@{KILL_AFTER_COMMIT}": (0, "replay"),
    f"accept@{KILL_AFTER_KEY_WRITE}": (0, "first execution"),
    f"accept@{KILL_AFTER_COMMIT}": (1, "replay"),
    f"reject@{KILL_AFTER_COMMIT}": (1, "replay"),
    f"withdraw@{KILL_AFTER_COMMIT}": (1, "replay"),
    f"forget@{KILL_DURING_DESTRUCTION}": (1, "replay"),
    f"forget@{KILL_AFTER_COMMIT}": (1, "replay"),
}


def _replayed(retry: dict[str, Any]) -> bool:
    value = _value(retry)
    if "status" in value:  # capture: a replay is `duplicate_exact`, a first execution is not
        return bool(value["status"] == "duplicate_exact")
    return bool(value["replayed"])


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_crash_at_each_point_loses_nothing_and_every_promised_key_goes_at_restart(
    journey: Journey, name: str
) -> None:
    crash = journey.crashes[name]
    surviving_keys_expected, retry_kind = EXPECTED[name]
    assert (crash.status, crash.fired) == (SIGKILLED, True)
    # The stopped store is what it is, and `audit verify` says so.
    assert crash.ended_keys_left_after_crash == surviving_keys_expected
    assert crash.audit_after_crash == surviving_keys_expected, crash.audit_text
    # The restart carried out every promised destruction before it served a call.
    assert crash.ended_keys_left_after_restart == 0
    assert _replayed(crash.retry) is (retry_kind == "replay")


def test_a_crash_after_the_key_write_leaves_an_orphan_key_and_the_retry_commits_once(
    journey: Journey,
) -> None:
    assert journey.ids["orphan_after_key_write"] == "True"
    retry = _value(journey.crashes[f"capture@{KILL_AFTER_KEY_WRITE}"].retry)
    assert (retry["status"], retry["candidate_id"]) == ("committed_pending", journey.ids["a"])


def test_replays_of_withdraw_and_forget_report_destruction_complete(journey: Journey) -> None:
    withdrawn = _value(journey.crashes[f"withdraw@{KILL_AFTER_COMMIT}"].retry)
    assert withdrawn["key_destruction"] == "complete"
    for point in (KILL_DURING_DESTRUCTION, KILL_AFTER_COMMIT):
        forgotten = _value(journey.crashes[f"forget@{point}"].retry)
        assert forgotten["projection_invalidation"] == "complete"
        assert "coverage_receipt_digest" in forgotten
    assert journey.final_get["error"]["code"] == "NOT_FOUND"


def test_every_acknowledged_transition_is_journaled_exactly_once(journey: Journey) -> None:
    import duckdb

    from engram_memory.store.connection import DATABASE_FILE

    connection = duckdb.connect(str(journey.data_dir / DATABASE_FILE), read_only=True)
    try:
        counts = dict(
            connection.execute(
                "SELECT operation, count(*) FROM journal_events GROUP BY operation"
            ).fetchall()
        )
    finally:
        connection.close()
    assert counts == {"capture": 5, "accept": 3, "reject": 1, "withdraw": 1, "tombstone": 2}


def test_no_ended_content_opens_with_the_root_key_and_live_content_does(
    journey: Journey,
) -> None:
    items = stored_items(journey.data_dir)
    live = {journey.ids["record_e"]}
    assert {i.item_id for i in items if i.state in ("pending", "accepted_current")} == live
    for item in items:
        if item.item_id in live:
            assert item.sealed_body is not None
            assert openable(journey.data_dir, journey.secrets.root_key, item, item.sealed_body)
        else:
            # Promoted, rejected and withdrawn candidates keep no body; tombstones neither.
            assert item.sealed_body is None, item
            assert not key_path(journey.data_dir, item.item_id).exists(), item


def test_audit_verify_passes_on_the_settled_store(journey: Journey) -> None:
    verdict = audit_verify(journey.data_dir)
    assert verdict.returncode == 0, verdict.stderr
    assert verdict.stdout.startswith("ok:")


def test_audit_verify_fails_on_a_planted_key_of_a_forgotten_record(journey: Journey) -> None:
    planted = key_path(journey.data_dir, journey.ids["record_a"])
    planted.write_bytes(journey.surviving_key_copy)
    try:
        assert audit_verify(journey.data_dir).returncode == 1
    finally:
        planted.unlink()


def test_audit_verify_fails_when_a_live_record_lost_its_key(
    journey: Journey, tmp_path: Path
) -> None:
    live_key = key_path(journey.data_dir, journey.ids["record_e"])
    aside = tmp_path / "aside.key"
    shutil.move(live_key, aside)
    try:
        assert audit_verify(journey.data_dir).returncode == 1
    finally:
        shutil.move(aside, live_key)
