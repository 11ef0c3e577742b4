"""How search gets its ranked list and its page's bodies (tools/search.py orchestrates).

The ranked list comes from the in-process index (core/search_index.py) when that provably
holds exactly the commits of the search's snapshot, else from the store by the exact slower
path; both give the same list. Only the records of the page are then read and opened.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.core import steps
from engram_memory.core.call_audit import CallAudit
from engram_memory.core.runtime import CallContext
from engram_memory.search.fields import FIELD_NAMES, DocumentTerms, FieldTerms
from engram_memory.search.index_ranking import RankedList
from engram_memory.search.ranking import CorpusStatistics, RankDocument, rank_from_statistics
from engram_memory.search.scope_index import EligibleStatistics
from engram_memory.store import memory
from engram_memory.store.transaction import Transaction
from engram_memory.tools import reading

log = logging.getLogger("engram_memory.search")


def distinct(terms: Iterable[str]) -> list[str]:
    """Q of SPEC §10.1: distinct terms in order of first occurrence."""
    return list(dict.fromkeys(terms))


def _ranked_from_store(
    tx: Transaction, ctx: CallContext, terms: Sequence[str], as_of: reading.AsOf
) -> RankedList:
    """The exact slower path: E's documents and the query terms' postings read from the store
    (when the in-process index cannot be trusted for this snapshot, or there is none)."""
    eligible = memory.eligible_documents(
        tx,
        ctx.scope_ref,
        system_as_of=as_of.system_as_of,
        valid_as_of=as_of.valid_as_of,
        now_ms=ctx.now_ms,
    )
    by_id = {doc.record_id: doc for doc in eligible}
    totals = {name: sum(doc.field_lengths.get(name, 0) for doc in eligible) for name in FIELD_NAMES}
    counts: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for posting in memory.postings_for_terms(tx, ctx.scope_ref, terms):
        if posting.record_id in by_id:
            counts[posting.record_id][posting.field][posting.term_hash] = posting.tf
    dfs = {
        term: sum(1 for fields in counts.values() if any(term in c for c in fields.values()))
        for term in terms
    }
    matching = [
        RankDocument(
            record_id,
            DocumentTerms(
                {
                    name: FieldTerms(
                        fields.get(name, {}), by_id[record_id].field_lengths.get(name, 0)
                    )
                    for name in FIELD_NAMES
                }
            ),
            by_id[record_id].valid_t_end,
        )
        for record_id, fields in counts.items()
    ]
    statistics = CorpusStatistics(len(eligible), totals, dfs)
    ranked = rank_from_statistics(statistics, matching, terms, as_of.valid_as_of)
    return RankedList(
        [r.record_id for r in ranked],
        [r.score for r in ranked],
        [r.bm25 for r in ranked],
        EligibleStatistics(len(eligible), totals),
    )


def ranked_list(
    snapshot: Callable[[], Transaction],
    ctx: CallContext,
    terms: Sequence[str],
    as_of: reading.AsOf,
    sequence: int | None,
) -> RankedList:
    """From the in-process index when it holds exactly this snapshot's commits (`sequence`
    taken before the snapshot began is still current), else from the store: the same list."""
    index = ctx.services.search_index
    database = ctx.services.database
    if index is not None and sequence is not None:
        ranked = index.rank(
            ctx.scope_ref,
            terms,
            in_step=lambda: database.index_commits.sequence() == sequence,
            system_as_of=as_of.system_as_of,
            valid_as_of=as_of.valid_as_of,
            now_ms=ctx.now_ms,
        )
        if ranked is not None:
            return ranked
    return _ranked_from_store(snapshot(), ctx, terms, as_of)


def page_bodies(
    snapshot: Callable[[], Transaction],
    ctx: CallContext,
    audit: CallAudit,
    window: Sequence[str],
    as_of: reading.AsOf,
) -> dict[str, dict[str, JsonValue]]:
    """The opened records of the page's ids, each re-checked for eligibility at the ranking's
    pinned pair: their rows from the read cache, those it misses from the snapshot. A record
    that fails the check or whose body or key does not open drops out of the page (absent
    here), with no back-fill; it is named in the call's audit entry."""
    rows = reading.current_rows(ctx, window, snapshot)
    bodies: dict[str, dict[str, JsonValue]] = {}
    dropped = 0
    for record_id in window:
        row = rows.get(record_id)
        try:
            if row is None or not reading.is_eligible(row, as_of, ctx.now_ms):
                raise ToolError(ErrorCode.NOT_FOUND, "no longer eligible")
            bodies[record_id] = steps.open_item(ctx, record_id, row.sealed_body)
        except ToolError as error:
            if error.code is not ErrorCode.BLOB_MISSING:
                log.error("a ranked record failed its page check tool=%s", ctx.tool)
            audit.targets(record_id)
            dropped += 1
            audit.noted(f"page records dropped: {dropped} ({error.code.name})")
    return bodies
