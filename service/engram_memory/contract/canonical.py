"""Normalization and RFC 8785 canonical JSON (SPEC §3, §9.1).

Every value that is validated, compared, digested or stored goes through `normalize` first:
NFC strings and keys, no `null`, no unpaired surrogates, no duplicate keys after NFC, finite
numbers only, integers within the IEEE-754 safe range. Integral floats (`10.0`, `1e1`) become
ints because the reference engine treats them as the same number.
"""

from __future__ import annotations

import functools
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785

from engram_memory.contract.exceptions import NonCanonicalValue

SAFE_INTEGER_MAX = 2**53 - 1

JsonValue = Any  # a normalized JSON tree: dict[str, JsonValue] | list | str | int | float | bool


# UAX #15 "Stream-Safe Text Format": no real text needs more combining marks in a row.
MAX_NONSTARTER_RUN = 30


def nfc(text: str) -> str:
    """NFC-normalize `text`, refusing unpaired surrogates.

    Normalizing sorts each run of combining marks by insertion (CPython), so one 64 KiB run
    of marks out of canonical order costs seconds and a 1 MiB one many minutes. A string
    already in NFC is checked in linear time and kept; one that needs normalizing is refused
    if it holds a run of more than MAX_NONSTARTER_RUN combining marks (project decision).

    Raises:
        NonCanonicalValue: the string holds an unpaired surrogate, or needs normalizing and
            holds an over-long run of combining marks.
    """
    if text.isascii():
        return text  # ASCII is NFC and holds no surrogate (ids, digests, refs: most strings)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NonCanonicalValue("unpaired surrogate") from exc
    if unicodedata.is_normalized("NFC", text):
        return text
    if _NONSTARTER_RUN in text.translate(_nonstarter_table()):
        raise NonCanonicalValue("over-long run of combining marks")
    return unicodedata.normalize("NFC", text)


_NONSTARTER = "\x01"
_NONSTARTER_RUN = _NONSTARTER * (MAX_NONSTARTER_RUN + 1)


@functools.cache
def _nonstarter_table() -> dict[int, str]:
    """Every non-starter (canonical combining class > 0) → one marker; the marker itself →
    another character, so only non-starters make a run. They all lie in planes 0 and 1."""
    table = {code: _NONSTARTER for code in range(0x20000) if unicodedata.combining(chr(code)) > 0}
    table[ord(_NONSTARTER)] = "\x02"
    return table


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def normalize(value: object) -> JsonValue:
    """Return the normalized JSON tree of `value` (see module docstring).

    Exact `str`, `dict` and `list` (what parsed JSON is made of) take a direct path; every
    other type goes through `_normalize_node`, which decides as this always has.

    Raises:
        NonCanonicalValue: null, unpaired surrogate, duplicate key after NFC, non-finite or
            negative-zero number, unsafe integer, or a non-JSON type.
    """
    kind = type(value)
    if kind is str:
        return nfc(value)  # type: ignore[arg-type]
    if kind is dict:
        return _normalize_object(value)  # type: ignore[arg-type]
    if kind is list:
        return [normalize(item) for item in value]  # type: ignore[attr-defined]
    return _normalize_node(value)


def _normalize_node(value: object) -> JsonValue:
    """`normalize` for anything but an exact `str`, `dict` or `list`."""
    if isinstance(value, str):
        return nfc(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > SAFE_INTEGER_MAX:
            raise NonCanonicalValue("unsafe integer")
        return value
    if isinstance(value, float):
        return _normalize_float(value)
    if isinstance(value, Mapping):
        return _normalize_object(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [normalize(item) for item in value]
    if value is None:
        raise NonCanonicalValue("null")
    raise NonCanonicalValue("not a JSON value")


def _normalize_object(value: Mapping[object, object]) -> dict[str, JsonValue]:
    """A JSON object's members normalized, its keys NFC and unique after it (an ASCII key is
    kept as is: `nfc`'s own first test, inlined because most keys are ASCII)."""
    out: dict[str, JsonValue] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise NonCanonicalValue("non-string key")
        nkey = key if key.isascii() else nfc(key)
        if nkey in out:
            raise NonCanonicalValue("duplicate key after NFC")
        out[nkey] = normalize(item)
    return out


def _normalize_float(value: float) -> int | float:
    if not math.isfinite(value):
        raise NonCanonicalValue("non-finite number")
    if value == 0.0 and math.copysign(1.0, value) < 0:
        raise NonCanonicalValue("negative zero")
    if value.is_integer():
        if abs(value) > SAFE_INTEGER_MAX:
            raise NonCanonicalValue("unsafe integer")
        return int(value)
    return value


FLOAT_PLAIN_FROM = 1e-4


def _same_as_sorted_json(value: JsonValue) -> bool:
    """True when the standard library's sorted, compact JSON is exactly JCS for `value`.

    That holds for strings (same escapes once normalized), booleans and safe integers, and for
    object keys below U+D800, where code point order equals JCS's UTF-16 code unit order.
    Floats below 1e-4 are left to the RFC 8785 encoder (there repr switches to exponent
    notation, ECMAScript only below 1e-6).

    Walks the tree with plain loops on exact types (a call checks hundreds of nodes: no
    generator per node); subclasses (a StrEnum member, a Mapping) take `_same_as_sorted_node`.
    """
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or max(key) < "\ud800"):
                return False
            if type(item) is not str and not _same_as_sorted_json(item):
                return False
        return True
    if kind is list:
        # Strings first without a call: ranked id lists hold thousands of them. A plain loop,
        # not all(): no generator to resume per item.
        for item in value:  # noqa: SIM110
            if type(item) is not str and not _same_as_sorted_json(item):
                return False
        return True
    return _same_as_sorted_node(value)


def _same_as_sorted_node(value: JsonValue) -> bool:
    """`_same_as_sorted_json` for a scalar, or a container of a subclass type."""
    if isinstance(value, str | bool):
        return True
    if isinstance(value, int):
        return abs(value) <= SAFE_INTEGER_MAX
    if isinstance(value, float):
        # A finite float that is not integral is below 2**53; from 1e-4 up, Python's
        # repr and ECMAScript's Number::toString both print its shortest round-trip digits in
        # plain decimal notation (scores, 0.15..1, are the common case).
        return abs(value) >= FLOAT_PLAIN_FROM and not value.is_integer()
    if isinstance(value, dict):
        return all(
            isinstance(key, str)
            and (key.isascii() or max(key) < "\ud800")
            and _same_as_sorted_json(item)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return all(_same_as_sorted_json(item) for item in value)
    return False


# Built once: `json.dumps` with options builds a new encoder on every call.
_SORTED_COMPACT = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)


def canonical_json(value: JsonValue) -> bytes:
    """RFC 8785 (JCS) bytes of an already normalized value.

    The C encoder of the standard library serves values it encodes identically (about four
    times faster: a call serializes dozens of values); anything else goes through the RFC 8785
    encoder.

    Raises:
        NonCanonicalValue: the value holds something JCS cannot encode.
    """
    if _same_as_sorted_json(value):
        try:
            return _SORTED_COMPACT.encode(value).encode("utf-8")
        except (ValueError, UnicodeEncodeError) as exc:
            raise NonCanonicalValue("not canonicalizable") from exc
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise NonCanonicalValue("not canonicalizable") from exc


def canonical_text(value: JsonValue) -> str:
    return canonical_json(value).decode("utf-8")
