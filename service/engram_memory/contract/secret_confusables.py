"""Look-alike letters from other scripts, folded to the ASCII they imitate (Unicode TR39).

`pаssword=` with a Cyrillic а, or `АKIA…` with a Cyrillic А, reads as the secret it imitates;
NFKC leaves both alone because they are distinct letters, not compatibility forms. TR39's
confusable data (confusables.txt, the input of its "skeleton" function) says which code
points are visually confusable with which prototypes. The data comes from the
`confusable-homoglyphs` package, which ships confusables.txt as JSON and is refreshed from
unicode.org by its maintainers, so the table follows Unicode without code here.

Two deliberate departures from the TR39 skeleton, both so that secret SHAPES survive:
- only non-ASCII code points are mapped: ASCII is left alone (TR39 maps `1`, `I` and `|` to
  `l`, which would erase the digits and case that key shapes are made of);
- case and digits are kept: a capital look-alike maps to a capital (Greek Ι → `I`, not the
  prototype `l`), a digit look-alike to its digit (Arabic-Indic ١ → `1`).
"""

from __future__ import annotations

import functools
import json
import unicodedata
from importlib import resources

# The package wraps right-to-left prototypes in LEFT-TO-RIGHT MARKs for display.
_DISPLAY_MARKS = str.maketrans("", "", "\u200e\u200f")
_LONGEST_TARGET = 3  # `㎏` → `kg`, `ﬃ` → `ffi`: longer prototypes are not letter look-alikes


def _ascii_prototype(source: str, targets: list[str]) -> str | None:
    """The ASCII text `source` imitates, case and digit kept, or None."""
    candidates = [t.translate(_DISPLAY_MARKS) for t in targets]
    candidates = [t for t in candidates if t.isascii() and t.isprintable() and t]
    candidates = [t for t in candidates if len(t) <= _LONGEST_TARGET and not t.isspace()]
    if not candidates:
        return None
    digit = unicodedata.digit(source, None)
    if digit is not None:
        return str(digit)
    target = min(candidates, key=lambda t: (not t.isalpha(), len(t), t))
    if len(target) == 1 and target.isalpha():
        if source.isupper():
            return "I" if target == "l" else target.upper()
        if source.islower():
            return target.lower()
    return target


@functools.cache
def confusable_table() -> dict[int, str]:
    """Non-ASCII code point → the ASCII it imitates (built once, on first non-ASCII text)."""
    data = resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    entries: dict[str, list[dict[str, str]]] = json.loads(data)
    table: dict[int, str] = {}
    for source, homoglyphs in entries.items():
        if len(source) != 1 or source.isascii():
            continue
        prototype = _ascii_prototype(source, [h["c"] for h in homoglyphs])
        if prototype is not None:
            table[ord(source)] = prototype
    return table
