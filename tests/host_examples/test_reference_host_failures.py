"""examples/host/host.py when it cannot reach or keep the server, and its REPL's own commands.

Each failure is the real one: a store held by a running `engram-memory serve`, a closed
port, a listener that never answers, a command that does not exist. The host must answer
with its documented exit code and exactly one line on stderr, never a traceback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import server_env
from engram_memory.core.failpoints import ENV_VAR
from tests.host_examples.conftest import (
    BINDING,
    HOST_DIR,
    HOST_PY,
    REPO,
    HostRun,
    HostSetup,
    InteractiveHost,
    _documents,
)
from tests.servers import free_port, http_server

pytestmark = pytest.mark.e2e

TOOL_ERROR, USAGE = 1, 2
CANNOT_CONNECT, SERVER_EXITED, CONNECTION_LOST, INTERRUPTED = 5, 6, 7, 130
KILLED_KEY = "capture-" + "5" * 32  # the idempotency key the host retries with
STDIO_SERVE = ["-m", "engram_memory.cli", "serve", "--transport", "stdio"]


@dataclass(frozen=True)
class RunningServer:
    """`serve --transport http` holding its store, and a host key it trusts."""

    process: subprocess.Popen[bytes]
    url: str
    env: dict[str, str]
    data_dir: Path
    signing_key: Path


@pytest.fixture(scope="module")
def running_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    home = tmp_path_factory.mktemp("running")
    root_key, signing_key, public_keys = init_host_dir(home / "secrets")
    env = server_env(home / "data", root_key, public_keys)
    with http_server(env, stderr=subprocess.DEVNULL) as (process, url):
        yield RunningServer(process, url, env, home / "data", signing_key)


def write_config(
    tmp_path: Path, signing_key: Path, server: dict[str, Any], timeout_seconds: float = 60
) -> Path:
    """A host config with `server` as its `server` block."""
    config = {
        "server": server,
        "signing_key": str(signing_key),
        "binding": BINDING,
        "approver": "human:test-operator",
        "timeout_seconds": timeout_seconds,
    }
    path = tmp_path / "host.json"
    path.write_text(json.dumps(config), "utf-8")
    return path


def run_host(
    tmp_path: Path,
    signing_key: Path,
    server: dict[str, Any],
    *command: str,
    answers: str = "",
    timeout_seconds: float = 60,
) -> HostRun:
    """One host run with `server` as its config's `server` block; `answers` is its stdin."""
    path = write_config(tmp_path, signing_key, server, timeout_seconds)
    completed = subprocess.run(
        [sys.executable, str(HOST_PY), "--config", str(path), *command],
        input=answers,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=REPO,
    )
    return HostRun(completed.returncode, _documents(completed.stdout), completed.stderr)


def one_line(run: HostRun) -> str:
    """The run's only stderr line (a traceback or the server's own output would be more)."""
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_a_stdio_server_refused_because_another_server_holds_the_store_is_one_line(
    running_server: RunningServer, tmp_path: Path
) -> None:
    stdio = {"command": sys.executable, "args": STDIO_SERVE, "env": running_server.env}
    run = run_host(tmp_path, running_server.signing_key, stdio, "list")
    assert run.returncode == SERVER_EXITED
    line = one_line(run)
    # The server's own reason reaches the human: which store, and which process holds it.
    assert str(running_server.data_dir) in line
    assert f"PID {running_server.process.pid}" in line
    assert run.documents == []


def test_a_closed_port_is_one_line_naming_the_url(tmp_path: Path) -> None:
    _, signing_key, _ = init_host_dir(tmp_path / "secrets")
    url = f"http://127.0.0.1:{free_port()}/mcp"  # bound, then closed: nothing listens
    run = run_host(tmp_path, signing_key, {"url": url}, "list")
    assert run.returncode == CANNOT_CONNECT
    assert url in one_line(run)


