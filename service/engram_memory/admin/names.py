"""The maintenance operations' names and the backup age limit, importing nothing.

`engram-memory admin`'s parser lists them; keeping them apart from maintenance.py and
backup.py (which load the store, crypto and policy code) keeps building that parser cheap.
"""

from __future__ import annotations

# The record operations `admin` offers (one subcommand each, `_` spelled `-`).
RECORD_OPERATIONS = (
    "dispute",
    "resolve_dispute",
    "supersede",
    "mark_non_current",
    "rewind",
    "expire",
    "trust_invalidate",
)
# A restore refuses older archives by default: they may hold keys destroyed since.
DEFAULT_MAX_AGE_DAYS = 30
