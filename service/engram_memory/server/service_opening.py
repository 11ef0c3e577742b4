"""The agent service while it opens: `serve` answers the client's first messages at once.

Opening the store (its anchor comparison, the read of every row, the key directory's
settling), the policy engine and the search index takes seconds on a large or busy store,
and an MCP client gives up on a server that does not answer `initialize` (or `server/discover`)
within its own timeout. So the stdio server starts reading as soon as the SDK is imported,
while the opening runs on a worker thread; only the calls that need the service
(`tools/list`, `tools/call`, the audit of a refusal) await it.

Fail closed: a call never reaches the service before the opening verified the store. If the
opening fails, every call waiting on it waits forever: the server ends its session without
answering them and `serve` exits with the opening's own exit code and line (cli/serve.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:  # imported by the opener, on its own thread
    from engram_memory.tools.dispatch import MemoryService

Opener = Callable[[], "MemoryService"]


class ServiceOpening:
    """A `MemoryService` being opened by `opener` (run once, by `open`), or already open."""

    def __init__(self, service: MemoryService | None = None, opener: Opener | None = None) -> None:
        self._service = service
        self._opener = opener
        self.failure: BaseException | None = None
        # Set by the stdio session when it ends: whether it answered anything (`initialize`)
        # before the opening failed; then `serve` tells the host that no call was served.
        self.answered_a_client = False
        self._settled: anyio.Event | None = None  # created inside the event loop

    def _settled_event(self) -> anyio.Event:
        if self._settled is None:
            self._settled = anyio.Event()
        return self._settled

    async def open(self) -> bool:
        """Run the opener on a worker thread; True once the service is open, False if the
        opening failed (kept in `failure`, for `serve` to report as it always did).

        Never abandoned on cancellation: what the opener opened must be closed by its owner,
        so an ending session waits for the opening to finish.
        """
        settled = self._settled_event()
        if self._opener is None:
            settled.set()
            return self._service is not None
        try:
            self._service = await anyio.to_thread.run_sync(self._opener)
        except BaseException as exc:  # noqa: BLE001 - handed to `serve`, which re-raises it
            self.failure = exc
        finally:
            self._opener = None
            settled.set()
        return self._service is not None

    async def service(self) -> MemoryService:
        """The open service, once it is; waits while it opens, forever if the opening failed
        (the session is ending: no call is answered)."""
        if self._service is not None:
            return self._service
        await self._settled_event().wait()
        if self._service is None:
            await anyio.sleep_forever()
        assert self._service is not None
        return self._service