def test_a_server_that_accepts_but_never_answers_times_out_in_one_line(tmp_path: Path) -> None:
    _, signing_key, _ = init_host_dir(tmp_path / "secrets")
    with socket.socket() as listener:  # the kernel accepts connections; nobody answers them
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        run = run_host(tmp_path, signing_key, {"url": url}, "list", timeout_seconds=1)
    assert run.returncode == CANNOT_CONNECT
    assert url in one_line(run)


@pytest.mark.parametrize(
    ("scheme", "path"), [("https", "/mcp"), ("http", "/not-mcp")], ids=["tls", "wrong-path"]
)
def test_a_running_server_reached_the_wrong_way_is_one_line(
    running_server: RunningServer, tmp_path: Path, scheme: str, path: str
) -> None:
    url = running_server.url.replace("http", scheme, 1).removesuffix("/mcp") + path
    run = run_host(tmp_path, running_server.signing_key, {"url": url}, "list")
    assert run.returncode == CANNOT_CONNECT
    assert url in one_line(run)


def test_a_host_name_that_does_not_resolve_is_one_line(tmp_path: Path) -> None:
    _, signing_key, _ = init_host_dir(tmp_path / "secrets")
    url = "http://engram-memory.invalid/mcp"  # .invalid never resolves (RFC 2606)
    run = run_host(tmp_path, signing_key, {"url": url}, "list")
    assert run.returncode == CANNOT_CONNECT
    assert url in one_line(run)


def test_a_call_without_an_answer_in_time_is_one_line_after_the_key(tmp_path: Path) -> None:
    """The server holds the capture before its commit (test-only failpoint) longer than the
    host waits: exit 7, and the last line (after the idempotency key) says so."""
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    pause = {ENV_VAR: "pause_before_commit:engram_memory_capture"}
    env = server_env(tmp_path / "data", root_key, public_keys, **pause)
    with http_server(env, stderr=subprocess.DEVNULL) as (_, url):
        capture = str(HOST_DIR / "capture.json")
        run = run_host(tmp_path, signing_key, {"url": url}, "capture", capture, timeout_seconds=5)
    assert run.returncode == CONNECTION_LOST
    assert "Traceback" not in run.stderr
    key_note, failure = run.stderr.splitlines()
    assert key_note.startswith("idempotency_key: ")
    assert url in failure


def test_a_server_command_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    _, signing_key, _ = init_host_dir(tmp_path / "secrets")
    missing = str(tmp_path / "bin" / "engram-memory")
    run = run_host(tmp_path, signing_key, {"command": missing, "args": ["serve"]}, "list")
    assert run.returncode == CANNOT_CONNECT
    assert missing in one_line(run)


def test_a_server_that_exits_at_start_up_is_quoted_by_its_last_line(tmp_path: Path) -> None:
    _, signing_key, _ = init_host_dir(tmp_path / "secrets")
    noisy_exit = "import sys; print('starting', file=sys.stderr); sys.exit('no store for you')"
    server = {"command": sys.executable, "args": ["-c", noisy_exit]}
    run = run_host(tmp_path, signing_key, server, "list")
    assert run.returncode == SERVER_EXITED
    line = one_line(run)
    assert "no store for you" in line
    assert "starting" not in line


def test_the_repl_ends_with_one_line_when_the_server_goes_away(
    http_host_setup: HostSetup,
) -> None:
    with http_host_setup.session() as host:
        host.type("list")
        assert "engram_memory_search" in host.read_document()
        http_host_setup.stop_server()
        host.type("list")
        assert host.exit_code() == CONNECTION_LOST
        stderr = host.stderr()
    assert "Traceback" not in stderr
    lines = stderr.replace("engram> ", "").splitlines()
    assert len(lines) == 1, stderr
    assert json.loads(http_host_setup.config.read_text("utf-8"))["server"]["url"] in lines[0]


