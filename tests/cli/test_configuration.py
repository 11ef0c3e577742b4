"""Bad configuration: one line naming the problem, exit code 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir


def _serve(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", "serve"],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def secrets(tmp_path: Path) -> dict[str, str]:
    root, _, public = init_host_dir(tmp_path / "secrets")
    return {
        "ENGRAM_ROOT_KEY": str(root),
        "ENGRAM_HOST_KEYS": str(public),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
    }


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ENGRAM_HOST_KEYS", ""),
        ("ENGRAM_HOST_KEYS", "/nonexistent/keys.pem"),
        ("ENGRAM_ROOT_KEY", "/nonexistent/root.key"),
        ("ENGRAM_POLICY", "ftp://example.invalid"),
        ("ENGRAM_BUNDLE", "/nonexistent/bundle"),
        ("ENGRAM_MEMORY_ENABLED", "perhaps"),
        ("ENGRAM_DRAIN_SECONDS", "soon"),
    ],
)
def test_bad_setting_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, secrets: dict[str, str], variable: str, value: str
) -> None:
    result = _serve({**secrets, variable: value}, tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert variable in result.stderr
    assert not (tmp_path / "data").exists()


def test_root_key_readable_by_others_is_refused_before_anything_is_written(
    tmp_path: Path, secrets: dict[str, str]
) -> None:
    Path(secrets["ENGRAM_ROOT_KEY"]).chmod(0o644)
    result = _serve(secrets, tmp_path)
    assert result.returncode == 2
    assert not (tmp_path / "data").exists()
