"""Page cursors: reference form plus MAC over a recomputed binding (SPEC §9.6)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import replace
from typing import Any

import pytest
import rfc8785

from engram_memory.contract.digests import domain_digest
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.search.cursor import (
    PageCursorFields,
    decode_page_cursor,
    encode_page_cursor,
    page_binding,
    require_same_ordering,
)
from engram_memory.search.receipts import SearchParameters

SECRET = b"s" * 32
PARAMS = SearchParameters(query="postgres migration", purpose_ref="purpose:ops")
BINDING = page_binding(PARAMS, scope_ref="scope:t1/w1", principal="user:alice")
FIELDS = PageCursorFields(
    profile="offline_lexical_v1",
    valid_as_of=1_760_000_000_000,
    system_as_of="42",
    offset=10,
    ordered_ids_digest="sha256:" + "ab" * 32,
)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _mac(body: dict[str, Any], binding: str = BINDING, secret: bytes = SECRET) -> str:
    signed = rfc8785.dumps({**body, "binding": binding})
    return hmac.new(secret, signed, hashlib.sha256).hexdigest()


def _forge(body: dict[str, Any], *, sign: bool = True) -> str:
    """A cursor with any body, correctly MACed, so only the defect under test remains."""
    if sign:
        body = {**body, "mac": _mac(body)}
    return _b64(rfc8785.dumps(body))


def _assert_stale(cursor: str, binding: str = BINDING, secret: bytes = SECRET) -> None:
    with pytest.raises(ToolError) as caught:
        decode_page_cursor(cursor, binding, secret)
    assert caught.value.code is ErrorCode.STALE_PAGE


def test_cursor_round_trips_its_pinned_fields() -> None:
    cursor = encode_page_cursor(FIELDS, BINDING, SECRET)
    assert decode_page_cursor(cursor, BINDING, SECRET) == FIELDS


def test_cursor_is_unpadded_base64url_of_jcs_without_the_binding() -> None:
    cursor = encode_page_cursor(FIELDS, BINDING, SECRET)
    assert len(cursor.encode()) <= 512
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    body = json.loads(raw)
    assert raw == rfc8785.dumps(body)
    assert set(body) == {
        "profile",
        "valid_as_of",
        "system_as_of",
        "offset",
        "ordered_ids_digest",
        "mac",
    }
    assert body["mac"] == _mac(FIELDS.as_json())


def test_page_binding_is_the_page_binding_digest_of_effective_values() -> None:
    expected = domain_digest(
        "graphify-memory/page-binding/v1\0",
        {
            "scope_ref": "scope:t1/w1",
            "principal": "user:alice",
            "query": "postgres migration",
            "purpose_ref": "purpose:ops",
            "limit": 10,
            "max_packet_bytes": 65536,
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
        },
    )
    assert expected == BINDING


@pytest.mark.parametrize(
    "other",
    [
        page_binding(PARAMS, scope_ref="scope:t1/w2", principal="user:alice"),
        page_binding(PARAMS, scope_ref="scope:t1/w1", principal="user:bob"),
        page_binding(
            replace(PARAMS, query="postgres"), scope_ref="scope:t1/w1", principal="user:alice"
        ),
        page_binding(replace(PARAMS, limit=11), scope_ref="scope:t1/w1", principal="user:alice"),
        page_binding(
            replace(PARAMS, max_packet_bytes=4096), scope_ref="scope:t1/w1", principal="user:alice"
        ),
        page_binding(
            replace(PARAMS, capability_policy={"minimum_channels": "lexical", "network": "allow"}),
            scope_ref="scope:t1/w1",
            principal="user:alice",
        ),
    ],
    ids=["scope", "principal", "query", "limit", "budget", "capability"],
)
def test_cursor_under_another_binding_is_stale(other: str) -> None:
    _assert_stale(encode_page_cursor(FIELDS, BINDING, SECRET), binding=other)


def test_cursor_after_secret_rotation_is_stale() -> None:
    _assert_stale(encode_page_cursor(FIELDS, BINDING, SECRET), secret=b"t" * 32)


def test_every_single_character_tamper_is_stale() -> None:
    cursor = encode_page_cursor(FIELDS, BINDING, SECRET)
    for index, char in enumerate(cursor):
        for replacement in {"A", "x", "-"} - {char}:
            _assert_stale(cursor[:index] + replacement + cursor[index + 1 :])


@pytest.mark.parametrize(
    "cursor",
    ["", "!", "abc=", "a", "abcde", "ab cd", "é" * 8, "A" * 600],
    ids=[
        "empty",
        "bang",
        "padding",
        "one-char",
        "len-mod-4-is-1",
        "space",
        "non-ascii",
        "too-long",
    ],
)
def test_undecodable_cursor_is_stale(cursor: str) -> None:
    _assert_stale(cursor)


def test_non_canonical_base64_trailing_bits_are_stale() -> None:
    cursor = encode_page_cursor(FIELDS, BINDING, SECRET)
    # With 2 or 3 characters in the last quantum, the lowest bit of the last character is
    # discarded by decoding: flipping it gives another string for the same bytes.
    assert len(cursor) % 4 in (2, 3)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = cursor[:-1] + alphabet[alphabet.index(cursor[-1]) ^ 1]
    pad = "=" * (-len(cursor) % 4)
    assert base64.urlsafe_b64decode(twin + pad) == base64.urlsafe_b64decode(cursor + pad)
    _assert_stale(twin)


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[1,2]", b'"text"', b"{}", b"\xff\xfe", b'{"a":NaN}'],
    ids=["garbage", "array", "string", "empty-object", "bad-utf8", "nan"],
)
def test_base64_of_something_else_is_stale(raw: bytes) -> None:
    _assert_stale(_b64(raw))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("profile", "bm25_v9"),
        ("profile", 1),
        ("valid_as_of", "1760000000000"),
        ("valid_as_of", 1.5),
        ("valid_as_of", -1),
        ("system_as_of", 42),
        ("system_as_of", "042"),
        ("system_as_of", str(2**64)),
        ("offset", 0),
        ("offset", True),
        ("offset", "10"),
        ("ordered_ids_digest", "sha256:" + "AB" * 32),
        ("ordered_ids_digest", ["sha256:" + "ab" * 32]),
    ],
)
def test_correctly_signed_cursor_with_wrong_field_shape_is_stale(key: str, value: object) -> None:
    _assert_stale(_forge({**FIELDS.as_json(), key: value}))


def test_unsafe_integer_is_stale() -> None:
    # JCS cannot even encode it, so build the JSON by hand.
    body = {**FIELDS.as_json(), "valid_as_of": 2**53, "mac": "0" * 64}
    _assert_stale(_b64(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()))


def test_missing_or_extra_keys_are_stale() -> None:
    body = FIELDS.as_json()
    _assert_stale(_forge({k: v for k, v in body.items() if k != "offset"}))
    _assert_stale(_forge({**body, "binding": BINDING}))
    _assert_stale(_forge(body, sign=False))


def test_malformed_mac_is_stale() -> None:
    body = FIELDS.as_json()
    _assert_stale(_b64(rfc8785.dumps({**body, "mac": _mac(body).upper()})))
    _assert_stale(_b64(rfc8785.dumps({**body, "mac": 7})))


def test_forged_offset_keeping_the_original_mac_is_stale() -> None:
    body = FIELDS.as_json()
    mac = _mac(body)
    _assert_stale(_b64(rfc8785.dumps({**body, "offset": 20, "mac": mac})))


def test_mac_forged_with_another_secret_is_stale() -> None:
    body = {**FIELDS.as_json(), "offset": 20}
    _assert_stale(_b64(rfc8785.dumps({**body, "mac": _mac(body, secret=b"x" * 32)})))


def test_non_canonical_json_with_a_valid_mac_is_stale() -> None:
    body = {**FIELDS.as_json(), "mac": _mac(FIELDS.as_json())}
    _assert_stale(_b64(json.dumps(body).encode()))  # whitespace, insertion order
    duplicated = rfc8785.dumps(body)[:-1] + b',"offset":10}'
    _assert_stale(_b64(duplicated))


def test_same_ordering_passes() -> None:
    require_same_ordering(FIELDS, ordered_ids_digest=FIELDS.ordered_ids_digest, ordered_count=11)


def test_changed_ordering_is_stale() -> None:
    with pytest.raises(ToolError) as caught:
        require_same_ordering(FIELDS, ordered_ids_digest="sha256:" + "cd" * 32, ordered_count=11)
    assert caught.value.code is ErrorCode.STALE_PAGE


def test_offset_past_the_reranked_list_is_stale() -> None:
    with pytest.raises(ToolError) as caught:
        require_same_ordering(
            FIELDS, ordered_ids_digest=FIELDS.ordered_ids_digest, ordered_count=10
        )
    assert caught.value.code is ErrorCode.STALE_PAGE


def test_encoding_refuses_a_short_secret_or_a_non_digest_binding() -> None:
    with pytest.raises(ValueError, match="secret"):
        encode_page_cursor(FIELDS, BINDING, b"short")
    with pytest.raises(ValueError, match="binding"):
        encode_page_cursor(FIELDS, "not-a-digest", SECRET)


def test_encoding_refuses_out_of_shape_fields() -> None:
    with pytest.raises(ValueError, match="shape"):
        encode_page_cursor(replace(FIELDS, offset=0), BINDING, SECRET)
