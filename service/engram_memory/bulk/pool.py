"""The import's line-only work spread over worker processes, handed back in input order.

Each worker (spawned, never forked: the parent holds DuckDB and engine threads) loads the
policy bundle the parent's embedded engine was loaded from, and refuses to start unless the
identity it gets (revision and content digest) is the one the parent's decider expects; the
importer checks again that every receipt a worker minted names that revision. A worker
holds no store and no root key: its services answer every store or key-store access with
`StoreUnavailable`, and its root key derives the blind index's term keys only (the index
root, beside a random key that unwraps nothing).

Lines go out in chunks; a bounded number of chunks are in flight, so memory stays bounded
whatever the file's size. Every line of a chunk is stamped with the parent's clock at the
moment the chunk was handed out: its contexts, its receipts' `decided_at_ms` and its
envelope's `recorded_at` carry that instant, as the importer's own contexts do.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, cast

from engram_memory.bulk.decisions import ChunkDecisions
from engram_memory.bulk.line_work import ImportBinding, LineWork, PreparedLine
from engram_memory.contract.exceptions import PolicyStale, PolicyUnavailable, StoreUnavailable
from engram_memory.core.failpoints import UnsafeFailpoints
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.signing_keys import load_verification_key
from engram_memory.store.database import Database

CHUNK_LINES = 50  # lines per task: large enough that handing them over costs little
IN_FLIGHT_PER_WORKER = 3  # chunks queued per worker, so none waits for the next


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs: where the bundle is and which identity it must have, the index
    root, the binding and the settings (failpoints excepted: they are the parent's)."""

    bundle_dir: str
    verification_key: tuple[str, str] | None  # (path, key id)
    identity: BundleIdentity
    index_root: bytes
    binding: ImportBinding
    settings: dict[str, Any]


def setup_for(services: Services, binding: ImportBinding) -> WorkerSetup | None:
    """The workers' setup, or None when the parent's engine is not an embedded one (an OPA
    server, say): then the importer does every line's work itself."""
    engine = getattr(services.decider, "_engine", None)
    if not isinstance(engine, EmbeddedWasmEngine):
        return None
    key = engine.verification_key
    settings = {
        f.name: getattr(services.settings, f.name)
        for f in fields(ServiceSettings)
        if f.name != "failpoints"
    }
    return WorkerSetup(
        bundle_dir=str(engine.bundle_dir),
        verification_key=None if key is None else (str(key.path), key.key_id),
        identity=services.decider.expected,
        index_root=services.root_key.stable_index_root,
        binding=binding,
        settings=settings,
    )


class _NoStore:
    """The store and key store of a worker: there are none (fail closed)."""

    def __getattr__(self, name: str) -> Any:
        raise StoreUnavailable("the import's workers do not open the store")


_work: LineWork | None = None
_stale = False
_now_ms = 0


def _chunk_clock() -> int:
    return _now_ms


def _start_worker(setup: WorkerSetup) -> None:
    """Load the same bundle, check its identity, build the worker's services.

    Raises:
        PolicyStale: the bundle loaded is not the one the parent decides with.
    """
    global _work, _stale
    _exit_with_parent()
    # Ctrl-C reaches the whole process group: the import process stops the run and then its
    # workers; a worker interrupted on its own would only print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    key = None
    if setup.verification_key is not None:
        key = load_verification_key(Path(setup.verification_key[0]), setup.verification_key[1])
    engine = EmbeddedWasmEngine(setup.bundle_dir, verification_key=key)
    if engine.identity != setup.identity:
        engine.close()
        _stale = True  # every chunk refuses: the parent stops the run with POLICY_STALE
        return
    services = Services(
        database=cast(Database, _NoStore()),
        keys=cast(KeyStore, _NoStore()),
        decider=ChunkDecisions(engine, engine.identity, _chunk_clock),
        # Derives the blind index's term keys; its other key unwraps nothing.
        root_key=RootKey(material=os.urandom(32), index_root=setup.index_root),
        host_keys=HostKeyring({}),
        settings=ServiceSettings(**setup.settings, failpoints=UnsafeFailpoints()),
        clock_ms=_chunk_clock,
    )
    _work = LineWork(services, setup.binding, index_terms=True)


