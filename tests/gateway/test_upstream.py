"""What the upstream child is given."""

from __future__ import annotations

import pytest

from engram_memory.gateway.upstream import child_environment


def test_the_child_gets_the_configured_environment_plus_path_and_home_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-passed-on")
    env = child_environment({"ENGRAM_DATA_DIR": "/data"})
    assert env == {"PATH": "/usr/bin", "HOME": "/home/alice", "ENGRAM_DATA_DIR": "/data"}
    assert child_environment({"PATH": "/opt/bin"})["PATH"] == "/opt/bin"
