"""The commit of one mutating call, written once for capture, request_admission, withdraw and
forget; each tool supplies only its writes and what it answers.

The sequence (SPEC §1.8, §9): the `pause_before_commit` failpoint; for a call that makes a
new item, the item's key made durable and its body sealed before the write transaction opens
(core/item_keys.py), and a large index staged outside the writer's lock (core/indexing.py);
then one write transaction holding either the stored result of a racing same-key call that
committed first (writes are serialized, so it is final: replayed, never refused) or the
tool's writes (journal event, rows, idempotency result) followed by the call's audit entry
as its last statement. A same-key call still in flight when the key was claimed stands as
MUTATION_OUTCOME_UNKNOWN, or is replayed if it committed meanwhile. The tool then carries
out the key destructions its writes promised (`item_keys.after_commit`), which differ per
tool on a replay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.exceptions import ToolError
from engram_memory.core import indexing, item_keys, steps
from engram_memory.core.call_audit import CallAudit
from engram_memory.core.runtime import CallContext
from engram_memory.store.transaction import Transaction

Output = dict[str, JsonValue]
Index = indexing.RecordIndex | indexing.StagedIndex


@dataclass(frozen=True)
class Written:
    """What a tool's writes put in the transaction: its answer, and the items whose keys they
    promised to destroy (`item_keys.end_content`), for `item_keys.after_commit`."""

    output: Output
    ended: Sequence[str] = ()


@dataclass(frozen=True)
class Committed:
    """The end of the write: the tool's own `Written`, or the stored first result of a
    same-key call (`replayed`), found in the write transaction or after the key race."""

    output: Output
    ended: Sequence[str] = ()
    replayed: bool = False
    # The replay was found after `fresh_key` refused: nothing of this call reached the store.
    raced: bool = False


def commit(
    ctx: CallContext,
    audit: CallAudit,
    mutation: steps.MutationKey,
    write: Callable[[Transaction], Written],
) -> Committed:
    """Commit a mutation that makes no new item (withdraw, forget, a decided admission that
    accepts nothing).

    Raises:
        ToolError: DIGEST_CONFLICT, gate_failed, or the tool's own from `write`.
        StoreUnavailable / CommitOutcomeUnknown: the transaction failed.
        CallCancelled: the call was cancelled before its commit.
    """
    ctx.check_before_commit()
    return _transaction(ctx, audit, mutation, write)


def commit_new_item(
    ctx: CallContext,
    audit: CallAudit,
    mutation: steps.MutationKey,
    item_id: str,
    body: Mapping[str, JsonValue],
    write: Callable[[Transaction, bytes, Index | None], Written],
    index: indexing.RecordIndex | None = None,
) -> Committed:
    """Commit a mutation that makes item `item_id` (capture's candidate, an accepted record):
    `write` gets `body` sealed under the item's new key, and `index` staged when given.

    Raises:
        ToolError: as `commit`, and MUTATION_OUTCOME_UNKNOWN while a same-key call is in
            flight on the item.
        KeyStoreUnavailable: the key could not be made durable (nothing was committed).
        StoreUnavailable / CommitOutcomeUnknown: the transaction failed.
    """
    ctx.check_before_commit()
    try:
        with item_keys.fresh_key(ctx, item_id) as key:
            # Sealed before the transaction: the body does not depend on anything it allocates.
            sealed = key.seal(body)
            staging: AbstractContextManager[Index | None] = (
                nullcontext() if index is None else indexing.staged_index(ctx, index)
            )
            with staging as staged:
                return _transaction(ctx, audit, mutation, lambda tx: write(tx, sealed, staged))
    except ToolError as error:
        replay = steps.replay_after_race(ctx, mutation, error)
        return Committed(replay, replayed=True, raced=True)


def _transaction(
    ctx: CallContext,
    audit: CallAudit,
    mutation: steps.MutationKey,
    write: Callable[[Transaction], Written],
) -> Committed:
    with ctx.services.database.transaction() as tx:
        # Writes are serialized: a racing same-key call that committed first is final here.
        replay = steps.stored_result(tx, ctx, mutation)
        if replay is not None:
            return Committed(replay, replayed=True)
        written = write(tx)
        steps.audit_in_transaction(tx, ctx, audit)
    return Committed(written.output, written.ended)
