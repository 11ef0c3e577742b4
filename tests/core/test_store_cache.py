"""`ENGRAM_STORE_CACHE_MIB` (core/store_cache.py): DuckDB's memory once the store is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.core.store_cache import DEFAULT_STORE_CACHE_MIB, store_cache_mib
from engram_memory.store.database import Database


def test_the_bound_defaults_and_refuses_what_is_not_a_whole_number_of_at_least_32() -> None:
    assert store_cache_mib({}) == DEFAULT_STORE_CACHE_MIB
    assert store_cache_mib({"ENGRAM_STORE_CACHE_MIB": "64"}) == 64
    for bad in ("31", "-64", "1.5", "64MB", " 64"):
        with pytest.raises(ConfigurationError):
            store_cache_mib({"ENGRAM_STORE_CACHE_MIB": bad})


def test_the_bound_is_duckdbs_memory_limit_and_survives_a_compaction(tmp_path: Path) -> None:
    database = Database.open(tmp_path)
    try:
        database.bound_memory(48)
        for _ in range(2):
            with database.reading() as tx:
                assert tx.fetchone("SELECT current_setting('memory_limit')") == ("48.0 MiB",)
            database.compact()  # a new connection to a new file: bound again
    finally:
        database.close()