def test_a_server_killed_under_a_capture_is_one_line_and_the_same_key_gets_the_commit(
    crashing_stdio_host_setup: HostSetup, tmp_path: Path
) -> None:
    setup = crashing_stdio_host_setup
    capture = tmp_path / "capture.json"
    arguments = json.loads((HOST_DIR / "capture.json").read_text("utf-8"))
    capture.write_text(json.dumps({**arguments, "idempotency_key": KILLED_KEY}), "utf-8")

    crashed = setup.run("capture", str(capture))
    assert crashed.returncode == CONNECTION_LOST
    assert crashed.documents == []
    assert "Traceback" not in crashed.stderr
    # The server's start-up lines were relayed; the host's own answer is the last line.
    assert not crashed.stderr.splitlines()[-1].startswith("WARNING")

    # As the line says: the capture had committed, and a retry with the same key gets it.
    server = json.loads(setup.config.read_text("utf-8"))["server"]
    healthy_env = {name: value for name, value in server["env"].items() if name != ENV_VAR}
    healthy = setup.with_config("healthy.json", server={**server, "env": healthy_env})
    retried = healthy.run("capture", str(capture))
    assert retried.returncode == 0, retried.stderr
    assert retried.envelope["output"]["value"]["status"] == "duplicate_exact"


def repl(running_server: RunningServer, tmp_path: Path, *typed: str) -> HostRun:
    """The host's REPL over HTTP with `typed` as its input (then end of input)."""
    server = {"url": running_server.url}
    answers = "".join(f"{line}\n" for line in typed)
    return run_host(tmp_path, running_server.signing_key, server, "repl", answers=answers)


def test_repl_help_lists_every_command_and_mistakes_do_not_end_it(
    running_server: RunningServer, tmp_path: Path
) -> None:
    mistakes = ["frobnicate", "get", f"capture {tmp_path / 'none.json'}"]
    # After the unknown command, the incomplete one and the unreadable file: still listing.
    run = repl(running_server, tmp_path, "help", "?", *mistakes, "list", "quit")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert len(run.documents) == 1
    assert "engram_memory_forget" in run.documents[0]
    shown = [line for line in run.stderr.replace("engram> ", "").splitlines() if line]
    for command in ("list", "search", "get", "capture", "admit", "withdraw", "forget", "quit"):
        # once for `help`, once for `?`
        assert sum(line.split()[0].rstrip(",") == command for line in shown) == 2, command
    # One line each for the unknown command, the missing argument and the unreadable file.
    assert len(shown) == 2 * 9 + 3, run.stderr


def test_an_unquoted_search_of_several_words_is_one_query(
    running_server: RunningServer, tmp_path: Path
) -> None:
    run = repl(running_server, tmp_path, "search refund courier", 'search "refund courier"')
    assert run.returncode == 0, run.stderr
    # Both searched (before, the unquoted one was a usage error and printed no envelope).
    assert [document["ok"] for document in run.documents] == [True, True]


@pytest.mark.parametrize("last", ["exit", "quit", None], ids=["exit", "quit", "end-of-input"])
def test_repl_leaves_with_0_after_a_failed_command(
    running_server: RunningServer, tmp_path: Path, last: str | None
) -> None:
    run = repl(running_server, tmp_path, "get mem_unknown", *([last] if last else []))
    assert run.returncode == 0, run.stderr
    assert run.envelope["error"]["code"] == "NOT_FOUND"  # the failure was printed, then 0


def test_ctrl_c_in_the_repl_exits_130_without_a_traceback(
    running_server: RunningServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path, running_server.signing_key, {"url": running_server.url})
    host = InteractiveHost([sys.executable, str(HOST_PY), "--config", str(config), "repl"])
    try:
        host.type("list")
        assert "engram_memory_search" in host.read_document()  # waiting at the prompt now
        host.interrupt()
        assert host.exit_code() == INTERRUPTED
        assert "Traceback" not in host.stderr()
    finally:
        host.close()
