"""`serve`'s agent service: the shared `Services` (core/opening.py) behind the six tools."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engram_memory.core.opening import open_services
from engram_memory.core.service_config import ServiceConfig
from engram_memory.tools.dispatch import MemoryService


@contextmanager
def open_service(config: ServiceConfig, *, tolerate_loss: bool = False) -> Iterator[MemoryService]:
    """The agent service over `open_services(config)`.

    Raises: see `core.opening.open_services`.
    """
    with open_services(config, tolerate_loss=tolerate_loss) as services:
        service = MemoryService(services)
        try:
            yield service
        finally:
            # Refusal summaries still owed are written while the store is open.
            service.close()
