"""Identifier shapes shared by every door that reads one (invocation contexts, bearer tokens,
gateway configuration, group references, approvers).

Every shape is matched whole with `fullmatch`, never `^...$`: Python's `$` also matches
before a final newline, so `acme\\n` passed a `^...$` scope check and reached the audit's
scope field (issue 23).
"""

from __future__ import annotations

import re
import unicodedata

SCOPE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A tenant or workspace: no `/` or `:` (so `tenant:<t>/workspace:<w>` is unambiguous), no
wildcard, no control character."""

# Control, format, surrogate, private-use, unassigned and line/paragraph separators:
# invisible or ambiguous in an identifier an operator or auditor reads (an ANSI escape in a
# principal would rewrite the terminal that shows the audit).
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def is_scope_part(value: object) -> bool:
    """True for a well-formed tenant or workspace."""
    return isinstance(value, str) and SCOPE_PART.fullmatch(value) is not None


# Of REFUSED_CATEGORIES, ASCII holds only controls (Cc): C0 and DEL.
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def has_refused_character(value: str) -> bool:
    """True when `value` holds a character no identifier may hold (REFUSED_CATEGORIES)."""
    if value.isascii():
        # Every claim of every call passes here: one regex scan, not a lookup per character.
        return _ASCII_CONTROL.search(value) is not None
    return any(unicodedata.category(char) in REFUSED_CATEGORIES for char in value)
