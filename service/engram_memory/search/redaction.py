"""Field-allowlist redaction of records for search and get (SPEC §4.1 "Redaction").

Redaction is by omission only: a value is either copied whole or left out, never masked or
rewritten, so a redacted record is always a structural subset of the stored one and its
values keep verifying against their digests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engram_memory.contract.canonical import JsonValue, normalize
from engram_memory.contract.digests import digest

LINEAGE_FIELD = "derivation"
_BAD_ESCAPE = re.compile(r"~(?:[^01]|$)")


@dataclass(slots=True)
class _Selection:
    """A trie of allowed pointer tokens; `whole` means copy this member entirely."""

    whole: bool = False
    children: dict[str, _Selection] = field(default_factory=dict)

    def allow(self, tokens: Sequence[str]) -> None:
        node = self
        for token in tokens:
            if node.whole:
                return  # an ancestor is already copied whole
            node = node.children.setdefault(token, _Selection())
        node.whole = True
        node.children.clear()


def decode_pointer(pointer: str) -> list[str]:
    """Split an RFC 6901 JSON Pointer into unescaped reference tokens (`""` → `[]`).

    Raises:
        ValueError: the pointer is neither `""` nor starts with `/`, or holds a `~` not
            followed by `0` or `1`.
    """
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError("JSON pointer must be empty or start with '/'")
    if _BAD_ESCAPE.search(pointer) is not None:
        raise ValueError("JSON pointer holds an invalid '~' escape")
    tokens = pointer[1:].split("/")
    # ~1 before ~0, as RFC 6901 requires: "~01" is the key "~1", not "/".
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


def escape_pointer_token(key: str) -> str:
    """Escape one key for a JSON Pointer: `~` → `~0`, then `/` → `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


_ABSENT = object()


def _copy(value: JsonValue, selection: _Selection) -> object:
    if selection.whole:
        return _json_copy(value)
    # Stepping into an array (or a scalar) copies nothing: dropping some array elements
    # would hand out a structure the allowlist never named.
    if not isinstance(value, Mapping):
        return _ABSENT
    out: dict[str, JsonValue] = {}
    for key, child in selection.children.items():
        if key in value:
            copied = _copy(value[key], child)
            if copied is not _ABSENT:
                out[key] = copied
    # No empty shell objects: a pointer to a missing member copies nothing at all.
    return out if out else _ABSENT


def _json_copy(value: JsonValue) -> JsonValue:
    """A deep copy of a JSON tree (containers rebuilt, immutable scalars shared): several
    times faster than `copy.deepcopy`, which pays for memo and type dispatch."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value


def _utf16_key(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


def redact(
    record: Mapping[str, JsonValue],
    allowed_fields: Sequence[str],
    allow_derivation_lineage: bool,
) -> tuple[dict[str, JsonValue], list[str]]:
    """Apply a field allowlist to a full record.

    Each pointer copies its member whole; `""` copies the whole record; a pointer that
    steps into an array, a scalar or a missing member copies nothing; `derivation` is
    dropped unless lineage is allowed; `record_id` is always present. Pointer order and
    overlap do not matter.

    Returns the redacted record and `redacted_fields`: the record's top-level keys absent
    from it, as escaped pointers sorted by UTF-16 code units.

    Raises:
        ValueError: a pointer is malformed, or the record has no string `record_id`.
    """
    record_id = record.get("record_id")
    if not isinstance(record_id, str):
        raise ValueError("record has no record_id")
    selection = _Selection()
    for pointer in allowed_fields:
        tokens = decode_pointer(pointer)
        if tokens[:1] == [LINEAGE_FIELD] and not allow_derivation_lineage:
            continue
        selection.allow(tokens)
    copied = _copy(dict(record), selection)
    redacted: dict[str, JsonValue] = copied if isinstance(copied, dict) else {}
    if not allow_derivation_lineage:
        # Also covers `""`, which selected everything including the lineage.
        redacted.pop(LINEAGE_FIELD, None)
    redacted["record_id"] = record_id
    omitted = ["/" + escape_pointer_token(key) for key in record if key not in redacted]
    return redacted, sorted(omitted, key=_utf16_key)


def redaction_receipt_digest(
    record_id: str,
    source_record_digest: str,
    policy_version: str,
    redacted_fields: Sequence[str],
) -> str:
    """`D("recall-redaction", {record_id, source_record_digest, policy_version,
    redacted_fields})`.

    Raises:
        NonCanonicalValue: a value is not canonical JSON.
    """
    body = {
        "record_id": record_id,
        "source_record_digest": source_record_digest,
        "policy_version": policy_version,
        "redacted_fields": list(redacted_fields),
    }
    return digest("recall-redaction", normalize(body))
