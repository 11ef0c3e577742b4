"""SemanticScope.id_order: the per-slot rank in record id order that semantic_v1 breaks ties
with, cached and merged as slots are added, equals ranking all ids afresh."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engram_memory.search.scope_index import ScopeIndex
from engram_memory.search.semantic_ranking import id_ranks
from engram_memory.search.semantic_scope import SemanticScope


def _admit(index: ScopeIndex, record_id: str, cursor: int) -> None:
    index.admit(
        record_id,
        accept_cursor=cursor,
        recorded_cursor=cursor,
        valid_t=0,
        valid_t_end=None,
        expires_at_ms=None,
    )


@pytest.mark.parametrize("seed", range(5))
def test_cached_id_order_follows_new_slots_and_equals_a_fresh_ranking(seed: int) -> None:
    rng = random.Random(seed)
    lexical, semantic = ScopeIndex(), SemanticScope(4)
    cursor = 0
    for _ in range(4):
        for _ in range(rng.randint(0, 40)):
            cursor += 1
            _admit(lexical, f"mem_{rng.getrandbits(32):08x}_{cursor}", cursor)
        every = np.arange(len(lexical.record_ids), dtype=np.int64)
        picked = np.array(sorted(rng.sample(range(len(every)), len(every) // 2)), dtype=np.int64)
        fresh = id_ranks(lexical.id_keys(every))
        assert semantic.id_order(lexical, every).tolist() == fresh.tolist()
        assert semantic.id_order(lexical, picked).tolist() == fresh[picked].tolist()
