"""The semantic channel's services for tool-level tests (tests/tools/conftest.py registers
the fixtures): a real DuckDB file, the shipped model and OPA Wasm with the shipped bundle,
which permits `purpose:case-research` semantic search for acme."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.index_loading import follow_store
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.core.search_index import SemanticSetup
from engram_memory.core.semantic_index import body_opener
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.search.embedding import EmbeddingModel, load_embedding_model
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import MemoryService
from tests.harness import SIGNER, Caller, ok_value
from tests.tools.test_tool_rules import admit

CAPTURE = "engram_memory_capture"
PERMITTED = "purpose:case-research"


def model() -> EmbeddingModel:
    loaded = load_embedding_model()
    assert isinstance(loaded, EmbeddingModel), loaded  # the [semantic] extra is a test dependency
    return loaded


def semantic_setup(keys: KeyStore, root: RootKey) -> SemanticSetup:
    return SemanticSetup(
        model(), body_opener(keys, root), root.scope_index_key, root.scope_vector_key
    )


@pytest.fixture
def semantic_services(tmp_path: Path, engine: EmbeddedWasmEngine) -> Iterator[Services]:
    database = Database.open(tmp_path / "data")
    keys = KeyStore(tmp_path / "data" / KEYS_DIRECTORY)
    root = RootKey(os.urandom(32))
    yield Services(
        database=database,
        keys=keys,
        decider=PolicyDecider(
            engine, engine.identity, lambda: __import__("time").time_ns() // 10**6
        ),
        root_key=root,
        host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
        settings=ServiceSettings(host_memory_enabled=True),
        search_index=follow_store(database, semantic_setup(keys, root)),
    )
    database.close()


@pytest.fixture
def researcher(semantic_services: Services) -> Caller:
    return Caller(MemoryService(semantic_services), purpose_ref=PERMITTED)


def record(caller: Caller, text: str) -> str:
    args = demo_capture_arguments(text, f"key-{uuid.uuid4().hex}", purpose_ref=caller.purpose_ref)
    candidate_id = ok_value(caller.call(CAPTURE, args))["candidate_id"]
    record_id: str = ok_value(admit(caller, candidate_id))["outcome"]["record_id"]
    return record_id
