"""The drain of a graceful stop: admitted calls are waited for, within the bound; past it
(or on a second signal) they are abandoned by setting their cancellation."""

from __future__ import annotations

import threading

import pytest

from engram_memory.transport.stopping import GracefulStop

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")


def test_once_stopping_nothing_new_is_admitted_and_the_drain_waits_for_calls_in_flight() -> None:
    stop = GracefulStop(drain_seconds=30)
    call = object()
    assert stop.admit(call)
    stop.begin()
    assert not stop.admit(object())
    assert not stop.drained
    finishing = threading.Thread(target=stop.leave, args=(call,))
    finishing.start()
    assert stop.wait_drained() is True
    finishing.join()


def test_past_the_bound_calls_in_flight_are_abandoned_through_their_cancellation() -> None:
    stop = GracefulStop(drain_seconds=0)
    cancellation = threading.Event()
    assert stop.admit("stuck")
    with stop.cancellable(cancellation):
        stop.begin()
        assert stop.wait_drained() is False
        assert cancellation.is_set()
        assert stop.drained


def test_a_second_signal_abandons_at_once() -> None:
    stop = GracefulStop(drain_seconds=3600)
    cancellation = threading.Event()
    stop.enter("running")
    with stop.cancellable(cancellation):
        stop.request()
        assert not cancellation.is_set()
        stop.request()
        assert cancellation.is_set()
    assert stop.wait_drained() is False


def test_the_stop_runs_its_callbacks_once() -> None:
    stop = GracefulStop()
    seen: list[str] = []
    stop.on_begin(lambda: seen.append("released"))
    stop.begin()
    stop.begin()
    assert seen == ["released"]
