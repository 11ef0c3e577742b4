"""The crash failpoints: armed only on purpose (with a warning), and when they fire the process
dies by SIGKILL right there, after its log says which point fired."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.core.failpoints import (
    ENV_VAR,
    KILL_AFTER_COMMIT,
    KILL_POINTS,
    PAUSE_PROJECTION,
    UnsafeFailpoints,
    UnsafeFailpointWarning,
)
from engram_memory.store.logged_calls import BEFORE_BEGIN

FORGET = "engram_memory_forget"
GET = "engram_memory_get"


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_an_armed_kill_point_sigkills_the_process_after_logging_it(point: str) -> None:
    script = textwrap.dedent(
        f"""
        import logging, sys, warnings
        from engram_memory.core.failpoints import UnsafeFailpoints
        logging.basicConfig(stream=sys.stderr, format="%(message)s")
        warnings.simplefilter("ignore")
        failpoints = UnsafeFailpoints.from_environment()
        failpoints.{point}("engram_memory_capture")  # armed for forget only: nothing happens
        failpoints.{point}("{FORGET}")
        sys.exit(0)
        """
    )
    env = {ENV_VAR: f"{point}:{FORGET}"}
    died = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, check=False, timeout=60
    )

    assert died.returncode == -signal.SIGKILL
    assert f"fired: {point}:{FORGET}".encode() in died.stderr


def test_kill_points_arm_with_a_warning_and_fire_once() -> None:
    with pytest.warns(UnsafeFailpointWarning):
        failpoints = UnsafeFailpoints.from_environment({ENV_VAR: f"{KILL_AFTER_COMMIT}:{FORGET}"})
    assert failpoints.armed
    failpoints.kill_after_commit("engram_memory_withdraw")  # another tool: not fired
    assert failpoints.armed


def test_a_kill_point_for_a_read_tool_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        UnsafeFailpoints.from_environment({ENV_VAR: f"{KILL_AFTER_COMMIT}:engram_memory_get"})


def test_pause_projection_fires_once_for_its_tool_and_a_graceful_stop_releases_it() -> None:
    with pytest.warns(UnsafeFailpointWarning):
        failpoints = UnsafeFailpoints.from_environment({ENV_VAR: f"{PAUSE_PROJECTION}:{GET}"})
    failpoints.projection_probe(BEFORE_BEGIN, frozenset({"engram_memory_search"}))
    assert failpoints.armed  # a batch without a get's entry: not fired
    failpoints.release_paused()  # a graceful stop began: the pause returns at once
    failpoints.projection_probe(BEFORE_BEGIN, frozenset({GET, "engram_memory_search"}))
    assert not failpoints.armed  # fired, once
