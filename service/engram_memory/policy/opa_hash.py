"""The per-file hash OPA writes into (and checks against) a bundle signature.

OPA does not hash every file's raw bytes. Files it treats as structured documents (by base
name: `data.json`, `data.yaml`, `.manifest`) are parsed and hashed over a normalized
encoding, so whitespace and key order do not change the hash:

- an object is `{`, then for each key in byte order the JSON string of the key, `:` and
  the value's encoding, separated by `,`, then `}`;
- an array is `[`, the elements' encodings separated by `,`, then `]`;
- a string is Go's `encoding/json` output without HTML escaping (`"` and `\\` escaped,
  `\\b \\f \\n \\r \\t` by name, other control characters as `\\u00xx`, U+2028/U+2029
  escaped, everything else as raw UTF-8);
- a number is its literal text exactly as written (OPA decodes with `UseNumber`);
- `true`, `false`, `null` as themselves.

Every other file (Rego modules) is hashed over its raw bytes. Only SHA-256 is accepted: it is
what `opa sign` and `opa build --signing-key` write.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from engram_memory.contract.exceptions import BundleError

HASH_ALGORITHM = "SHA-256"
# Base names OPA parses before hashing (bundle.IsStructuredDoc, minus `.signatures.json`,
# which is never itself hashed).
_JSON_DOCUMENTS = frozenset({"data.json", ".manifest"})
_YAML_DOCUMENTS = frozenset({"data.yaml"})
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NAMED_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\u2028\u2029]')


class _Number:
    """A JSON number kept as the literal text it was written with."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    return _NAMED_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _go_string(text: str) -> bytes:
    # Go's decoder turns an unpaired surrogate escape into U+FFFD; Python keeps it.
    cleaned = _LONE_SURROGATE.sub("\ufffd", text)
    return ('"' + _NEEDS_ESCAPE.sub(_escape, cleaned) + '"').encode("utf-8")


def _encode(value: Any, out: bytearray) -> None:
    if isinstance(value, dict):
        out += b"{"
        # Go sorts the decoded keys by their bytes, not by their escaped form.
        keys = sorted(value, key=lambda key: _LONE_SURROGATE.sub("\ufffd", key).encode())
        for index, key in enumerate(keys):
            if index:
                out += b","
            out += _go_string(key) + b":"
            _encode(value[key], out)
        out += b"}"
    elif isinstance(value, list):
        out += b"["
        for index, item in enumerate(value):
            if index:
                out += b","
            _encode(item, out)
        out += b"]"
    elif isinstance(value, str):
        out += _go_string(value)
    elif isinstance(value, _Number):
        out += value.text.encode("ascii")
    elif value is True:
        out += b"true"
    elif value is False:
        out += b"false"
    elif value is None:
        out += b"null"
    else:  # json.loads yields nothing else
        raise TypeError(f"unexpected JSON value {type(value).__name__}")


def normalized_json(content: bytes) -> bytes:
    """The bytes OPA hashes for a structured JSON document (see the module docstring).

    Raises:
        BundleError: not UTF-8 JSON (OPA would refuse the bundle too).
    """
    try:
        value = json.loads(
            content.decode("utf-8"),
            parse_int=_Number,
            parse_float=_Number,
            parse_constant=_refuse_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BundleError("a structured bundle file is not UTF-8 JSON") from exc
    out = bytearray()
    _encode(value, out)
    return bytes(out)


def opa_file_hash(name: str, content: bytes) -> str:
    """Hex SHA-256 of bundle file `name` as OPA computes it for a signature.

    Raises:
        BundleError: a structured file that is not JSON, or a `data.yaml` (our bundles
            carry none; refusing it is safer than guessing OPA's YAML conversion).
    """
    base = name.rsplit("/", 1)[-1]
    if base in _YAML_DOCUMENTS:
        raise BundleError(f"{name}: YAML data files are not supported in signed bundles")
    hashed = normalized_json(content) if base in _JSON_DOCUMENTS else content
    return hashlib.sha256(hashed).hexdigest()
