"""A kept index numbers its slots as a load from the store does (accept cursor, then record
id; purged documents dropped), whatever order the followed index appended them in, and
opens to the same rows (core/index_keeping.py)."""

from __future__ import annotations

from engram_memory.core.index_keeping import opened_index, sealed_index
from engram_memory.search.scope_index import ScopeIndex

KEY = bytes(32)
SCOPE = "tenant:acme/workspace:support"


def _followed() -> ScopeIndex:
    """Records admitted out of accept order, one of them purged afterwards."""
    index = ScopeIndex()
    for record_id, accept in (("mem_c", 30), ("mem_a", 10), ("mem_d", 40), ("mem_b", 10)):
        index.admit(
            record_id,
            accept_cursor=accept,
            recorded_cursor=accept,
            valid_t=1,
            valid_t_end=None,
            expires_at_ms=None,
        )
        postings = [("t-refund", "primary", 2), ("t-parcel", "evidence", 1)]
        if record_id != "mem_b":
            postings.append((f"t-{record_id}", "context", 1))
        index.add_document(record_id, {"primary": 2, "evidence": 1, "context": 1}, postings)
    index.purge_document("mem_d")
    return index


def test_a_kept_scope_opens_in_store_order_with_the_same_rows() -> None:
    followed = _followed()

    counted = [("documents", SCOPE, 3, "d"), ("postings", SCOPE, 8, "p")]
    sealed = sealed_index({SCOPE: followed}, None, KEY, counted, None)
    built = opened_index(sealed, KEY, None, lambda: counted)

    assert built is not None
    scopes, semantic = built
    assert semantic is None
    opened = scopes[SCOPE]
    assert opened.record_ids == ["mem_a", "mem_b", "mem_c"]  # by accept, then id; d purged
    assert opened.rows() == followed.rows()
    packed = opened.postings_of("t-refund")
    assert packed is not None
    assert list(packed) == sorted(packed)  # each term's postings in slot order again
