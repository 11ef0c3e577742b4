"""What a new operator sees: plain startup lines on stderr, results on stdout, help with
defaults, colour only on a terminal. Each drives the real `engram-memory` process."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import connect
from engram_memory.host.keys import HostSigningKey
from tests.faults.ops_support import ALICE, read_until
from tests.servers import bound_port, free_port, server_env

ROOT = Path(__file__).resolve().parents[2]
ESCAPE = "\x1b["


def _engram(
    env: dict[str, str], *argv: str, stdin: str | None = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", *argv],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    root, _, public = init_host_dir(tmp_path / "secrets")
    return server_env(tmp_path / "data", root, public)


def test_a_port_in_use_is_one_line_and_exit_2_before_the_store_opens(
    env: dict[str, str], tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        result = _engram(env, "serve", "--transport", "http", "--port", port)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert port in lines[0]
    assert "streamable HTTP on" not in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("setting", "flag", "switch"),
    [
        (None, False, "ENGRAM_MEMORY_ENABLED is not set and --enable-memory was not given"),
        ("false", False, "ENGRAM_MEMORY_ENABLED=false"),
        ("true", False, None),
        (None, True, None),
    ],
)
def test_startup_says_when_memory_is_off_and_by_which_switch(
    env: dict[str, str], setting: str | None, flag: bool, switch: str | None
) -> None:
    env = {k: v for k, v in env.items() if k != "ENGRAM_MEMORY_ENABLED"}
    if setting is not None:
        env["ENGRAM_MEMORY_ENABLED"] = setting
    result = _engram(env, "serve", *(["--enable-memory"] if flag else []))  # stdin: EOF
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "memory is off" in line]
    if switch is None:
        assert said == []
    else:
        assert len(said) == 1
        assert switch in said[0]


async def test_an_unreachable_opa_url_warns_at_startup_and_calls_fail_closed(
    env: dict[str, str], tmp_path: Path
) -> None:
    policy_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    port_file = tmp_path / "port"
    command = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "http"]
    process = subprocess.Popen(
        [*command, "--port", "0", "--port-file", str(port_file)],
        env={**env, "ENGRAM_POLICY": policy_url},
        stderr=subprocess.PIPE,
    )
    try:
        port = bound_port(port_file, process)
        assert process.stderr is not None
        said = read_until(process.stderr, b"streamable HTTP on").decode()
        warnings = [line for line in said.splitlines() if line.startswith("WARNING")]
        assert len(warnings) == 1
        assert policy_url in warnings[0]
        signer = HostSigningKey.from_pem_file(tmp_path / "secrets" / "host-signing.pem")
        async with connect(f"http://127.0.0.1:{port}/mcp", signer, ALICE) as host:
            outcome = await host.call(
                "engram_memory_get", {"record_id": "record:x", "purpose_ref": ALICE.purpose_ref}
            )
        assert outcome.envelope["error"]["code"] == "POLICY_UNAVAILABLE"
    finally:
        process.terminate()
        await anyio.to_thread.run_sync(lambda: process.wait(30))


def test_serve_help_documents_every_flag_with_its_default_and_variable(
    env: dict[str, str],
) -> None:
    result = _engram(env, "serve", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    flags = re.findall(r"(--[a-z-]+)", result.stdout.split("options:")[1])
    for flag in sorted(set(flags) - {"--help"}):
        described = text.split(flag)[-1][:400]  # the last mention is its description
        assert "default:" in described or "required" in described, flag
    for variable in (
        "ENGRAM_DATA_DIR",
        "ENGRAM_HOST_KEYS",
        "ENGRAM_ROOT_KEY",
        "ENGRAM_POLICY",
        "ENGRAM_BUNDLE",
        "ENGRAM_MEMORY_ENABLED",
        "ENGRAM_DRAIN_SECONDS",
    ):
        assert variable in text
    assert "opa-spawn" in text


def _step(env: dict[str, str], stderr: int) -> None:
    subprocess.run(
        ["bash", "-c", f'source "{ROOT}/scripts/lib.sh"; step "checking colour"'],
        env=env,
        stderr=stderr,
        timeout=30,
        check=True,
    )


@pytest.mark.parametrize("no_color", [None, "1"])
def test_script_steps_are_bold_only_on_a_terminal_without_no_color(
    tmp_path: Path, no_color: str | None
) -> None:
    env = {"PATH": os.environ.get("PATH", "")}
    if no_color is not None:
        env["NO_COLOR"] = no_color
    log = tmp_path / "step.log"
    with log.open("wb") as file:
        _step(env, file.fileno())
    assert log.read_text() == "==> checking colour\n"
    terminal, pane = os.openpty()
    try:
        _step(env, pane)
        os.close(pane)
        shown = os.read(terminal, 4096).decode()
    finally:
        os.close(terminal)
    assert "checking colour" in shown
    assert (ESCAPE in shown) is (no_color is None)


def test_command_results_go_to_stdout_and_progress_to_stderr(
    env: dict[str, str], tmp_path: Path
) -> None:
    verified = _engram(env, "policy", "verify")
    assert verified.returncode == 0, verified.stderr
    assert "bundle verified" in verified.stdout
    assert verified.stderr == ""
    new_root = tmp_path / "secrets" / "root-2.key"
    rotated = _engram(
        env, "host", "new-root-key", "--current", env["ENGRAM_ROOT_KEY"], "--out", str(new_root)
    )
    assert rotated.returncode == 0, rotated.stderr
    assert "written to" in rotated.stdout
    assert rotated.stderr == ""
