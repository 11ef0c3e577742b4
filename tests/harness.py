"""In-process service for tool-level tests: real DuckDB file, real OPA Wasm, no transport.

The transport is covered by tests/e2e; here the point is to reach every rule quickly.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.core.index_loading import follow_store
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.confirmation import ConfirmationBinding, mint_confirmation
from engram_memory.host.context import mint_invocation
from engram_memory.host.keys import HostKeyring, HostSigningKey
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.call_log import DIRECTORY as CALL_LOG_DIRECTORY
from engram_memory.store.call_log import SegmentLog
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import CallRequest, MemoryService

SIGNER = HostSigningKey.generate()


@dataclass
class Caller:
    """Calls the service as one binding, the way a host would."""

    service: MemoryService
    tenant: str = "acme"
    workspace: str = "support"
    principal: str = "user:alice"
    purpose_ref: str = "purpose:support-case"
    session: str = "session:t"
    now_ms: list[int] = field(default_factory=list)

    def token(self, **overrides: Any) -> str:
        claims: dict[str, Any] = {
            "host_id": "host:t",
            "tenant": self.tenant,
            "workspace": self.workspace,
            "principal": self.principal,
            "agent_id": "agent:t",
            "session": self.session,
            "purpose_ref": self.purpose_ref,
            "audit_id": f"audit:{uuid.uuid4().hex}",
        }
        claims.update(overrides)
        return mint_invocation(SIGNER, **claims)

    def confirm(self, tool: str, arguments: dict[str, Any], target: str, **overrides: Any) -> str:
        binding = ConfirmationBinding(
            cap=tool,
            target=target,
            op=operation_digest(tool, normalize(arguments)),
            session=self.session,
            principal=self.principal,
        )
        approver = overrides.pop("approver", "human:tester")
        return mint_confirmation(SIGNER, binding, approver=approver, **overrides)

    def call(
        self, tool: str, arguments: dict[str, Any], confirmation: object = None, **claims: Any
    ) -> dict[str, Any]:
        return self.service.call_tool(
            CallRequest(tool, arguments, self.token(**claims), confirmation)
        )

    def as_(self, **changes: str) -> Caller:
        return replace(self, **changes)


@pytest.fixture(scope="session")
def engine() -> Iterator[EmbeddedWasmEngine]:
    wasm = EmbeddedWasmEngine()
    yield wasm
    wasm.close()


@pytest.fixture
def services(tmp_path: Path, engine: EmbeddedWasmEngine) -> Iterator[Services]:
    database = Database.open(tmp_path / "data")
    root_key = RootKey(os.urandom(32))
    # As the server does (core/opening.py): audit-only calls commit through the call log.
    database.attach_call_log(
        SegmentLog(tmp_path / "data" / CALL_LOG_DIRECTORY, root_key.call_log_key())
    )
    yield Services(
        database=database,
        keys=KeyStore(tmp_path / "data" / KEYS_DIRECTORY),
        decider=PolicyDecider(engine, engine.identity, _clock),
        root_key=root_key,
        host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
        settings=ServiceSettings(host_memory_enabled=True),
        search_index=follow_store(database),
    )
    database.close()


def _clock() -> int:
    import time

    return time.time_ns() // 1_000_000


@pytest.fixture
def alice(services: Services) -> Caller:
    return Caller(MemoryService(services))


def fresh_key(label: str = "key") -> str:
    """A new idempotency key (at least 16 bytes, as the contract requires)."""
    return f"{label}-{uuid.uuid4().hex}"


def ok_value(envelope: dict[str, Any]) -> dict[str, Any]:
    """The output value of a success envelope (fails the test on an error envelope)."""
    assert envelope["ok"] is True, envelope
    result: dict[str, Any] = envelope["output"]["value"]
    return result


def error_of(envelope: dict[str, Any]) -> tuple[str, bool]:
    """(code, retriable) of an error envelope (fails the test on a success)."""
    assert envelope["ok"] is False, envelope
    return envelope["error"]["code"], envelope["error"]["retriable"]
