"""`serve` over stdio answers a client's first messages while its store still opens (issue 19
item 2), and still fails closed when the opening fails.

The real server process; the opening is held just before the store opens by the test-only
`ENGRAM_UNSAFE_PAUSE_OPENING` failpoint (core/failpoints.py) until the test creates the
release file, so "before the opening finished" is an order, never a timing. An `initialize`
answered while the pause holds could not have been answered by a server that opens first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mcp import StdioServerParameters

from engram_memory.cli.main import EXIT_CONFIG
from engram_memory.client.reference_host import connect
from engram_memory.contract.exceptions import SERVE_OPENING_FAILED
from engram_memory.core.failpoints import PAUSE_OPENING_ENV_VAR
from engram_memory.store.connection import DATABASE_FILE
from tests.adversarial.wire import ALICE, DEADLINE_S, RawStdio, make_secrets, request, search_call

SERVE_STDIO = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "stdio"]


def _paused(env: dict[str, str], release: Path) -> dict[str, str]:
    return {**env, PAUSE_OPENING_ENV_VAR: str(release)}


def test_initialize_is_answered_while_the_store_opens_and_a_call_waits_for_it(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path)
    release = tmp_path / "release"
    store_file = Path(secrets.env["ENGRAM_DATA_DIR"]) / DATABASE_FILE
    server = RawStdio(_paused(secrets.env, release))
    try:
        server.initialize()
        assert not store_file.exists()  # the opening has not reached the store yet
        assert server.exchange(request(1, "ping")) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        server.send(search_call(2, secrets.token()))  # in the pipe before the release
        release.touch()
        answer = server.receive()
        assert answer["id"] == 2
        assert answer["result"]["structuredContent"]["ok"] is True
    finally:
        server.close()
    assert server.process.returncode == 0
    assert store_file.exists()


async def test_the_sdk_client_connects_while_the_store_opens_then_calls(tmp_path: Path) -> None:
    """The real MCP SDK client (its discovery, then `initialize` as it chooses) is served
    before the opening finishes; its first call after the release succeeds."""
    secrets = make_secrets(tmp_path)
    release = tmp_path / "release"
    store_file = Path(secrets.env["ENGRAM_DATA_DIR"]) / DATABASE_FILE
    params = StdioServerParameters(
        command=SERVE_STDIO[0], args=SERVE_STDIO[1:], env=_paused(secrets.env, release)
    )
    async with connect(params, secrets.signer, ALICE) as host:
        assert not store_file.exists()  # connected while the opening is held
        release.touch()
        outcome = await host.call(
            "engram_memory_search", {"query": "anything", "purpose_ref": ALICE.purpose_ref}
        )
        assert outcome.envelope["ok"] is True


def _garbage_store(env: dict[str, str]) -> None:
    data_dir = Path(env["ENGRAM_DATA_DIR"])
    data_dir.mkdir(mode=0o700, parents=True)
    (data_dir / DATABASE_FILE).write_bytes(b"not a store" * 1000)
    (data_dir / DATABASE_FILE).chmod(0o600)


def test_a_failed_opening_exits_as_before_and_answers_no_call(tmp_path: Path) -> None:
    secrets = make_secrets(tmp_path)
    _garbage_store(secrets.env)
    # The same refusal without the pause: what every start answered before this change.
    unpaused = subprocess.run(
        SERVE_STDIO,
        env=secrets.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert unpaused.returncode == EXIT_CONFIG
    assert unpaused.stdout == ""
    # No client heard from it: the refusal's own line, alone.
    said = unpaused.stderr.splitlines()
    assert len(said) == 1
    assert SERVE_OPENING_FAILED not in said

    release = tmp_path / "release"
    server = RawStdio(_paused(secrets.env, release), stderr=subprocess.PIPE)
    try:
        server.initialize()
        server.send(request(1, "tools/list"))
        server.send(search_call(2, secrets.token()))  # both in the pipe before the release
        release.touch()
        server.process.wait(timeout=DEADLINE_S)
        assert server.process.stderr is not None
        said = server.process.stderr.read().decode().splitlines()
        server.process.stderr.close()
    finally:
        server.close()
    assert server.process.returncode == EXIT_CONFIG
    # It answered `initialize`: the host is told that no call was served, then why.
    assert said[-2:-1] == [SERVE_OPENING_FAILED]
    assert said[-1].startswith("engram-memory: ")
    # After the `initialize` answer, nothing but the SDK's notice that the session closed
    # under the calls in flight: an error without data, never a result.
    for message in server.remaining():
        assert message["id"] in (1, 2)
        assert "result" not in message
        assert set(message["error"]) == {"code", "message"}
