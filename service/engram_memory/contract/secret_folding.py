"""The text the never-store detector matches: invisible and look-alike forms folded away.

A secret hidden behind a zero-width joiner (`pass\u200dword=`), written in full-width letters
(`ｇｈｐ＿…`), split by a soft hyphen or a bidi control, or decorated with combining marks
still reads as the secret to whoever sees the stored text. The detector therefore matches a
folded copy of each string; the folded copy only decides and is never stored, echoed or
logged (the stored text stays the NFC input).

Folding, in order:
1. Remove every format character (Unicode category Cf: zero-width space/joiners, bidi
   controls, U+2060–U+2064, U+FEFF, soft hyphen, tags, U+180E), every combining mark
   (Mn, Me: accents, variation selectors, the combining grapheme joiner) and the other
   default-ignorable code points (Hangul fillers, U+FFF0–U+FFF8); map every other space
   separator to U+0020, line and paragraph separators and the C0/C1 line controls to
   U+000A, and the dashes U+2010–U+2015 and U+2212 to U+002D.
2. Compatibility decomposition (the K of NFKC: full-width and other compatibility forms
   become their plain letters, digits and punctuation).
3. Step 1 again, for marks and spaces that step 2 produced, together with the TR39
   confusables of secret_confusables.py (a Cyrillic а becomes `a`, a Greek Ρ becomes `P`).
   Composition (the C of NFKC) is skipped: with the marks gone it could only rejoin Hangul
   jamo, and keywords are folded the same way before they are looked for.

Work is linear in the input: two `str.translate` passes and one decomposition. Marks are
removed BEFORE decomposing on purpose: canonical reordering sorts each run of combining
marks by insertion, so decomposing an attacker's 64 KiB run of alternating marks first would
take seconds; with the marks gone every run is at most one decomposition long. Emoji ZWJ
sequences, Arabic and Indic joiners and accents fold into letters and symbols that no
built-in shape matches, so legitimate multilingual text is not made to look like a secret.
"""

from __future__ import annotations

import functools
import sys
import unicodedata

import numpy as np

from engram_memory.contract.secret_confusables import confusable_table

_STRIPPED_CATEGORIES = frozenset({"Cf", "Mn", "Me"})
# Default-ignorable code points outside Cf/Mn/Me (DerivedCoreProperties.txt): fillers that
# render as nothing. U+180E is listed although Unicode classes it Cf today: it was Zs once.
_ALSO_STRIPPED = (0x180E, 0x115F, 0x1160, 0x3164, 0xFFA0, *range(0xFFF0, 0xFFF9))
_LINE_BREAKS = (0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85)
_DASHES = (*range(0x2010, 0x2016), 0x2212)
# The planes holding every other assigned Cf, Mn, Me and space character: the BMP and the
# SMP (plane 14's tags and variation selectors are all removed below). Scanning only these
# keeps the one-time table build short.
_SCANNED = range(0x0000, 0x20000)


@functools.cache
def _fold_table() -> dict[int, str | None]:
    """code point → replacement (None removes it), built once on first non-ASCII input."""
    table: dict[int, str | None] = {}
    for code in _SCANNED:
        category = unicodedata.category(chr(code))
        if category in _STRIPPED_CATEGORIES:
            table[code] = None
        elif category == "Zs" and code != 0x20:
            table[code] = " "
        elif category in ("Zl", "Zp"):
            table[code] = "\n"
    for code in _ALSO_STRIPPED:
        table[code] = None
    for code in range(0xE0000, 0xE1000):  # the whole tag/variation block is ignorable
        table[code] = None
    for code in _LINE_BREAKS:
        table[code] = "\n"
    for code in _DASHES:
        table[code] = "-"
    return table


@functools.cache
def _final_table() -> dict[int, str | None]:
    """Step 3: the fold table over the confusables (removals and spaces take precedence)."""
    table: dict[int, str | None] = dict(confusable_table())
    table.update(_fold_table())
    return table


# ASCII text has no format characters, marks or compatibility forms: only its line controls
# need folding, so that a `.env` line after a lone CR still starts a line.
_ASCII_TABLE: dict[int, str | None] = {code: "\n" for code in _LINE_BREAKS if code < 0x80}


# `str.translate` with a dict costs ~50 ns per character; replacing each distinct character
# that needs it costs ~1 ns per character and pass. So the distinct foldable characters of a
# text are found first (one vectorized lookup over its code points), and a text with few of
# them (nearly every text) is folded by replacement, the rest by `translate`: linear either
# way.
_MAX_REPLACEMENTS = 24


@functools.cache
def _index() -> tuple[np.ndarray, np.ndarray]:
    """(sorted foldable code points, code point → position in them or -1)."""
    keys = np.array(sorted(_final_table()), dtype=np.int64)
    positions = np.full(sys.maxunicode + 1, -1, dtype=np.int16)
    positions[keys] = np.arange(len(keys), dtype=np.int16)
    return keys, positions


def _foldable(text: str) -> list[int]:
    """The distinct code points of `text` that step 1 or step 3 changes."""
    keys, positions = _index()
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    hits = positions[codes]
    hits = hits[hits >= 0]
    if hits.size == 0:
        return []
    used = np.flatnonzero(np.bincount(hits, minlength=len(keys)))
    return [int(code) for code in keys[used]]


def _apply(text: str, codes: list[int], table: dict[int, str | None]) -> str:
    """`text.translate(table)`, given the `codes` of `text` found in `table` (replacements
    are never keys themselves, so the order of replacement does not matter)."""
    if len(codes) > _MAX_REPLACEMENTS:
        return text.translate(table)
    for code in codes:
        text = text.replace(chr(code), table[code] or "")
    return text


def fold_for_detection(text: str) -> str:
    """The copy of `text` that the secret shapes are matched against (never stored)."""
    if text.isascii():
        return text.translate(_ASCII_TABLE)
    first = _fold_table()
    present = _foldable(text)
    folded = _apply(text, [code for code in present if code in first], first)
    if unicodedata.is_normalized("NFKD", folded):
        remaining = [code for code in present if code not in first]
    else:
        folded = unicodedata.normalize("NFKD", folded)
        remaining = _foldable(folded)
    return _apply(folded, remaining, _final_table())
