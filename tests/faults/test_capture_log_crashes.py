"""Issue 20 on the real server process: a capture commits by one call-log record (its
candidate with the sealed body, journal event, idempotency result and audit entry), so the
crashes around that record must lose nothing acknowledged, write nothing twice, never shred
the key of an acknowledged capture, and leave nothing of an unacknowledged one that opens.

- SIGKILL after the record is durable and anchored, before the answer: the restarted server
  replays the record; a retry with the same key answers the stored result.
- SIGKILL while concurrent captures are being flushed: every answered capture is there once,
  with its key; every other is there whole (its record was durable) or not at all.
- SIGKILL during the projection of a capture's record, and between its COMMIT and the release.
- A torn tail holding the capture's record is cut with one log line (it was never answered):
  its candidate does not exist and its key file is an orphan the sweep removes.
- A flipped byte in the segment holding it: exit 4; the segment deleted: exit 3 when nothing
  of it was projected (the anchor names the capture's journal event and audit entry, which
  neither the file nor the log hold), exit 4 when the file projected part of it (the log
  ends before the file's position).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import connect
from engram_memory.core.failpoints import (
    KILL_AFTER_LOG_APPEND,
    KILL_AFTER_PROJECTION,
    KILL_DURING_PROJECTION,
    PAUSE_PROJECTION,
)
from engram_memory.core.key_recovery import recover_key_directory
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.store.anchors import ANCHOR_STEM
from engram_memory.store.call_log import DIRECTORY
from engram_memory.store.database import Database
from tests.faults.integrity_support import (
    EXIT_BEHIND_ANCHOR,
    EXIT_DAMAGED,
    Acknowledged,
    audit_trail,
    audit_verify,
    flip_byte_at,
    start,
    store_files,
)
from tests.faults.keys_support import (
    ALICE,
    CAPTURE,
    DEATH_TIMEOUT_S,
    Secrets,
    candidate_id,
    key_path,
    openable,
    server_life,
    stored_items,
)
from tests.servers import server_env

pytestmark = pytest.mark.e2e

SIGKILLED = -9
CONCURRENT = 6


def _arguments(label: str) -> dict[str, Any]:
    return demo_capture_arguments(f"Refund approved ({label}).", f"{label}-{uuid.uuid4().hex}")


@dataclass
class Run:
    store: Acknowledged
    secrets: Secrets
    status: int
    answered: list[dict[str, Any]]  # the arguments of every capture that was answered
    doomed: dict[str, Any]  # the arguments of the capture in flight at the kill
    # The head anchor as it was before the last answered capture (its flush never ended).
    anchor_before: Path | None = None

    def copy_to(self, target: Path) -> Run:
        copy = self.store.copy_to(target)
        return Run(copy, self.secrets, self.status, self.answered, self.doomed, self.anchor_before)

    @property
    def segment(self) -> Path:
        (only,) = sorted((self.store.data_dir / DIRECTORY).glob("*.seg"))
        return only


def _new_store(base: Path) -> tuple[Acknowledged, Secrets]:
    secrets = Secrets(*init_host_dir(base / "secrets"))
    data_dir = base / "data"
    env = server_env(data_dir, secrets.root_key, secrets.public_keys)
    return Acknowledged(data_dir, env, secrets.signer), secrets


async def _capture_then_killed(base: Path) -> Run:
    """A capture killed after its record is durable, before its answer; then, on the
    restarted server, one answered (its projection paused: it stays in the log only)."""
    store, secrets = _new_store(base)
    answered, doomed = _arguments("answered"), _arguments("doomed")
    async with server_life(store.data_dir, secrets, f"{KILL_AFTER_LOG_APPEND}:{CAPTURE}") as life:
        status = await life.call_until_killed(CAPTURE, doomed)
    anchor_before = base / "anchor-before"
    async with server_life(store.data_dir, secrets, f"{PAUSE_PROJECTION}:{CAPTURE}") as life:
        anchor_before.mkdir()
        for slot in store.data_dir.glob(f"{ANCHOR_STEM}.*"):  # between calls: at rest
            shutil.copy2(slot, anchor_before / slot.name)
        assert (await life.call(CAPTURE, answered))["ok"] is True
        life.process.kill()  # no clean close: the answered capture is in the log only
        await anyio.to_thread.run_sync(life.process.wait, DEATH_TIMEOUT_S)
    return Run(store, secrets, status, [answered], doomed, anchor_before)


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return asyncio.run(_capture_then_killed(tmp_path_factory.mktemp("capture-log")))


def _candidates(run: Run) -> list[str]:
    return [i.item_id for i in stored_items(run.store.data_dir) if i.kind == "candidate"]


def _id(arguments: dict[str, Any]) -> str:
    return candidate_id(str(arguments["idempotency_key"]))


def _projected(run: Run) -> None:
    """`audit verify` with the root key (projects the log first) passes."""
    verified = audit_verify(run.store)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _key_opens(run: Run, item_id: str) -> bool:
    (item,) = [i for i in stored_items(run.store.data_dir) if i.item_id == item_id]
    assert item.sealed_body is not None
    return openable(run.store.data_dir, run.secrets.root_key, item, item.sealed_body)


def test_a_kill_after_the_append_keeps_the_unanswered_capture_and_its_key(
    killed: Run, tmp_path: Path
) -> None:
    assert killed.status == SIGKILLED
    run = killed.copy_to(tmp_path / "data")
    _projected(run)
    ids = _candidates(run)
    expected = sorted([_id(killed.doomed), *(_id(a) for a in killed.answered)])
    assert sorted(ids) == expected  # each once: replayed at start, never twice
    for item_id in ids:
        assert _key_opens(run, item_id)  # the restart's key sweep kept every key
    tools = [tool for tool, _, _ in audit_trail(run.store.data_dir)]
    assert tools.count(CAPTURE) == 2


def test_a_retry_of_the_unanswered_capture_answers_its_stored_result(
    killed: Run, tmp_path: Path
) -> None:
    run = killed.copy_to(tmp_path / "data")

    async def retry() -> dict[str, Any]:
        async with server_life(run.store.data_dir, run.secrets) as life:
            return await life.call(CAPTURE, killed.doomed)

    envelope = asyncio.run(retry())
    assert envelope["ok"] is True, envelope
    value = envelope["output"]["value"]
    assert value["status"] == "duplicate_exact"
    assert value["candidate_id"] == _id(killed.doomed)
    _projected(run)
    assert sorted(_candidates(run)) == sorted(
        [_id(killed.doomed), *(_id(a) for a in killed.answered)]
    )


def test_a_torn_tail_holding_a_capture_is_cut_and_its_key_opens_nothing(
    killed: Run, tmp_path: Path
) -> None:
    run = killed.copy_to(tmp_path / "data")
    segment = run.segment
    data = segment.read_bytes()
    last_record = data.rfind(b'"idempotency"')  # inside the answered capture's record
    assert last_record > 0
    # As a crash in the middle of its flush leaves it: the record torn, the anchor not
    # moved past what came before.
    with segment.open("r+b") as handle:
        handle.truncate(last_record)
    assert run.anchor_before is not None
    for slot in run.store.data_dir.glob(f"{ANCHOR_STEM}.*"):
        slot.unlink()
    for slot in run.anchor_before.iterdir():
        shutil.copy2(slot, run.store.data_dir / slot.name)
    answered = _id(killed.answered[0])

    async def serve() -> list[bytes]:
        async with server_life(run.store.data_dir, run.secrets) as life:
            assert (await life.call(CAPTURE, _arguments("after")))["ok"] is True
            return life.log

    lines = [line for line in asyncio.run(serve()) if b"torn final record" in line]
    assert len(lines) == 1, lines
    _projected(run)
    assert answered not in _candidates(run)  # cut: in this test it was never answered
    assert _id(killed.doomed) in _candidates(run)
    # Its key file is an orphan: the start-up sweep removes it once its grace period passed.
    database = Database.open(run.store.data_dir)
    try:
        recover_key_directory(database, KeyStore(run.store.data_dir / KEYS_DIRECTORY), grace_s=0)
    finally:
        database.close()
    assert not key_path(run.store.data_dir, answered).exists()
    assert key_path(run.store.data_dir, _id(killed.doomed)).exists()


def _refused(store: Acknowledged, exit_code: int) -> None:
    before = store_files(store.data_dir)
    started = start(store)
    assert started.returncode == exit_code, started.stderr
    assert len(started.stderr.strip().splitlines()) == 1, started.stderr
    assert store_files(store.data_dir) == before


def test_a_flipped_byte_in_a_segment_holding_a_capture_is_damage(
    killed: Run, tmp_path: Path
) -> None:
    run = killed.copy_to(tmp_path / "data")
    data = run.segment.read_bytes()
    flip_byte_at(run.segment, data.rfind(b'"candidates"') + 40)
    _refused(run.store, EXIT_DAMAGED)


def test_a_deleted_segment_holding_a_capture_is_lost_writes(killed: Run, tmp_path: Path) -> None:
    run = killed.copy_to(tmp_path / "data")
    assert _id(killed.answered[0]) not in _candidates(run)  # in the log only
    run.segment.unlink()
    # The file projected the first capture (the restart replayed it), so the log now ends
    # before the file's position: damage, found before the anchor is even compared.
    _refused(run.store, EXIT_DAMAGED)


def test_a_deleted_segment_nothing_of_which_was_projected_is_lost_writes(
    tmp_path: Path,
) -> None:
    run = asyncio.run(_capture_projection_killed(tmp_path, KILL_DURING_PROJECTION))
    assert _candidates(run) == []  # the capture is in the log only, anchored
    run.segment.unlink()
    _refused(run.store, EXIT_BEHIND_ANCHOR)  # the anchor names what neither file nor log hold


async def _concurrent_then_killed(base: Path) -> Run:
    """CONCURRENT captures at once, each on its own connection in its own thread (as
    `Life.call_until_killed` does: a dying server must not cancel the test's loop); the
    first to append kills the server while the others are being appended and flushed."""
    store, secrets = _new_store(base)
    calls = [_arguments(f"c{n}") for n in range(CONCURRENT)]
    answered: list[dict[str, Any]] = []
    async with server_life(store.data_dir, secrets, f"{KILL_AFTER_LOG_APPEND}:{CAPTURE}") as life:

        async def one(arguments: dict[str, Any]) -> None:
            async with connect(life.url, life.signer, ALICE) as host:
                outcome = await host.call(CAPTURE, arguments)
                if outcome.envelope.get("ok") is True:
                    answered.append(arguments)

        def in_its_own_loop(arguments: dict[str, Any]) -> None:
            with suppress(Exception):  # the transport breaks when the server dies
                anyio.run(one, arguments)

        for arguments in calls:
            threading.Thread(target=in_its_own_loop, args=(arguments,), daemon=True).start()
        status = await anyio.to_thread.run_sync(life.process.wait, DEATH_TIMEOUT_S)
    return Run(store, secrets, status, list(answered), {"all": calls})


def test_a_kill_during_a_group_of_captures_keeps_every_answered_one_whole(
    tmp_path: Path,
) -> None:
    run = asyncio.run(_concurrent_then_killed(tmp_path))
    assert run.status == SIGKILLED
    _projected(run)
    ids = _candidates(run)
    assert len(ids) == len(set(ids))  # nothing twice
    assert {_id(a) for a in run.answered} <= set(ids)
    for item_id in ids:  # every capture that exists is whole: its key opens its body
        assert _key_opens(run, item_id)
    tools = [tool for tool, _, _ in audit_trail(run.store.data_dir)]
    assert tools.count(CAPTURE) == len(ids)


async def _capture_projection_killed(base: Path, failpoint: str) -> Run:
    store, secrets = _new_store(base)
    arguments = _arguments("projected")
    async with server_life(store.data_dir, secrets, f"{failpoint}:{CAPTURE}") as life:
        assert (await life.call(CAPTURE, arguments))["ok"] is True
        status = await anyio.to_thread.run_sync(life.process.wait, DEATH_TIMEOUT_S)
    return Run(store, secrets, status, [arguments], {})


@pytest.mark.parametrize("failpoint", [KILL_DURING_PROJECTION, KILL_AFTER_PROJECTION])
def test_a_kill_while_projecting_a_capture_writes_it_once(tmp_path: Path, failpoint: str) -> None:
    run = asyncio.run(_capture_projection_killed(tmp_path, failpoint))
    assert run.status == SIGKILLED
    in_file = _id(run.answered[0]) in _candidates(run)
    assert in_file is (failpoint == KILL_AFTER_PROJECTION)  # COMMIT ran, or never did

    async def serve_again() -> None:
        async with server_life(run.store.data_dir, run.secrets) as life:
            assert (await life.call(CAPTURE, run.answered[0]))["ok"] is True  # a replay

    asyncio.run(serve_again())
    _projected(run)
    assert _candidates(run) == [_id(run.answered[0])]
    assert _key_opens(run, _id(run.answered[0]))
