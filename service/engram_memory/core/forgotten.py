"""Forgotten means unconfirmable (issue 9 item 7).

Once a record is forgotten (or a candidate withdrawn) its content is crypto-shredded, but its
plain `payload_digest` and guard digest (SPEC §9.2) are pure functions of the payload: anyone
holding the store file could confirm a guessed payload by hashing it. So the transaction that
ends the content replaces the digests the rows keep with keyed forms,
`hmac-sha256:` + HMAC-SHA-256(scope key, plain digest), under a per-scope key derived from the
stable index root (crypto/keys.py `forgotten_digest_key`). The tombstoned-content guard of
SPEC §4.4 step 4 keys the candidate's digests the same way and compares keyed forms, so it
still holds a re-capture of forgotten content. Live rows keep their plain, reference-
compatible digests. What still commits to plain digests (the journal's hash chain, record ids)
is listed in docs/auditors/guide.md ("Forgotten content").
"""

from __future__ import annotations

import hashlib
import hmac
import logging

from engram_memory.core.runtime import CallContext
from engram_memory.crypto.keys import RootKey
from engram_memory.store import forgotten, key_intents
from engram_memory.store.database import Database
from engram_memory.store.forgotten import ContentDigests
from engram_memory.store.transaction import Transaction

log = logging.getLogger("engram_memory.store")

KEYED_PREFIX = "hmac-sha256:"


def keyed_form(key: bytes, digest: str) -> str:
    """The keyed form of a plain digest; an already keyed one is returned as it is."""
    if digest.startswith(KEYED_PREFIX):
        return digest
    mac = hmac.new(key, digest.encode("utf-8"), hashlib.sha256).hexdigest()
    return KEYED_PREFIX + mac


def _keyed(key: bytes, digests: ContentDigests) -> ContentDigests:
    return ContentDigests(
        keyed_form(key, digests.payload),
        keyed_form(key, digests.guard),
        keyed_form(key, digests.record),
    )


def guard_forms(ctx: CallContext, payload_digest: str, guard_digest: str) -> tuple[str, str]:
    """The keyed forms the tombstoned-content guard compares with forgotten rows."""
    key = ctx.services.root_key.forgotten_digest_key(ctx.scope_ref)
    return keyed_form(key, payload_digest), keyed_form(key, guard_digest)


def forget_record(
    tx: Transaction,
    ctx: CallContext,
    record_id: str,
    source_candidate: str | None,
    digests: ContentDigests,
) -> None:
    """In the forget's transaction: tombstone the record (its body dropped) keeping only keyed
    forms of `digests`, in one statement; the candidate it came from keeps the same keyed
    forms (it holds the same digests), and no decision input kept for replay names them.

    Raises:
        StoreUnavailable: a statement failed (the caller's transaction rolls back).
    """
    keyed = _keyed(ctx.services.root_key.forgotten_digest_key(ctx.scope_ref), digests)
    forgotten.tombstone_record(tx, ctx.scope_ref, record_id, ctx.now_ms, keyed)
    if source_candidate is not None:
        forgotten.replace_candidate_digests(tx, ctx.scope_ref, source_candidate, keyed)
    forgotten.drop_kept_inputs(tx, ctx.scope_ref, digests)


def forget_candidate(
    tx: Transaction, ctx: CallContext, candidate_id: str, digests: ContentDigests
) -> None:
    """In the withdraw's transaction: the candidate is withdrawn, its body dropped, and keeps
    only keyed forms of `digests`, in one statement; no decision input kept for replay names
    them.

    Raises:
        StoreUnavailable: a statement failed (the caller's transaction rolls back).
    """
    keyed = _keyed(ctx.services.root_key.forgotten_digest_key(ctx.scope_ref), digests)
    key_intents.end_candidate(tx, ctx.scope_ref, candidate_id, "withdrawn", ctx.now_ms, keyed)
    forgotten.drop_kept_inputs(tx, ctx.scope_ref, digests)


def key_forgotten_rows(database: Database, root_key: RootKey) -> int:
    """At start, before anything is served: key the digests of items forgotten or withdrawn
    by a build before this one (a no-op read once done). Returns how many rows changed.

    Raises:
        StoreUnavailable: the store cannot be read or written (nothing is served).
    """
    with database.transaction() as tx:
        rows = forgotten.plain_forgotten_rows(tx)
        for row in rows:
            keyed = _keyed(root_key.forgotten_digest_key(row.scope_ref), row.digests)
            if row.table == "records":
                forgotten.replace_record_digests(tx, row.scope_ref, row.item_id, keyed)
            else:
                forgotten.replace_candidate_digests(tx, row.scope_ref, row.item_id, keyed)
    if rows:
        log.info("keyed the content digests of forgotten items rows=%d", len(rows))
    return len(rows)
