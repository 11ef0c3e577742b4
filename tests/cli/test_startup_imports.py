"""What starting a command loads (issue 19 item 2), seen from fresh interpreters.

Each case runs the real CLI (`python -m engram_memory.cli ...` through runpy) in a fresh
interpreter whose exit hook writes `sys.modules` to a file, which changes nothing it imports:
the real `serve` over stdio (embedded engine) is run to its `initialize` and `tools/list`
answers and then stopped by the end of its input, and `--help` of each command is run as a
user runs it. (`-X importtime` would miss the command module: `importlib.import_module` is
not timed.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.cli.main import COMMANDS
from tests.adversarial.wire import RawStdio, request

# Never loaded by `serve` over stdio with the embedded engine: the OPA REST client and its
# HTTP clients, and our HTTP transport. (uvicorn and starlette are not listed: the MCP SDK's
# own package import loads them, `python -c "import mcp"` shows it, so no server of ours can
# avoid them.)
NOT_UNDER_STDIO_EMBEDDED = frozenset(
    {
        "opa_client",
        "aiohttp",
        "httpx",
        "requests",
        "engram_memory.policy.opa_server",
        "engram_memory.server.mcp_http",
        "engram_memory.transport.http_serving",
        "engram_memory.transport.http_guard",
        "engram_memory.transport.http_protocol",
        "engram_memory.transport.http_sessions",
    }
)
# What building a command's parser must not load: the store, the SDK, the policy runtime.
NOT_FOR_A_PARSER = frozenset(
    {
        "duckdb",
        "mcp",
        "mcp_types",
        "pydantic",
        "opapywasm",
        "wasmtime",
        "numpy",
        "jwt",
        "anyio",
        "yaml",
        "engram_memory.store.database",
        "engram_memory.core.runtime",
    }
)
TIMEOUT_S = 120


# argv[1]: where to write the module names at exit; the rest: the CLI's arguments.
_PROBE = (
    "import atexit, json, runpy, sys\n"
    "out = sys.argv[1]\n"
    "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
    "sys.argv = ['engram-memory', *sys.argv[2:]]\n"
    "runpy.run_module('engram_memory.cli', run_name='__main__')\n"
)


def _run_cli(
    tmp_path: Path, argv: list[str], *, stdin: str = "", env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the CLI with `argv`; its result and the modules loaded when it exited."""
    report = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(report), *argv],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return result, set(json.loads(report.read_text()))


def test_stdio_serve_with_the_embedded_engine_loads_no_opa_client_and_no_http_stack(
    tmp_path: Path,
) -> None:
    root, _, public = init_host_dir(tmp_path / "secrets")
    env = {
        "PATH": "/usr/bin:/bin",
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "ENGRAM_MEMORY_ENABLED": "true",
        "ENGRAM_POLICY": "embedded",
    }
    report = tmp_path / "modules.json"
    server = RawStdio(env, command=[sys.executable, "-c", _PROBE, str(report), "serve"])
    try:
        server.initialize()
        listed = server.exchange(request(2, "tools/list"))
        assert listed["id"] == 2  # served: tools/list answered (listed or refused)
    finally:
        server.close()  # end of input: the server stops, its exit hook writes the report
    assert server.process.returncode == 0
    imported = set(json.loads(report.read_text()))
    assert "engram_memory.policy.embedded" in imported  # the probe saw the engine open
    assert imported & NOT_UNDER_STDIO_EMBEDDED == set()


def test_help_lists_every_command_without_importing_any_command_module(tmp_path: Path) -> None:
    result, imported = _run_cli(tmp_path, ["--help"])
    assert result.returncode == 0
    listed = set(result.stdout.split("{", 1)[1].split("}", 1)[0].split(","))
    assert listed == set(COMMANDS)
    command_modules = {module for module, _help in COMMANDS.values()}
    assert imported & command_modules == set()
    assert imported & NOT_FOR_A_PARSER == set()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_help_imports_only_its_own_module_and_nothing_heavy(
    tmp_path: Path, command: str
) -> None:
    result, imported = _run_cli(tmp_path, [command, "--help"])
    assert result.returncode == 0
    others = {module for name, (module, _help) in COMMANDS.items() if name != command}
    assert COMMANDS[command][0] in imported
    assert imported & others == set()
    assert imported & NOT_FOR_A_PARSER == set()
