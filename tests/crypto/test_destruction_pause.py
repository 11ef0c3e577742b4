"""A backup's key copy holds destructions back; it waits for the ones already running."""

from __future__ import annotations

import threading

from engram_memory.crypto.destruction_pause import DestructionPause


def test_a_destruction_waits_while_a_backup_copies_keys() -> None:
    pause = DestructionPause()
    destroyed = threading.Event()

    def destroy() -> None:
        with pause.destroying():
            destroyed.set()

    with pause.paused():
        worker = threading.Thread(target=destroy)
        worker.start()
        assert not destroyed.wait(0.2)  # bounded: it must still be held back
    worker.join(timeout=10)
    assert destroyed.is_set()


def test_a_pause_waits_for_destructions_already_running() -> None:
    pause = DestructionPause()
    running, paused = threading.Event(), threading.Event()
    release = threading.Event()

    def destroy() -> None:
        with pause.destroying():
            running.set()
            release.wait(10)

    def backup() -> None:
        with pause.paused():
            paused.set()

    destroyer = threading.Thread(target=destroy)
    destroyer.start()
    running.wait(10)
    copier = threading.Thread(target=backup)
    copier.start()
    assert not paused.wait(0.2)
    release.set()
    copier.join(timeout=10)
    destroyer.join(timeout=10)
    assert paused.is_set()
