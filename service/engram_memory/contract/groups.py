"""Group references: the `groups` a host asserts for a principal (`group:<name>`).

Shared by the invocation context that carries them (host/context.py) and the policy data that
grants by them (policy/data.py), so both judge a group reference the same way.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

GROUP_PREFIX = "group:"
MAX_GROUPS = 64
MAX_GROUP_BYTES = 256
# Control, format, surrogate and line/paragraph separators: invisible or ambiguous in a
# group name an operator reads in policy data, so a claim carrying one is refused.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def is_group_ref(value: object) -> bool:
    """True for a well-formed group reference: `group:<name>`, NFC, <= 256 UTF-8 bytes,
    no `*`, no control, format or separator characters."""
    if not isinstance(value, str) or not value.startswith(GROUP_PREFIX):
        return False
    if len(value) == len(GROUP_PREFIX) or "*" in value:
        return False
    if any(unicodedata.category(char) in _REFUSED_CATEGORIES for char in value):
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return size <= MAX_GROUP_BYTES and unicodedata.is_normalized("NFC", value)


def canonical_groups(groups: Sequence[str]) -> list[str]:
    """The claim form of a host's groups: sorted by code point, duplicates dropped.

    Raises:
        ValueError: a group is not a well-formed `group:<name>`, or there are more than 64.
    """
    unique = sorted(set(groups))
    bad = [group for group in unique if not is_group_ref(group)]
    if bad or len(unique) > MAX_GROUPS:
        raise ValueError("groups must be at most 64 well-formed group:<name> references")
    return unique
