"""Item keys over one call: created before the write transaction, destroyed after it.

- `fresh_key` writes and fsyncs a new item key before the transaction that needs it opens, so
  the writer's critical section holds no key fsync. If that transaction fails, the key is an
  orphan and is shredded at once (with the shard's interrupted temporaries); if the outcome of
  COMMIT is unknown it stays, and the start-up sweep decides by the store's rows.
- `end_content` runs inside the transaction that ends an item's content (whose caller ended the
  candidate's row, state and body in one statement: `key_intents.end_candidate`): it durably
  promises the destruction of every key that could open it.
- `after_commit` carries the promises out once the transaction committed; a replay calls
  `carry_out` again, and the next start completes whatever a crash interrupted
  (core/key_recovery.py). Each reports True only once none of those keys remains.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import CommitOutcomeUnknown, KeyStoreUnavailable, ToolError
from engram_memory.core import steps
from engram_memory.core.runtime import CallContext
from engram_memory.crypto.key_hygiene import sweep_temporaries
from engram_memory.crypto.sealing import new_data_key, seal
from engram_memory.store import key_intents
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.keys")


@dataclass(frozen=True)
class FreshKey:
    """A new item key, already durable, for sealing that item's body."""

    ctx: CallContext
    item_id: str
    data_key: bytes

    def seal(self, body: Mapping[str, JsonValue]) -> bytes:
        return seal(self.data_key, canonical_json(dict(body)), self.ctx.scope_ref, self.item_id)


@contextmanager
def fresh_key(ctx: CallContext, item_id: str) -> Iterator[FreshKey]:
    """Write a new key for `item_id` durably; run the write transaction inside this block.

    Raises:
        ToolError: MUTATION_OUTCOME_UNKNOWN while another call on the same item is in flight
            or once a committed row owns the item (a retry then sees the committed result).
        KeyStoreUnavailable: the key could not be made durable (nothing was committed).
    """
    services = ctx.services
    store = services.keys
    path = store.path_for(ctx.scope_ref, item_id)
    if not store.claims.claim(path):
        raise ToolError(ErrorCode.MUTATION_OUTCOME_UNKNOWN, "a call on this item is in flight")
    commits_before = services.database.commits_on_this_thread()
    written = False
    try:
        if path.exists():
            # No call of this process holds it (the claim is ours): either a committed row
            # owns it, and must keep it, or a crashed or failed attempt left it.
            with services.database.reading(audit_complete=False) as tx:
                owned = key_intents.has_row(tx, ctx.scope_ref, item_id)
            if owned:
                raise ToolError(ErrorCode.MUTATION_OUTCOME_UNKNOWN, "item committed meanwhile")
            if not store.destroy(ctx.scope_ref, item_id):
                raise KeyStoreUnavailable("an orphan key file cannot be removed")
        data_key = new_data_key()
        written = True
        store.store_item_key(services.root_key, ctx.scope_ref, item_id, data_key)
        services.settings.failpoints.kill_after_key_write(ctx.tool)
        yield FreshKey(ctx, item_id, data_key)
    except BaseException as exc:
        committed = services.database.commits_on_this_thread() > commits_before
        if written and not committed and not isinstance(exc, CommitOutcomeUnknown):
            _discard(ctx, item_id)
        raise
    finally:
        store.claims.release(path)


def _discard(ctx: CallContext, item_id: str) -> None:
    """Shred the orphan key of a transaction that rolled back, and the shard's leftovers.

    Best effort: what stays behind is removed by the next start's sweep.
    """
    store = ctx.services.keys
    store.destroy(ctx.scope_ref, item_id)
    try:
        sweep_temporaries(store, store.path_for(ctx.scope_ref, item_id).parent)
    except KeyStoreUnavailable:
        log.error("key leftovers not swept tool=%s", ctx.tool)


def end_content(
    tx: Transaction,
    ctx: CallContext,
    operation: str,
    *,
    candidate_id: str | None = None,
    record_id: str | None = None,
) -> list[str]:
    """In the transaction that ends an item's content: promise the destruction of every key
    that could open the content (for a record, also the key of the candidate it was promoted
    from). An ended candidate's body is dropped by the caller with its new state
    (`key_intents.end_candidate`). Returns the item ids to pass to `after_commit`, the
    candidate's first: for a record, [its source candidate, the record] or [the record].

    Raises:
        StoreUnavailable: a statement failed (the caller's transaction rolls back).
    """
    items: list[str] = []
    already_promised: set[str] = set()
    if candidate_id is not None:
        items.append(candidate_id)
    if record_id is not None:
        source = key_intents.source_of_record(tx, ctx.scope_ref, record_id)
        if source is not None:
            items.append(source[0])
            if source[1]:  # its destruction failed earlier and is still owed
                already_promised.add(source[0])
        items.append(record_id)
    promised = [item for item in items if item not in already_promised]
    key_intents.promise(tx, ctx.scope_ref, promised, operation, ctx.now_ms)
    return items


def after_commit(ctx: CallContext, item_ids: Sequence[str] = ()) -> bool:
    """Right after a mutating call committed: carry out the destructions it promised.

    True once none of those keys remains (always for a call that promised none).
    """
    ctx.services.settings.failpoints.kill_after_commit(ctx.tool)
    return carry_out(ctx, item_ids)


def carry_out(ctx: CallContext, item_ids: Sequence[str]) -> bool:
    """Destroy the keys of `item_ids` (ended items only), then clear their promises.

    Idempotent: a replay calls it again, and an absent key counts as destroyed. True once
    none of the keys remains; False leaves the promises for a later replay or start.
    """
    destroyed: list[str] = []
    for index, item_id in enumerate(item_ids):
        if steps.destroy_key(ctx, item_id):
            destroyed.append(item_id)
        if index == 0:
            ctx.services.settings.failpoints.kill_during_destruction(ctx.tool)
    if destroyed:
        # The keys are gone; their promises are cleared by the next write transaction rather
        # than one of their own. Until then (or after a crash) a stale promise is only
        # re-checked and cleared by a replay or the next start.
        done = [(ctx.scope_ref, item_id) for item_id in destroyed]
        ctx.services.database.deferred.add(lambda tx: key_intents.clear(tx, done))
    return len(destroyed) == len(item_ids)


def keys_of_record(ctx: CallContext, record_id: str) -> list[str]:
    """The items whose keys could open a record's content: its candidate's, then its own.

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    with ctx.services.database.reading(audit_complete=False) as tx:
        source = key_intents.source_of_record(tx, ctx.scope_ref, record_id)
    return [*([] if source is None else [source[0]]), record_id]
