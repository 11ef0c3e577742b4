"""The search index kept across a clean stop (core/index_keeping.py): opened again it holds
exactly what a load from the store holds, lexical rows and semantic vectors alike, forgotten
records excluded; any change to the store since, another key or a flipped byte and it does
not open at all (the start then loads from the store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.core.index_keeping import Built, Fingerprint, opened_index, sealed_index
from engram_memory.core.index_loading import follow_store, semantic_keeping
from engram_memory.core.index_reading import index_fingerprint
from engram_memory.core.runtime import Services
from engram_memory.core.search_index import SearchIndex
from engram_memory.crypto.keys import RootKey
from engram_memory.store import kept_index
from engram_memory.store.database import Database
from tests.harness import Caller, ok_value
from tests.tools.semantic_support import record, semantic_setup
from tests.tools.test_tool_rules import forget


def _index(services: Services) -> SearchIndex:
    index = services.search_index
    assert index is not None
    assert index.embedder_idle(60)
    return index


def _fingerprint(services: Services) -> Fingerprint:
    with services.database.reading() as tx:
        return index_fingerprint(tx)


def _sealed(services: Services) -> bytes:
    key, index = services.root_key.kept_index_key(), _index(services)
    with services.database.reading() as tx:
        fingerprint = index_fingerprint(tx)
    sealed = index.export(
        lambda: True,
        lambda scopes, semantic: sealed_index(scopes, semantic, key, fingerprint, index.model),
    )
    assert sealed is not None
    return sealed


def _opened(services: Services, sealed: bytes) -> Built | None:
    key = services.root_key.kept_index_key()
    return opened_index(sealed, key, _index(services).model, lambda: _fingerprint(services))


def _installed(services: Services, built: Built) -> SearchIndex:
    setup = semantic_setup(services.keys, services.root_key)
    index = SearchIndex(semantic_keeping(services.database, setup))
    index.install(*built)
    return index


def test_a_kept_index_opens_to_what_a_load_from_the_store_holds(
    researcher: Caller, semantic_services: Services
) -> None:
    services = semantic_services
    kept = [record(researcher, f"Refund {n} approved after courier loss.") for n in range(4)]
    gone = record(researcher, "Refund to forget, courier loss again.")
    ok_value(forget(researcher, gone))

    built = _opened(services, _sealed(services))

    assert built is not None
    opened = _installed(services, built)
    loaded = follow_store(services.database, semantic_setup(services.keys, services.root_key))
    assert opened.rows() == loaded.rows()
    assert opened.semantic_rows() == loaded.semantic_rows()
    held = {row[0] for rows in opened.rows().values() for row in rows}
    assert held == set(kept)  # the forgotten record is not in it


def test_a_kept_index_does_not_open_once_the_store_changed(
    researcher: Caller, semantic_services: Services
) -> None:
    record(researcher, "Refund approved after courier loss.")
    sealed = _sealed(semantic_services)
    record(researcher, "A later record changes what the index is read from.")

    assert _opened(semantic_services, sealed) is None


@pytest.mark.parametrize("where", [0, 20, -1])
def test_a_kept_index_with_a_flipped_byte_does_not_open(
    researcher: Caller, semantic_services: Services, where: int
) -> None:
    record(researcher, "Refund approved after courier loss.")
    sealed = bytearray(_sealed(semantic_services))
    sealed[where] ^= 0x01

    assert _opened(semantic_services, bytes(sealed)) is None


def test_a_kept_index_does_not_open_under_another_root_key(
    researcher: Caller, semantic_services: Services
) -> None:
    record(researcher, "Refund approved after courier loss.")
    sealed = _sealed(semantic_services)
    other = RootKey(b"\x07" * 32).kept_index_key()

    model = _index(semantic_services).model
    assert opened_index(sealed, other, model, lambda: _fingerprint(semantic_services)) is None


def test_every_writable_open_takes_the_kept_file_and_a_read_only_one_leaves_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    Database.open(data).close()
    kept_index.keep(data, b"sealed bytes")

    Database.open(data, read_only=True).close()
    assert (data / kept_index.FILE_NAME).exists()

    database = Database.open(data, read_kept_index=True)
    assert database.kept_index == b"sealed bytes"
    assert not (data / kept_index.FILE_NAME).exists()
    database.close()

    kept_index.keep(data, b"sealed bytes")
    database = Database.open(data)  # an admin command, an import: removed unread
    assert database.kept_index is None
    assert not (data / kept_index.FILE_NAME).exists()
    database.close()
