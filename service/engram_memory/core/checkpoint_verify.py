"""Prove that the chains in a store extend a signed checkpoint, or name where they diverge.

`verify_against_checkpoint` checks the checkpoint's signature, then that the audit entry at
the checkpointed sequence exists with the checkpointed hash and that each scope's journal
event at the checkpointed cursor does too. The caller has verified the chains themselves in
the same snapshot (`audit verify` does): a chain that re-derives and matches a signed hash at
a position holds, up to that position, exactly what was signed.

When a chain does not extend the checkpoint, the first divergent position is looked for
with every signed position available: the checkpoints kept in the store whose signatures
verify, the given one, and an export beside the checkpoint file whose signed manifest binds
its Parquet files (each row's hash is then compared, so the exact entry is found). Without
such an export a rewrite can only be placed between the last signed position that still
matches and the first that does not, and the result says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb

from engram_memory.contract.exceptions import CheckpointInvalid
from engram_memory.core.checkpoints import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_FORMATS,
    signed_tree,
    verify_signature,
)
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey
from engram_memory.store import checkpoints as rows
from engram_memory.store.export import MANIFEST_FILE
from engram_memory.store.transaction import Transaction

AUDIT = "audit"
Hashes = Callable[[int, int], dict[int, str]]  # (low, high) -> hash by position


@dataclass(frozen=True)
class SignedHeads:
    """The positions one verified checkpoint (or signed manifest) pins."""

    audit: rows.Head | None
    journal: Mapping[str, rows.Head]
    signed_at: str


@dataclass(frozen=True)
class Divergence:
    """Where one chain stops extending the checkpoint.

    "truncated": the signed position is missing; `low` is the first missing position, and
    `unpinned` the positions below it that no signed position covers (a rewrite there
    cannot be ruled out), if any. "rewritten": the signed position holds another hash; the
    first divergent position is `low` when `exact`, else somewhere in `low`..`high`.
    """

    chain: str  # "audit" or "journal <scope_ref>"
    kind: str
    low: int
    high: int
    exact: bool
    unpinned: tuple[int, int] | None = None

    @property
    def first(self) -> int | None:
        return self.low if self.exact or self.kind == "truncated" else None

    def line(self) -> str:
        unit = "sequence" if self.chain == AUDIT else "cursor"
        if self.kind == "truncated":
            text = f"{self.chain}: truncated, first missing {unit} {self.low}"
            if self.unpinned is not None:
                low, high = self.unpinned
                text += f" ({unit}s {low} to {high} not pinned by any signature: unproven)"
            return text
        if self.exact:
            return f"{self.chain}: rewritten, first divergent {unit} {self.low}"
        return (
            f"{self.chain}: rewritten, first divergent {unit} between {self.low} and "
            f"{self.high} (only a range: no signed position or bound export narrows it)"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "chain": self.chain,
            "kind": self.kind,
            "first": self.first,
            "range": [self.low, self.high],
            "unpinned": None if self.unpinned is None else list(self.unpinned),
        }


@dataclass(frozen=True)
class CheckpointResult:
    """The outcome of comparing a store with one checkpoint."""

    checkpoint: SignedHeads
    signed_positions: int  # checkpoints and manifests whose positions were used
    export_used: str  # "" or why the export beside the checkpoint was (not) used
    divergences: tuple[Divergence, ...]

    @property
    def extends(self) -> bool:
        return not self.divergences


def parse_checkpoint(document: object, public_key: CheckpointPublicKey) -> SignedHeads:
    """The heads a checkpoint signs, once its signature verified.

    Raises:
        CheckpointInvalid: not a checkpoint, or not signed by `public_key`.
    """
    if not isinstance(document, dict) or document.get("format") not in CHECKPOINT_FORMATS:
        raise CheckpointInvalid(f"not an {CHECKPOINT_FORMAT} document")
    verify_signature(document, public_key)
    signed_tree(document, public_key)  # a format 2 tree must agree with its note and head
    return _signed_heads(document)


def _signed_heads(document: Mapping[str, object]) -> SignedHeads:
    """Raises: CheckpointInvalid: the heads are malformed (a signed malformed document)."""
    try:
        head = document["audit_head"]
        audit = None
        if head is not None:
            assert isinstance(head, dict)
            audit = (int(head["sequence"]), str(head["entry_hash"]))
        scopes = document["journal_heads"]
        assert isinstance(scopes, dict)
        journal = {
            str(scope): (int(value["cursor"]), str(value["event_hash"]))
            for scope, value in scopes.items()
        }
        signed_at = str(document.get("signed_at", document.get("exported_at", "")))
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise CheckpointInvalid("malformed heads") from exc
    return SignedHeads(audit, journal, signed_at)


def verify_against_checkpoint(
    tx: Transaction,
    checkpoint: object,
    public_key: CheckpointPublicKey,
    *,
    export_dir: Path | None = None,
) -> CheckpointResult:
    """Compare the chains `tx` sees with `checkpoint` (a parsed JSON document).

    Raises:
        CheckpointInvalid: the checkpoint is malformed or not signed by `public_key`.
        StoreUnavailable: a read failed.
    """
    signed = parse_checkpoint(checkpoint, public_key)
    others = [signed, *_stored(tx, public_key)]
    export = None
    note = ""
    if export_dir is not None and (export_dir / MANIFEST_FILE).exists():
        export, note = _bound_export(export_dir, public_key)
        if export is not None:
            others.append(export.heads)
    divergences: list[Divergence] = []
    if signed.audit is not None:
        found = _locate(
            AUDIT,
            signed.audit,
            {h.audit[0]: h.audit[1] for h in others if h.audit is not None},
            rows.last_sequence(tx),
            lambda positions: rows.entry_hashes_at(tx, positions),
            lambda low, high: rows.entry_hashes(tx, low, high),
            None if export is None else export.entries,
        )
        divergences.extend([found] if found else [])
    for scope, head in sorted(signed.journal.items()):
        found = _locate(
            f"journal {scope}",
            head,
            {h.journal[scope][0]: h.journal[scope][1] for h in others if scope in h.journal},
            rows.last_cursor(tx, scope),
            lambda positions, s=scope: rows.event_hashes_at(tx, s, positions),  # type: ignore[misc]
            lambda low, high, s=scope: rows.event_hashes(tx, s, low, high),  # type: ignore[misc]
            None if export is None else export.events(scope),
        )
        divergences.extend([found] if found else [])
    return CheckpointResult(signed, len(others), note, tuple(divergences))


def _stored(tx: Transaction, public_key: CheckpointPublicKey) -> list[SignedHeads]:
    """The checkpoints kept in the store that verify under `public_key` (others are
    ignored: a store writer could have put anything there)."""
    trusted = []
    for text in rows.stored_documents(tx):
        try:
            trusted.append(parse_checkpoint(json.loads(text), public_key))
        except (CheckpointInvalid, ValueError):
            continue
    return trusted


@dataclass(frozen=True)
class _Export:
    directory: Path
    heads: SignedHeads

    def entries(self, low: int, high: int) -> dict[int, str]:
        return rows.exported_entry_hashes(self.directory / "audit_entries.parquet", low, high)

    def events(self, scope: str) -> Hashes:
        parquet = self.directory / "journal_events.parquet"
        return lambda low, high: rows.exported_event_hashes(parquet, scope, low, high)


def _bound_export(directory: Path, public_key: CheckpointPublicKey) -> tuple[_Export | None, str]:
    """The export in `directory` when its manifest is signed by `public_key` and its Parquet
    files have the sha256 the manifest names; else None and why not."""
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
        verify_signature(manifest, public_key)
        heads = _signed_heads(manifest)
        digests = {f["name"]: f["sha256"] for f in manifest["files"]}
        for name in ("audit_entries.parquet", "journal_events.parquet"):
            actual = file_sha256(directory / name)
            if digests.get(name) != actual:
                return None, f"export not used: {name} does not match its signed manifest"
    except CheckpointInvalid as exc:
        return None, f"export not used: manifest {exc}"
    except (OSError, ValueError, KeyError, TypeError):
        return None, "export not used: manifest or files unreadable"
    return _Export(directory, heads), "export beside the checkpoint used (signed manifest)"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in pieces (exports can be large).

    Raises:
        OSError: the file cannot be read.
    """
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _locate(
    chain: str,
    signed: rows.Head,
    anchors: Mapping[int, str],
    last: int,
    stored_at: Callable[[list[int]], dict[int, str]],
    stored: Hashes,
    exported: Hashes | None,
) -> Divergence | None:
    """None when the chain holds `signed`; else where it first diverges, as exactly as the
    signed positions (`anchors`, position -> hash) and a bound export allow."""
    position = signed[0]
    if stored_at([position]).get(position) == signed[1]:
        return None
    relevant = {p: h for p, h in anchors.items() if p <= position} | {position: signed[1]}
    present = stored_at(sorted(relevant))
    matching = [p for p, h in relevant.items() if present.get(p) == h]
    differing = [p for p, h in relevant.items() if present.get(p) != h]
    good = max((p for p in matching if p < min(differing)), default=0)
    bad = min(differing)
    checked = good
    if exported is not None and good < min(bad, last):
        high = min(bad, last)
        try:
            theirs = exported(good + 1, high)
        except duckdb.Error:
            theirs = {}
        ours = stored(good + 1, high)
        for p in range(good + 1, high + 1):
            if p not in theirs:
                break
            if ours.get(p) != theirs[p]:
                return Divergence(chain, "rewritten", p, p, exact=True)
            checked = p
    if bad > last:  # the signed position is gone: the tail was removed
        unpinned = None if checked >= last else (checked + 1, last)
        return Divergence(chain, "truncated", last + 1, position, unpinned is None, unpinned)
    return Divergence(chain, "rewritten", checked + 1, bad, exact=checked + 1 == bad)
