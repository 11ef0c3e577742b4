"""The compact JWS reader refuses every malformed token PyJWT refused, and a few more forms
no host mints (`crit`, a detached payload); a well-formed token verifies as before."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest

from engram_memory.contract.exceptions import TokenInvalid
from engram_memory.host.context import INVOCATION_TYP, mint_invocation, verify_invocation
from engram_memory.host.keys import HostKeyring, HostSigningKey

NOW = 1_800_000_000
SIGNER = HostSigningKey.generate()
RING = HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()})
CLAIMS: dict[str, Any] = {
    "iss": "host:a",
    "tenant": "acme",
    "workspace": "support",
    "principal": "user:alice",
    "agent_id": "agent:x",
    "session": "session:1",
    "purpose_ref": "purpose:p",
    "audit_id": "audit:1",
    "iat": NOW,
    "exp": NOW + 120,
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _signed(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A token signed by the trusted key over exactly this header and these claims."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = SIGNER.private_key.sign(signing_input.encode("ascii"))
    return f"{signing_input}.{_b64(signature)}"


HEADER = {"alg": "EdDSA", "typ": INVOCATION_TYP, "kid": SIGNER.kid}


def test_a_token_built_by_hand_verifies_like_one_pyjwt_minted() -> None:
    minted = mint_invocation(
        SIGNER,
        host_id="host:a",
        tenant="acme",
        workspace="support",
        principal="user:alice",
        agent_id="agent:x",
        session="session:1",
        purpose_ref="purpose:p",
        audit_id="audit:1",
        now_s=NOW,
    )
    by_hand = verify_invocation(_signed(HEADER, CLAIMS), RING, NOW + 1)
    assert by_hand == verify_invocation(minted, RING, NOW + 1)


def test_trailing_padding_that_completes_a_quantum_is_accepted_as_pyjwt_did() -> None:
    head, payload, signature = _signed(HEADER, CLAIMS).split(".")
    padded = head + "=" * (-len(head) % 4)
    if padded == head:  # the header already fills whole quanta: pad the signature instead
        padded_token = f"{head}.{payload}.{signature}{'=' * (-len(signature) % 4)}"
    else:
        padded_token = f"{padded}.{payload}.{signature}"
    assert verify_invocation(padded_token, RING, NOW + 1).tenant == "acme"


def _tampered(token: str, part: int, new: str) -> str:
    parts = token.split(".")
    parts[part] = new
    return ".".join(parts)


GOOD = _signed(HEADER, CLAIMS)
_LAST = GOOD[-1]
# 64 signature bytes leave 2 unused low bits in the last character: "B" and "C" set them.
_STRAY_BITS = "C" if _LAST == "B" else "B"


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(GOOD + ".", id="four-segments"),
        pytest.param(GOOD.replace(".", "", 1), id="two-segments"),
        pytest.param(_tampered(GOOD, 0, GOOD.split(".")[0] + "==="), id="too-much-padding"),
        pytest.param(_tampered(GOOD, 0, GOOD.split(".")[0][:-1] + "!"), id="outside-the-alphabet"),
        pytest.param(
            _tampered(GOOD, 2, GOOD.split(".")[2][:-1] + _STRAY_BITS),
            id="non-canonical-last-character",
        ),
        pytest.param(_tampered(GOOD, 2, _b64(b"\0" * 64)), id="a-signature-that-does-not-verify"),
        pytest.param(
            _tampered(GOOD, 1, _b64(json.dumps({**CLAIMS, "tenant": "globex"}).encode())),
            id="claims-changed-after-signing",
        ),
        pytest.param(_signed({**HEADER, "kid": 7}, CLAIMS), id="kid-not-a-string"),
        pytest.param(
            _signed({**HEADER, "crit": ["exp"], "exp": 1}, CLAIMS), id="an-extension-we-do-not-know"
        ),
        pytest.param(
            _signed({**HEADER, "b64": False, "crit": ["b64"]}, CLAIMS), id="detached-payload"
        ),
        pytest.param(_signed({**HEADER, "alg": "none"}, CLAIMS), id="alg-none"),
        pytest.param(_signed(HEADER, {**CLAIMS, "sub": 5}), id="pyjwt-s-sub-check-kept"),
        pytest.param(_signed(HEADER, {**CLAIMS, "jti": ["x"]}), id="pyjwt-s-jti-check-kept"),
        pytest.param(
            f"{_b64(b'[1]')}.{GOOD.split('.')[1]}.{GOOD.split('.')[2]}", id="header-not-an-object"
        ),
        pytest.param("é" + GOOD, id="not-ascii"),
        pytest.param(
            jwt.encode(CLAIMS, key=None, algorithm="none", headers={"typ": INVOCATION_TYP}),
            id="unsigned",
        ),
    ],
)
def test_malformed_compact_tokens_are_refused(token: str) -> None:
    with pytest.raises(TokenInvalid):
        verify_invocation(token, RING, NOW + 1)


def test_a_payload_that_is_not_an_object_is_refused_even_when_signed() -> None:
    header = _b64(json.dumps(HEADER).encode())
    payload = _b64(b'["acme"]')
    signature = _b64(SIGNER.private_key.sign(f"{header}.{payload}".encode("ascii")))
    with pytest.raises(TokenInvalid):
        verify_invocation(f"{header}.{payload}.{signature}", RING, NOW + 1)
