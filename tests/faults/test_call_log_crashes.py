"""Issue 20 on the real server process: reads commit through the call log, so a SIGKILL after
they were answered (and one after the append, before the answer) loses none of their audit
entries; a torn tail is cut with one log line; any other damage to the log, its removal or an
older copy of it is refused at start with the store's own exit codes, and the refused start
writes nothing.

One server answers searches (their entries are in the call log only: its background projector
is paused by a failpoint, as a busy writer would leave them, so nothing projects them before
the kill), is killed by the failpoint after a get's entry is durable and before its answer;
each test works on its own copy of that data directory.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.failpoints import KILL_AFTER_LOG_APPEND, PAUSE_PROJECTION
from engram_memory.store.call_log import DIRECTORY
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
from tests.faults.keys_support import ALICE, CAPTURE, GET, Secrets, server_life
from tests.faults.keys_support import audit_verify as audit_verify_without_key
from tests.servers import server_env

pytestmark = pytest.mark.e2e

SEARCH = "engram_memory_search"
SEARCHES = 5
OLDER_AFTER = 2  # the older copy of the log is taken after this many searches
SIGKILLED = -9


@dataclass
class Killed:
    store: Acknowledged
    secrets: Secrets
    older_log: Path  # the call log as it was after OLDER_AFTER searches
    status: int = 0

    def copy_to(self, target: Path) -> Killed:
        return Killed(self.store.copy_to(target), self.secrets, self.older_log, self.status)

    @property
    def log_dir(self) -> Path:
        return self.store.data_dir / DIRECTORY


def _search() -> dict[str, str]:
    return {"query": f"refund {uuid.uuid4().hex[:8]}", "purpose_ref": ALICE.purpose_ref}


async def _answer_then_kill(base: Path) -> Killed:
    secrets = Secrets(*init_host_dir(base / "secrets"))
    data_dir = base / "data"
    env = server_env(data_dir, secrets.root_key, secrets.public_keys)
    killed = Killed(Acknowledged(data_dir, env, secrets.signer), secrets, base / "older-log")
    failpoints = f"{KILL_AFTER_LOG_APPEND}:{GET},{PAUSE_PROJECTION}:{SEARCH}"
    async with server_life(data_dir, secrets, failpoints) as life:
        capture = demo_capture_arguments("Refund approved.", f"c-{uuid.uuid4().hex}")
        assert (await life.call(CAPTURE, capture))["ok"] is True
        for n in range(SEARCHES):
            assert (await life.call(SEARCH, _search()))["ok"] is True
            if n + 1 == OLDER_AFTER:  # between calls: no flush is under way
                shutil.copytree(killed.log_dir, killed.older_log)
        get = {"record_id": "rec_" + "0" * 26, "purpose_ref": ALICE.purpose_ref}
        killed.status = await life.call_until_killed(GET, get)
    return killed


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Killed:
    return asyncio.run(_answer_then_kill(tmp_path_factory.mktemp("calllog")))


def _tools(store: Acknowledged) -> list[str]:
    return [tool for tool, _, _ in audit_trail(store.data_dir)]


def _refused(store: Acknowledged, exit_code: int) -> None:
    """The start is refused with `exit_code` and one line; the store file is left as found."""
    before = store_files(store.data_dir)
    started = start(store)
    assert started.returncode == exit_code, started.stderr
    assert len(started.stderr.strip().splitlines()) == 1, started.stderr
    assert store_files(store.data_dir) == before
    verified = audit_verify(store)
    assert verified.returncode == exit_code, verified.stdout + verified.stderr
    assert verified.stdout.startswith("FAILED"), verified.stdout


def test_every_answered_read_and_the_unanswered_durable_one_survive_the_kill(
    killed: Killed, tmp_path: Path
) -> None:
    assert killed.status == SIGKILLED
    copy = killed.copy_to(tmp_path / "data")
    assert SEARCH not in _tools(copy.store)  # in the call log only, until something projects
    verified = audit_verify(copy.store)  # with the root key: the log is projected first
    assert verified.returncode == 0, verified.stdout + verified.stderr
    tools = _tools(copy.store)
    assert tools.count(SEARCH) == SEARCHES
    assert tools.count(GET) == 1  # durable before its answer, which never left


def test_an_auditor_without_the_root_key_verifies_the_log_where_it_is(
    killed: Killed, tmp_path: Path
) -> None:
    copy = killed.copy_to(tmp_path / "data")
    before = store_files(copy.store.data_dir)
    verified = audit_verify_without_key(copy.store.data_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "MAC not checked" in verified.stdout
    assert store_files(copy.store.data_dir) == before  # read, not projected


def test_the_restarted_server_projects_the_log_once_and_serves(
    killed: Killed, tmp_path: Path
) -> None:
    copy = killed.copy_to(tmp_path / "data")
    for _ in range(2):  # the second start finds the log already projected
        asyncio.run(_one_search(copy))
    assert audit_verify(copy.store).returncode == 0
    assert _tools(copy.store).count(SEARCH) == SEARCHES + 2


async def _one_search(killed: Killed) -> None:
    async with server_life(killed.store.data_dir, killed.secrets) as life:
        assert (await life.call(SEARCH, _search()))["ok"] is True


def _segment(killed: Killed) -> Path:
    segments = sorted(killed.log_dir.glob("*.seg"))
    assert len(segments) == 1
    return segments[0]


def test_a_torn_tail_is_cut_with_one_log_line(killed: Killed, tmp_path: Path) -> None:
    copy = killed.copy_to(tmp_path / "data")
    with _segment(copy).open("ab") as handle:  # a frame whose bytes end inside it
        handle.write((1000).to_bytes(4, "big") + b"\x01" * 30)

    async def serve() -> list[bytes]:
        async with server_life(copy.store.data_dir, copy.secrets) as life:
            assert (await life.call(SEARCH, _search()))["ok"] is True
            return life.log

    lines = [line for line in asyncio.run(serve()) if b"torn final record" in line]
    assert len(lines) == 1, lines
    assert audit_verify(copy.store).returncode == 0
    assert _tools(copy.store).count(SEARCH) == SEARCHES + 1


def test_a_flipped_byte_in_a_segment_is_refused_as_damage(killed: Killed, tmp_path: Path) -> None:
    copy = killed.copy_to(tmp_path / "data")
    segment = _segment(copy)
    flip_byte_at(segment, segment.stat().st_size // 2)  # inside an acknowledged record
    _refused(copy.store, EXIT_DAMAGED)


def test_a_removed_log_is_refused_as_lost_writes(killed: Killed, tmp_path: Path) -> None:
    copy = killed.copy_to(tmp_path / "data")
    shutil.rmtree(copy.log_dir)
    _refused(copy.store, EXIT_BEHIND_ANCHOR)


def test_an_older_copy_of_the_log_is_refused_as_lost_writes(killed: Killed, tmp_path: Path) -> None:
    copy = killed.copy_to(tmp_path / "data")
    shutil.rmtree(copy.log_dir)
    shutil.copytree(killed.older_log, copy.log_dir)
    _refused(copy.store, EXIT_BEHIND_ANCHOR)


def test_a_log_behind_what_the_file_projected_is_refused_as_damage(
    killed: Killed, tmp_path: Path
) -> None:
    copy = killed.copy_to(tmp_path / "data")
    assert audit_verify(copy.store).returncode == 0  # projects the whole log into the file
    shutil.rmtree(copy.log_dir)
    shutil.copytree(killed.older_log, copy.log_dir)
    _refused(copy.store, EXIT_DAMAGED)
