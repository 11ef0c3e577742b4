"""An auditor's identity directory: hashed principals shown as the names people know.

The audit trail never holds a principal id, only `principal_ref(tenant, principal)`, a
one-way hash (contract/digests.py). An auditor who holds a directory of the people and agents
involved (a CSV: `principal_id,display_name,groups`, groups separated by `;`, an optional
`tenant` column) can still read names: every id is hashed the same way, once per tenant the
export mentions (or the row's own tenant), and a value equal to one of those hashes is shown
as the name. The names live only in this process and in the output the auditor asked for;
nothing is written to the store.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_memory.contract.digests import principal_ref
from engram_memory.contract.exceptions import QueryUsageError

REQUIRED_COLUMNS = ("principal_id", "display_name")
SCOPE_PREFIX = "tenant:"


@dataclass(frozen=True)
class Identity:
    display_name: str
    groups: tuple[str, ...]

    def label(self) -> str:
        return (
            self.display_name
            if not self.groups
            else f"{self.display_name} [{', '.join(self.groups)}]"
        )


@dataclass(frozen=True)
class IdentityRow:
    tenant: str | None  # None: hash under every tenant of the export
    principal_id: str
    identity: Identity


def load_identities(path: Path) -> list[IdentityRow]:
    """The rows of an identity CSV.

    Raises:
        QueryUsageError: unreadable, no header with principal_id and display_name, or a row
            without an id or a name.
    """
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise QueryUsageError(f"identity file {path}: header lacks {', '.join(missing)}")
            rows = []
            for number, row in enumerate(reader, start=2):
                principal = (row.get("principal_id") or "").strip()
                name = (row.get("display_name") or "").strip()
                if not principal or not name:
                    raise QueryUsageError(
                        f"identity file {path}: line {number} needs principal_id and display_name"
                    )
                groups = tuple(g.strip() for g in (row.get("groups") or "").split(";") if g.strip())
                tenant = (row.get("tenant") or "").strip() or None
                rows.append(IdentityRow(tenant, principal, Identity(name, groups)))
            return rows
    except (OSError, UnicodeDecodeError, csv.Error):
        raise QueryUsageError(f"cannot read identity file {path}") from None


def tenants_of(scope_refs: Iterable[str]) -> set[str]:
    """The tenants named by scope refs `tenant:<t>/workspace:<w>` (others are skipped)."""
    tenants = set()
    for scope in scope_refs:
        if scope.startswith(SCOPE_PREFIX):
            tenants.add(scope[len(SCOPE_PREFIX) :].split("/", 1)[0])
    return tenants


class IdentityMap:
    """principal_ref -> Identity, for the tenants given."""

    def __init__(self, rows: Sequence[IdentityRow], tenants: Iterable[str]) -> None:
        known = sorted(set(tenants))
        self._by_ref: dict[str, Identity] = {}
        for row in rows:
            for tenant in [row.tenant] if row.tenant else known:
                self._by_ref[principal_ref(tenant, row.principal_id)] = row.identity

    def __len__(self) -> int:
        return len(self._by_ref)

    def name(self, value: Any) -> Any:
        """`value` as a name when it is a known principal ref, else unchanged."""
        if isinstance(value, str) and value in self._by_ref:
            return self._by_ref[value].label()
        return value

    def rows(self, rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        return [tuple(self.name(v) for v in row) for row in rows]


EMPTY = IdentityMap([], [])


def identity_map(path: Path | None, scope_refs: Iterable[str]) -> IdentityMap:
    """The map of the CSV at `path` (an empty one without it).

    Raises:
        QueryUsageError: see `load_identities`.
    """
    return EMPTY if path is None else IdentityMap(load_identities(path), tenants_of(scope_refs))
