"""The real `serve` sends the agent's manual in its `initialize` result, in the configured
language, and refuses an unknown language at start (exit 2) before anything is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import server_env
from engram_memory.contract.agent_manual import LANGUAGE_VARIABLE, instructions
from tests.adversarial.wire import RawStdio


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    root, _signing, public = init_host_dir(tmp_path / "keys")
    return server_env(tmp_path / "data", root, public, **extra)


@pytest.mark.parametrize("language", ["en", "fr"])
def test_initialize_carries_the_manual_in_the_configured_language(
    tmp_path: Path, language: str
) -> None:
    extra = {} if language == "en" else {LANGUAGE_VARIABLE: language}
    server = RawStdio(_env(tmp_path, **extra))
    try:
        result = server.initialize()
    finally:
        server.close()
    assert result["instructions"] == instructions(language)


def test_an_unknown_language_exits_2_before_the_store_is_made(tmp_path: Path) -> None:
    env = _env(tmp_path, **{LANGUAGE_VARIABLE: "de"})
    done = subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", "serve"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert not (tmp_path / "data").exists()
