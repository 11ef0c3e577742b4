"""The `offline_lexical_v1` tokenizer, `graphify-memory:tokenizer:v1` (SPEC §10.1).

Queries and documents go through exactly this function; any drift between the two sides, or
from the reference engine, changes `df`, lengths and therefore every score.
"""

from __future__ import annotations

import regex

TOKENIZER_VERSION = "graphify-memory:tokenizer:v1"

# Maximal runs of letters, numbers and underscore; `regex` is needed because the standard
# `re` module has no Unicode property classes.
_WORD = regex.compile(r"[\p{L}\p{N}_]+")
# Short pure-ASCII-letter tokens ("db", "is", "a") are noise; the test is on the lowercased
# token, so only a–z qualify and `v2`, `é`, `_x` survive.
_SHORT_LATIN = regex.compile(r"[a-z]{1,2}")


def tokenize(text: str) -> list[str]:
    """Return the tokens of `text` in order, duplicates kept.

    Full Unicode lowercase first (`str.lower()`, which applies special casing such as final
    sigma, as ECMAScript `toLowerCase` does), then maximal `[\\p{L}\\p{N}_]` runs, then tokens
    made only of `a`–`z` with length ≤ 2 are dropped.

    Raises:
        Nothing: every string tokenizes (possibly to an empty list).
    """
    return [token for token in _WORD.findall(text.lower()) if _SHORT_LATIN.fullmatch(token) is None]
