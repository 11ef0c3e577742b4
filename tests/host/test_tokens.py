"""Invocation contexts and confirmations: every defect refuses, nothing half-verifies."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest

from engram_memory.contract.exceptions import TokenInvalid
from engram_memory.host.confirmation import (
    ConfirmationBinding,
    mint_confirmation,
    verify_confirmation,
)
from engram_memory.host.context import INVOCATION_TYP, mint_invocation, verify_invocation
from engram_memory.host.keys import HostKeyring, HostSigningKey, public_jwk

NOW = 1_800_000_000
SIGNER = HostSigningKey.generate()
RING = HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()})


def _invocation(**overrides: object) -> str:
    claims: dict[str, object] = {
        "host_id": "host:a",
        "tenant": "acme",
        "workspace": "support",
        "principal": "user:alice",
        "agent_id": "agent:x",
        "session": "session:1",
        "purpose_ref": "purpose:p",
        "audit_id": "audit:1",
        "now_s": NOW,
    }
    claims.update(overrides)
    signer = claims.pop("signer", SIGNER)
    assert isinstance(signer, HostSigningKey)
    return mint_invocation(signer, **claims)  # type: ignore[arg-type]


def test_valid_invocation_context_binds_scope_and_purpose() -> None:
    ctx = verify_invocation(_invocation(), RING, NOW + 1)
    assert ctx.scope_ref == "tenant:acme/workspace:support"
    assert ctx.purpose_ref == "purpose:p"


@pytest.mark.parametrize(
    ("token_overrides", "now"),
    [
        ({}, NOW + 121),  # expired
        ({"now_s": NOW + 60}, NOW),  # issued in the future
        ({"lifetime_s": 301}, NOW),  # lifetime beyond 300 s
        ({"tenant": "*"}, NOW),  # wildcard scope
        ({"workspace": "a/b"}, NOW),  # scope separator smuggled in
        ({"signer": HostSigningKey.generate()}, NOW),  # untrusted key
    ],
)
def test_defective_invocation_context_is_refused(
    token_overrides: dict[str, object], now: int
) -> None:
    with pytest.raises(TokenInvalid):
        verify_invocation(_invocation(**token_overrides), RING, now)


@pytest.mark.parametrize("token", [None, "", 42, "not.a.jwt", "x" * 9000])
def test_missing_or_malformed_context_is_refused(token: object) -> None:
    with pytest.raises(TokenInvalid):
        verify_invocation(token, RING, NOW)


def test_unsigned_context_is_refused() -> None:
    token = jwt.encode(
        {"tenant": "acme"}, key=None, algorithm="none", headers={"typ": INVOCATION_TYP}
    )
    with pytest.raises(TokenInvalid):
        verify_invocation(token, RING, NOW)


def test_confirmation_token_is_not_accepted_as_invocation_context() -> None:
    binding = ConfirmationBinding(
        "engram_memory_forget", "mem_x", "sha256:0", "session:1", "user:alice"
    )
    token = mint_confirmation(SIGNER, binding, approver="human:dana", now_s=NOW)
    with pytest.raises(TokenInvalid):
        verify_invocation(token, RING, NOW)


BINDING = ConfirmationBinding(
    "engram_memory_forget", "mem_x", "sha256:" + "1" * 64, "session:1", "user:alice"
)


def test_confirmation_bound_to_this_call_verifies() -> None:
    token = mint_confirmation(SIGNER, BINDING, approver="human:dana", now_s=NOW)
    assert verify_confirmation(token, RING, BINDING, now_s=NOW + 5).approver == "human:dana"


@pytest.mark.parametrize("field", ["cap", "target", "op", "session", "principal"])
def test_confirmation_bound_to_anything_else_fails(field: str) -> None:
    token = mint_confirmation(SIGNER, BINDING, approver="human:dana", now_s=NOW)
    other = ConfirmationBinding(**{**BINDING.__dict__, field: "other"})
    with pytest.raises(TokenInvalid):
        verify_confirmation(token, RING, other, now_s=NOW)


@pytest.mark.parametrize(
    ("approver", "mint_at", "resolved_at", "check_at", "max_ttl"),
    [
        ("agent:bot", NOW, NOW, NOW, 300),  # not a human
        ("human:", NOW, NOW, NOW, 300),  # empty human subject
        ("human:dana", NOW, NOW, NOW + 31, 300),  # execution window passed
        ("human:dana", NOW, NOW, NOW, 60),  # longer than policy's TTL
        ("human:dana", NOW, NOW + 100, NOW, 300),  # resolved in the future
    ],
)
def test_confirmation_outside_the_gate_rules_fails(
    approver: str, mint_at: int, resolved_at: int, check_at: int, max_ttl: int
) -> None:
    token = mint_confirmation(
        SIGNER, BINDING, approver=approver, now_s=mint_at, resolved_at_s=resolved_at
    )
    with pytest.raises(TokenInvalid):
        verify_confirmation(token, RING, BINDING, max_ttl_s=max_ttl, now_s=check_at)


def test_keyring_loads_pem_and_jwks_with_the_same_kid(tmp_path: Path) -> None:
    signer = HostSigningKey.generate()
    signer.write_pem_files(tmp_path / "k.pem", tmp_path / "pub.pem")
    from_pem = HostKeyring.from_file(tmp_path / "pub.pem")
    jwks = tmp_path / "keys.json"
    import json

    jwks.write_text(json.dumps({"keys": [public_jwk(signer.private_key.public_key())]}))
    from_jwks = HostKeyring.from_file(jwks)
    assert set(from_pem.keys) == set(from_jwks.keys) == {signer.kid}
