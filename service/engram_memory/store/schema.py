"""Numbered schema migrations (store/migrations/NNNN_name.sql) and the version check.

Each applied migration is recorded with its checksum, so an edited migration or a store
written by a newer build is refused at start (`StoreVersionSkew`) instead of being served.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import TYPE_CHECKING

from engram_memory.contract.exceptions import StoreVersionSkew

if TYPE_CHECKING:
    from engram_memory.store.transaction import Transaction

_MIGRATION_NAME = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")  # fullmatch only


def _migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("engram_memory.store").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


SCHEMA_VERSION = max(version for version, _, _ in _migrations())


def apply_migrations(tx: Transaction) -> None:
    """Apply every migration not yet applied, in order, in `tx`.

    Raises:
        StoreVersionSkew: an applied migration differs from the one this build ships.
        StoreUnavailable: a statement failed.
    """
    tx.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, sha256 VARCHAR NOT NULL)"
    )
    applied = {row[0]: row[2] for row in tx.fetchall("SELECT * FROM schema_migrations")}
    for version, name, sql in _migrations():
        checksum = hashlib.sha256(sql.encode("utf-8")).hexdigest()
        if version in applied:
            if applied[version] != checksum:
                raise StoreVersionSkew(f"migration {name} differs from the applied one")
            continue
        tx.execute(sql)
        tx.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, name, checksum])


def check_version(tx: Transaction) -> None:
    """Raises: StoreVersionSkew: the store's schema is not the one this build expects."""
    row = tx.fetchone("SELECT max(version) FROM schema_migrations")
    if row is None or row[0] != SCHEMA_VERSION:
        raise StoreVersionSkew(
            f"store schema version {row[0] if row else None}, this build expects {SCHEMA_VERSION}"
        )
