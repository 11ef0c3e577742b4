"""Signed checkpoints of the chain heads, and the signed, timestamped export manifest.

Anyone who can write the store can edit a row and recompute the chains, or delete the tail,
and `audit verify` alone still passes. A checkpoint pins the audit head and every scope's
journal head under an Ed25519 signature made with the checkpoint key (crypto/
checkpoint_key.py), which a store writer does not hold; an auditor who kept one proves with
`audit verify --checkpoint` (core/checkpoint_verify.py) that today's chains extend it.

A checkpoint document (`format` CHECKPOINT_FORMAT):

    {"format", "audit_head": {"sequence", "entry_hash"} | null,
     "journal_heads": {scope_ref: {"cursor": "<decimal>", "event_hash"}},
     "tree": {"size": n, "root": "<base64>", "note": "<C2SP tlog-checkpoint signed note>"},
     "signed_at": "<UTC instant>", "key_id": "<sha256 of the raw public key, hex>",
     "signature": {"alg": "Ed25519", "key_id", "value": "<base64>"}}

`tree` (format 2, issue 22) is the audit trail's RFC 9162 Merkle tree at the head: its size
(the head's sequence) and root, and the same two as a C2SP note signed with the same key
(core/tlog_note.py), so `audit verify-proof` checks a proof against a checkpoint issued
earlier with only the public key. Format 1 documents, written before, have no `tree` and are
read and verified as they were.

The signature covers the RFC 8785 canonical form of the document without its `signature`
member; an export manifest is signed the same way (`sign_manifest`). The service writes one
every ENGRAM_CHECKPOINT_INTERVAL_S when a head moved (`CheckpointWriter`), one at every
export, and one on request (`audit checkpoint`); each is kept in `audit_checkpoints`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from engram_memory._internal.private_files import FILE_MODE, make_private
from engram_memory.contract.canonical import JsonValue, canonical_json, canonical_text
from engram_memory.contract.exceptions import CheckpointInvalid, StoreUnavailable
from engram_memory.contract.types import format_instant
from engram_memory.core.merkle import Frontier, entry_leaf
from engram_memory.core.tlog_note import open_checkpoint, sign_checkpoint
from engram_memory.crypto.checkpoint_key import (
    ALGORITHM,
    CheckpointPublicKey,
    CheckpointSigningKey,
)
from engram_memory.store import checkpoints as rows
from engram_memory.store.database import Database
from engram_memory.store.export import export_tables
from engram_memory.store.export_chain import ExportRange
from engram_memory.store.transaction import Transaction

CHECKPOINT_FORMAT = "engram-audit-checkpoint/2"
HEADS_ONLY_FORMAT = "engram-audit-checkpoint/1"  # before the tree: still read and verified
CHECKPOINT_FORMATS = frozenset({HEADS_ONLY_FORMAT, CHECKPOINT_FORMAT})
# Entry hashes read per query while a tree is built from the start.
_TREE_BATCH = 50_000
CHECKPOINT_FILE = "checkpoint.json"
SIGNATURE = "signature"
DEFAULT_INTERVAL_S = 300
# The interval thread looks at the clock at least this often, so a stop never waits long.
_POLL_S = 1.0
log = logging.getLogger("engram_memory.checkpoints")


def load_checkpoint_key(path: Path | None) -> CheckpointSigningKey | None:
    """The configured checkpoint key, or None when none is configured (nothing is signed;
    `serve` says so once: `warn_unsigned`).

    Raises:
        ConfigurationError: a key is configured but unusable (the service must not start
            believing it signs checkpoints when it cannot).
    """
    return None if path is None else CheckpointSigningKey.from_pem_file(path)


def warn_unsigned() -> None:
    """The one start-up warning of a service without a checkpoint key."""
    log.warning(
        "no checkpoint key (ENGRAM_CHECKPOINT_KEY): audit checkpoints are not written "
        "and export manifests are unsigned"
    )


def _signature_block(body: Mapping[str, object], key: CheckpointSigningKey) -> JsonValue:
    value = key.sign(canonical_json(dict(body)))
    return {
        "alg": ALGORITHM,
        "key_id": key.key_id,
        "value": base64.b64encode(value).decode("ascii"),
    }


def verify_signature(document: Mapping[str, object], public_key: CheckpointPublicKey) -> None:
    """Check a checkpoint's or manifest's `signature` block against `public_key`.

    Raises:
        CheckpointInvalid: no or malformed signature block, another key id or algorithm, or
            a signature that does not verify over the canonical document.
    """
    block = document.get(SIGNATURE)
    if not isinstance(block, dict) or set(block) != {"alg", "key_id", "value"}:
        raise CheckpointInvalid("no signature block")
    if block["alg"] != ALGORITHM:
        raise CheckpointInvalid(f"signature algorithm is not {ALGORITHM}")
    if block["key_id"] != public_key.key_id:
        raise CheckpointInvalid("signed with another key (key id differs)")
    try:
        signature = base64.b64decode(str(block["value"]), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CheckpointInvalid("signature value is not base64") from exc
    body = {k: v for k, v in document.items() if k != SIGNATURE}
    try:
        message = canonical_json(body)
    except ValueError as exc:  # NonCanonicalValue
        raise CheckpointInvalid("document is not canonicalizable") from exc
    if not public_key.verifies(message, signature):
        raise CheckpointInvalid("signature does not verify")


def sign_manifest(
    manifest: dict[str, object], key: CheckpointSigningKey | None, *, now_ms: int | None = None
) -> dict[str, object]:
    """The export manifest with `exported_at` (UTC) and a `signature` block over the canonical
    manifest without it; `"signature": null` when no checkpoint key is configured."""
    stamped: dict[str, object] = {
        **{k: v for k, v in manifest.items() if k != SIGNATURE},
        "exported_at": format_instant(wall_clock_ms() if now_ms is None else now_ms),
    }
    stamped[SIGNATURE] = None if key is None else _signature_block(stamped, key)
    return stamped


def wall_clock_ms() -> int:
    """The wall clock, epoch milliseconds."""
    return time.time_ns() // 1_000_000


def _heads_json(
    audit_head: rows.Head | None, journal_heads: Mapping[str, rows.Head]
) -> dict[str, JsonValue]:
    """The `audit_head` and `journal_heads` members of a checkpoint (and of a manifest)."""
    return {
        "audit_head": None
        if audit_head is None or audit_head[0] == 0
        else {"sequence": audit_head[0], "entry_hash": audit_head[1]},
        "journal_heads": {
            scope: {"cursor": str(cursor), "event_hash": event_hash}
            for scope, (cursor, event_hash) in sorted(journal_heads.items())
            if cursor > 0
        },
    }


def checkpoint_document(
    audit_head: rows.Head | None,
    journal_heads: Mapping[str, rows.Head],
    key: CheckpointSigningKey,
    now_ms: int,
    tree: Frontier | None = None,
) -> dict[str, JsonValue]:
    """The signed checkpoint of these heads (an empty audit trail: `audit_head` null) and,
    given the audit `tree` at that head, format 2 with its size, root and signed note;
    without, format 1 (heads only)."""
    body: dict[str, JsonValue] = {
        "format": HEADS_ONLY_FORMAT if tree is None else CHECKPOINT_FORMAT,
        **_heads_json(audit_head, journal_heads),
        "signed_at": format_instant(now_ms),
        "key_id": key.key_id,
    }
    if tree is not None:
        root = tree.root()
        body["tree"] = {
            "size": tree.size,
            "root": base64.b64encode(root).decode("ascii"),
            "note": sign_checkpoint(tree.size, root, key),
        }
    return {**body, SIGNATURE: _signature_block(body, key)}


def audit_tree(tx: Transaction, frontier: Frontier | None = None) -> Frontier:
    """The Merkle tree of the audit entries `tx` sees: `frontier` extended with the entries
    after it (in place), or built from the first entry when none is given or the trail is
    now shorter than it (a store that accepted a loss).

    Raises:
        StoreUnavailable: a read failed, or the entries are not dense from 1 (`audit
            verify` names the defect).
    """
    head = rows.last_sequence(tx)
    tree = Frontier() if frontier is None or frontier.size > head else frontier
    while tree.size < head:
        low = tree.size + 1
        high = min(head, tree.size + _TREE_BATCH)
        hashes = rows.entry_hashes(tx, low, high)
        for sequence in range(low, high + 1):
            entry_hash = hashes.get(sequence)
            if entry_hash is None:
                raise StoreUnavailable(f"audit entry {sequence} is missing: no tree to sign")
            tree.append(entry_leaf(entry_hash))
    return tree


def signed_tree(
    document: Mapping[str, object], public_key: CheckpointPublicKey
) -> tuple[int, bytes] | None:
    """(size, root) of a format 2 checkpoint whose JSON signature the caller verified, once
    its note verifies with `public_key` and agrees with its `tree` and audit head; None for a
    format 1 checkpoint.

    Raises:
        CheckpointInvalid: no or a malformed tree, a note that does not verify, or a size or
            root that differs between the note, the tree and the head.
    """
    if document.get("format") == HEADS_ONLY_FORMAT:
        return None
    tree = document.get("tree")
    if not isinstance(tree, dict) or not isinstance(tree.get("note"), str):
        raise CheckpointInvalid("checkpoint has no tree")
    size, root = open_checkpoint(str(tree["note"]), public_key)
    head = document.get("audit_head")
    head_size = int(str(head.get("sequence"))) if isinstance(head, dict) else 0
    encoded = base64.b64encode(root).decode("ascii")
    if tree.get("size") != size or tree.get("root") != encoded or head_size != size:
        raise CheckpointInvalid("checkpoint tree differs from its note or its audit head")
    return size, root


def take_checkpoint(
    tx: Transaction, key: CheckpointSigningKey, now_ms: int
) -> dict[str, JsonValue]:
    """Sign the heads and the audit tree `tx` sees (read from its snapshot, so they match
    what it exports).

    Raises:
        StoreUnavailable: a read failed.
    """
    tree = audit_tree(tx)
    return checkpoint_document(rows.audit_head(tx), rows.journal_heads(tx), key, now_ms, tree)


def keep_checkpoint(tx: Transaction, document: Mapping[str, JsonValue], reason: str) -> None:
    """Store a signed checkpoint in `audit_checkpoints` (`reason`: interval, export, request,
    import).

    Raises:
        StoreUnavailable: the write failed.
    """
    head = document.get("audit_head")
    sequence = int(str(head["sequence"])) if isinstance(head, dict) else 0
    rows.insert(
        tx,
        str(document["signed_at"]),
        sequence,
        str(document["key_id"]),
        reason,
        canonical_text(dict(document)),
    )


def write_checkpoint_file(document: Mapping[str, JsonValue], path: Path) -> None:
    """Write a checkpoint as indented JSON (the signature covers its canonical form, so the
    layout does not matter), mode 0600.

    Raises:
        OSError: the file cannot be written.
    """
    text = json.dumps(dict(document), indent=2, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    make_private(path)


def export_signed(
    tx: Transaction,
    out_dir: Path,
    progress: Callable[[str], None],
    key: CheckpointSigningKey | None,
    now_ms: int,
    span: ExportRange | None = None,
) -> tuple[dict[str, object], dict[str, JsonValue] | None]:
    """Export the tables `tx` sees (the rows `span` selects) with a checkpoint of the same
    snapshot (checkpoint.json, listed with its sha256 in the manifest) and a signed,
    timestamped manifest. Returns
    (manifest, checkpoint or None without a key); the caller keeps the checkpoint in the
    store when it holds the store for writing.

    Raises:
        StoreUnavailable: a query or COPY failed.
        OSError: a file cannot be written.
    """
    checkpoint = None if key is None else take_checkpoint(tx, key, now_ms)
    manifest = export_tables(
        tx,
        out_dir,
        progress,
        span,
        extra_files={} if checkpoint is None else {CHECKPOINT_FILE: checkpoint},
        seal=lambda body: sign_manifest(body, key, now_ms=now_ms),
    )
    return manifest, checkpoint


class CheckpointWriter:
    """Signs and keeps a checkpoint every `interval_ms` when a head moved since the last one.

    `write_if_due` does the work for a given clock reading (tests drive it directly); the
    thread started by `start` only calls it. Never raises into the service: a checkpoint
    that cannot be written is logged and tried again at the next interval.
    """

    def __init__(
        self,
        database: Database,
        key: CheckpointSigningKey,
        interval_ms: int,
        clock_ms: Callable[[], int],
    ) -> None:
        self._database = database
        self._key = key
        self._interval_ms = interval_ms
        self._clock_ms = clock_ms
        self._next_due_ms = clock_ms() + interval_ms
        self._covered: object = self._last_stored_heads()
        self._tree: Frontier | None = None  # extended at each checkpoint (`audit_tree`)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.written = 0

    def _last_stored_heads(self) -> object:
        """The heads of the newest kept checkpoint (None if none): a restart of an idle
        service signs nothing new."""
        try:
            with self._database.reading() as tx:
                stored = rows.stored_documents(tx)
        except StoreUnavailable:
            return None
        if not stored:
            return None
        latest = json.loads(stored[-1])
        return {field: latest.get(field) for field in ("audit_head", "journal_heads")}

    def _current(self) -> tuple[rows.Head | None, dict[str, rows.Head]]:
        """The committed heads, from the writer's cache (no query)."""
        _, heads = self._database.heads()
        return heads.audit, dict(heads.journal)

    def write_if_due(self, now_ms: int | None = None) -> dict[str, JsonValue] | None:
        """Write a checkpoint when the interval has passed and a head moved; return it."""
        now = self._clock_ms() if now_ms is None else now_ms
        if now < self._next_due_ms:
            return None
        self._next_due_ms = now + self._interval_ms
        try:
            if _heads_json(*self._current()) == self._covered:
                return None
            # The transaction projects the call log first and holds the writer: the heads
            # read again in it are those of the entries it reads for the tree.
            with self._database.transaction() as tx:
                audit, journal = self._current()
                covered = _heads_json(audit, journal)
                self._tree = audit_tree(tx, self._tree)
                if self._tree.size != (0 if audit is None else audit[0]):
                    raise StoreUnavailable("the audit tree and head differ")
                document = checkpoint_document(audit, journal, self._key, now, self._tree)
                keep_checkpoint(tx, document, "interval")
        except Exception as exc:  # noqa: BLE001 - the next interval tries again
            log.error("checkpoint not written: %s", type(exc).__name__)
            return None
        self._covered = covered
        self.written += 1
        return document

    def start(self) -> None:
        """Run `write_if_due` on a daemon thread until `close`."""
        self._thread = threading.Thread(target=self._run, name="engram-checkpoints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._closed.wait(_POLL_S):
            self.write_if_due()

    def close(self) -> None:
        """Stop the thread (before the store closes)."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * _POLL_S)
