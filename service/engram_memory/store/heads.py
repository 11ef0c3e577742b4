"""The chain heads of a store: the audit head and every scope's journal head.

The single writer keeps them in memory (`Database.heads`), so appending an event or an audit
entry never queries for the previous one, and the head anchor (store/anchors.py) records them
outside the DuckDB file after each commit. A transaction works on an overlay of the committed
heads that is published on COMMIT and dropped on rollback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.digests import ZERO_DIGEST

Head = tuple[int, str]  # (sequence or cursor, entry or event hash); (0, zero digest) if empty
EMPTY_HEAD: Head = (0, ZERO_DIGEST)


@dataclass(frozen=True)
class ChainHeads:
    """One consistent view of every chain's last position."""

    audit: Head = EMPTY_HEAD
    journal: Mapping[str, Head] = field(default_factory=lambda: MappingProxyType({}))

    def journal_head(self, scope_ref: str) -> Head:
        return self.journal.get(scope_ref, EMPTY_HEAD)

    def advanced(self, audit: Head | None, journal: Mapping[str, Head]) -> ChainHeads:
        """These heads with a committed transaction's new heads laid over them."""
        if audit is None and not journal:
            return self
        return ChainHeads(
            self.audit if audit is None else audit,
            MappingProxyType({**self.journal, **journal}),
        )

    def regressions_to(self, later: ChainHeads) -> list[str]:
        """Where `later` is behind these heads (a chain shorter, a scope gone); [] if none.

        Only positions are compared: whether the hashes at a position agree needs the store
        (store/anchors.py `compare`).
        """
        found = []
        if later.audit[0] < self.audit[0]:
            found.append(f"audit head {later.audit[0]} is behind {self.audit[0]}")
        for scope_ref, (cursor, _) in sorted(self.journal.items()):
            if later.journal_head(scope_ref)[0] < cursor:
                found.append(f"journal of {scope_ref} is behind cursor {cursor}")
        return found

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "audit": {"sequence": self.audit[0], "entry_hash": self.audit[1]},
            "journal": {
                scope_ref: {"cursor": cursor, "event_hash": event_hash}
                for scope_ref, (cursor, event_hash) in sorted(self.journal.items())
            },
        }

    @classmethod
    def from_json(cls, value: object) -> ChainHeads:
        """The inverse of `as_json`.

        Raises:
            ValueError: any other shape.
        """
        if not isinstance(value, dict) or set(value) != {"audit", "journal"}:
            raise ValueError("not chain heads")
        audit, journal = value["audit"], value["journal"]
        if not isinstance(audit, dict) or not isinstance(journal, dict):
            raise ValueError("not chain heads")
        heads = {str(scope): _head(item, "cursor", "event_hash") for scope, item in journal.items()}
        return cls(_head(audit, "sequence", "entry_hash"), MappingProxyType(heads))


def _head(value: object, position: str, hash_field: str) -> Head:
    if not isinstance(value, dict) or set(value) != {position, hash_field}:
        raise ValueError("not a head")
    number, hash_value = value[position], value[hash_field]
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise ValueError("not a head position")
    if not isinstance(hash_value, str):
        raise ValueError("not a head hash")
    return number, hash_value


class HeadsAnchor(Protocol):
    """Records committed chain heads outside the store file (store/anchors.py)."""

    def cover(self, generation: int) -> None:
        """Return once the heads of `generation` (or later) are durable.

        Raises:
            CommitOutcomeUnknown: they could not be made durable.
        """