def _exit_with_parent() -> None:
    """End this worker as soon as the importer's process ends, however it ends: a worker
    outliving a killed import would hold its pipes open and keep its memory (SIGKILL runs no
    cleanup in the parent, so the worker watches for it)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="import-parent-watch", daemon=True).start()


def _prepare_chunk(
    lines: list[tuple[int, str]], now_ms: int, cursor: int | None
) -> list[PreparedLine]:
    global _now_ms
    if _stale:
        raise PolicyStale("an import worker loaded another bundle than the parent's")
    if _work is None:  # the initializer failed: the pool is broken before this runs
        raise PolicyUnavailable("import worker not started")
    _now_ms = now_ms
    if isinstance(_work.services.decider, ChunkDecisions):
        _work.services.decider.forget()
    try:
        prepared = []
        for number, text in lines:
            line = _work.prepare(number, text, now_ms, cursor)
            if cursor is not None:  # the next line's capture follows this line's events
                cursor += line.events
            prepared.append(line)
        return prepared
    except Exception as exc:  # noqa: BLE001 - nothing but a type name crosses back
        # Exceptions of ours do not survive pickling intact, and their text must not leave.
        raise PolicyUnavailable(f"import worker: {type(exc).__name__}") from None


class LinePool:
    """`workers` processes preparing lines; use as a context manager."""

    def __init__(self, setup: WorkerSetup, workers: int) -> None:
        self._workers = workers
        self._executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(setup,),
        )

    def __enter__(self) -> LinePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def prepared(
        self,
        lines: Iterable[tuple[int, str]],
        clock: Callable[[], int],
        cursor: Callable[[int], int | None] = lambda _ordinal: None,
    ) -> Iterator[PreparedLine]:
        """Every line prepared, in input order. `cursor(n)`: the capture cursor guessed, when
        the chunk is handed out, for the line with n lines before it (None: no guess);
        each line's admission is decided at the guess (bulk/admission_guess.py).

        Raises:
            PolicyUnavailable: a worker failed or could not start (the run stops).
        """
        window: deque[Future[list[PreparedLine]]] = deque()
        depth = self._workers * IN_FLIGHT_PER_WORKER
        ordinal = 0
        for chunk in chunks(lines, CHUNK_LINES):
            guess = cursor(ordinal)
            ordinal += len(chunk)
            window.append(self._executor.submit(_prepare_chunk, chunk, clock(), guess))
            if len(window) >= depth:
                yield from _result(window.popleft())
        while window:
            yield from _result(window.popleft())


def _result(future: Future[list[PreparedLine]]) -> list[PreparedLine]:
    try:
        return future.result()
    except PolicyStale as exc:
        raise PolicyStale("an import worker loaded another bundle than the parent's") from exc
    except Exception as exc:  # BrokenProcessPool included: the run stops, closed
        raise PolicyUnavailable(f"import worker failed: {type(exc).__name__}") from exc


def chunks(lines: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def same_revision(
    prepared: Iterator[PreparedLine], decider: PolicyDecider
) -> Iterator[PreparedLine]:
    """Lines the workers prepared, each receipt checked to name the revision `decider` (the
    import process's) decides with; a worker's bundle is checked at its start too.

    Raises:
        PolicyStale: a receipt names another revision (the run stops, never mixing two).
    """
    for line in prepared:
        expected = decider.expected  # read per line: the revision in use may move
        receipts = [d.receipt for d in line.capture.call.audit.decisions]
        if line.admission is not None:
            receipts += [d.receipt for d in line.admission.call.audit.decisions]
            if line.admission.guess is not None:
                receipts.append(line.admission.guess.result.receipt.receipt)
        for receipt in receipts:
            if (receipt.bundle_revision, receipt.bundle_digest) != (
                expected.revision,
                expected.digest,
            ):
                raise PolicyStale("an import worker decided under another revision")
        yield line
