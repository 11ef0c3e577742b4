"""Encoded text the never-store detector decodes before it looks again (bounded work).

A secret written as base64 (`cGFzc3dvcmQ9…`), hex (`2d2d2d2d2d424547494e…`), URL escapes
(`password%3Dhunter2`), HTML character references (`&#112;assword=`), rot13
(`cnffjbeq=`) or backwards (`2retnuh=drowssap`) still leaks it to whoever reads the
memory. Each decoder below turns one such form back into text; the detector folds and scans
what comes out, up to `MAX_DEPTH` decodings deep (base64 of URL-encoded text, say).

Bounds, so that the work stays linear in the input:
- runs are found by regular expressions with bounded repeats and disjoint classes;
- hex separated by spaces or colons (`2d 2d 2d`) is not decoded: finding it costs a scan
  per character that ordinary text would pay for nothing;
- a base64 or hex run counts only from `MIN_RUN` characters and is cut at `MAX_RUN`;
- every decoding is charged to a `DecodeBudget` (characters produced); once spent, nothing
  more is decoded. The detector starts each capture with a budget of a few times its size;
- decoded bytes count only if they are text: strict UTF-8 with few control characters
  (an image or a digest decodes to bytes, not text, and is dropped).
"""

from __future__ import annotations

import binascii
import codecs
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote

MAX_DEPTH = 2
MIN_RUN = 16
MAX_RUN = 16_384
MAX_RUNS_PER_TEXT = 64
_MAX_CONTROL_SHARE = 0.05

_BASE64_RUN = re.compile(rf"[A-Za-z0-9+/_-]{{{MIN_RUN},{MAX_RUN}}}={{0,2}}")
_PLAIN_HEX = re.compile(rf"(?:[0-9A-Fa-f]{{2}}){{{MIN_RUN // 2},{MAX_RUN // 2}}}")
# Bytes written `\x2d` or `0x2d`, looked for only when the text holds such a prefix.
_PREFIXED_HEX = re.compile(rf"(?:(?:\\x|0x)[0-9A-Fa-f]{{2}}){{8,{MAX_RUN}}}")
_HEX_NOISE = re.compile(r"\\x|0x")
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_CHARACTER_REFERENCE = re.compile(
    r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
)
_URL_SAFE = str.maketrans("-_", "+/")
_CONTROLS = bytes(c for c in range(32) if c not in (9, 10, 13)) + b"\x7f"


@dataclass
class DecodeBudget:
    """Characters the decoders may still produce for one capture."""

    remaining: int

    def charge(self, produced: int) -> bool:
        """Take `produced` characters from the budget; False (and nothing taken) if spent."""
        if produced > self.remaining:
            return False
        self.remaining -= produced
        return True


def _as_text(data: bytes) -> str | None:
    """`data` as text if it is UTF-8 with few control characters, else None."""
    if len(data) < MIN_RUN // 2:
        return None
    controls = len(data) - len(data.translate(None, _CONTROLS))
    if controls > len(data) * _MAX_CONTROL_SHARE:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _base64_text(run: str) -> str | None:
    body = run.rstrip("=").translate(_URL_SAFE)
    if len(body) % 4 == 1:
        body = body[:-1]
    try:
        data = binascii.a2b_base64(body + "=" * (-len(body) % 4), strict_mode=True)
    except binascii.Error:
        return None
    return _as_text(data)


def _hex_text(run: str) -> str | None:
    try:
        data = bytes.fromhex(_HEX_NOISE.sub("", run))
    except ValueError:
        return None
    return _as_text(data)


def _runs(pattern: re.Pattern[str], text: str) -> Iterator[str]:
    for count, match in enumerate(pattern.finditer(text)):
        if count >= MAX_RUNS_PER_TEXT:
            return
        yield match.group()


def decodings(text: str, budget: DecodeBudget) -> Iterator[str]:
    """Each text hidden in `text` by one layer of base64, hex, URL or HTML encoding.

    Yields nothing once `budget` is spent. rot13 and reversal are not here: they apply to
    every text, so the detector asks for them only when its keyword scan saw a rot13 or
    reversed keyword (see `rot13` and `reversed_text`).
    """
    if "%" in text and _PERCENT_ESCAPE.search(text) and budget.charge(len(text)):
        yield unquote(text, errors="replace")
    if "&" in text and _CHARACTER_REFERENCE.search(text) and budget.charge(len(text)):
        yield html.unescape(text)
    if "\\x" in text or "0x" in text:
        for run in _runs(_PREFIXED_HEX, text):
            if not budget.charge(len(run)):
                return
            decoded = _hex_text(run)
            if decoded is not None:
                yield decoded
    # One pass finds base64 runs; a run of hex digits is decoded as hex (plain hex is a
    # subset of the base64 alphabet, and base64 of text is never all hex digits).
    for run in _runs(_BASE64_RUN, text):
        if not _may_hide_text(run):
            continue
        if not budget.charge(len(run)):
            return
        decoded = _hex_text(run) if _PLAIN_HEX.fullmatch(run) else _base64_text(run)
        if decoded is not None:
            yield decoded


def _may_hide_text(run: str) -> bool:
    """False for runs that cannot be base64 or hex of text, so need no decoding attempt:
    base64 of text always holds capital letters (the first six bits of a printable byte
    index `I`..`f`), hex holds digits; a lower-case path or word holds neither."""
    return not run.islower() or any(char.isdigit() for char in run)


def rot13(text: str) -> str:
    return codecs.encode(text, "rot13")


def reversed_text(text: str) -> str:
    return text[::-1]
