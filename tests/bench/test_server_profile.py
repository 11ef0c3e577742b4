"""bench.server_profile splits a py-spy profile of a server into transport and tool rows."""

from __future__ import annotations

from pathlib import Path

from bench.server_profile import split

LOOP = "thread (1): MainThread;run (uvicorn/server.py:1)"
WORKER = "thread (2): AnyIO worker thread;WorkerThread.run (anyio/_backends/_asyncio.py:9)"


def test_each_sample_lands_in_its_row(tmp_path: Path) -> None:
    profile = tmp_path / "profile.txt"
    profile.write_text(
        "\n".join(
            [
                f"{LOOP};TransportGuard.__call__ (x.py:1);envelope_json (e.py:2) 3",
                f"{LOOP};TransportGuard.__call__ (x.py:1);JsonGate.__call__ (j.py:3) 2",
                f"{LOOP};EpollSelector.select (selectors.py:4) 1",
                f"{WORKER};MemoryService._call_tool (d.py:5);PolicyDecider.admission (p.py:6) 4",
                f"{WORKER};MemoryService._call_tool (d.py:5);search (s.py:7) 5",
                "thread (3): engram-call-log-projector;BackgroundProjector._run (p.py:8) 6",
            ]
        )
        + "\n"
    )
    assert split(profile) == {
        "loop: envelope JCS text": 3,
        "loop: ASGI layers (guard, drain, gate, Starlette)": 2,
        "loop: other": 1,
        "worker: policy": 4,
        "worker: tool body (store, search, crypto, JSON)": 5,
        "other thread: engram-call-log-projector": 6,
    }
