"""Issue 9 item 4: only `human:<subject>` with a subject a human can be named by releases the
gate; the verified confirmation carries the evidence of who approved what, and when."""

from __future__ import annotations

import pytest

from engram_memory.contract.exceptions import TokenInvalid
from engram_memory.host.confirmation import (
    ConfirmationBinding,
    mint_confirmation,
    verify_confirmation,
)
from engram_memory.host.keys import HostKeyring, HostSigningKey

NOW = 1_800_000_000
SIGNER = HostSigningKey.generate()
RING = HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()})
BINDING = ConfirmationBinding(
    "engram_memory_forget", "mem_x", "sha256:" + "1" * 64, "session:1", "user:alice"
)


def _verify(approver: str) -> str:
    token = mint_confirmation(SIGNER, BINDING, approver=approver, now_s=NOW)
    return verify_confirmation(token, RING, BINDING, now_s=NOW + 1).approver


@pytest.mark.parametrize(
    "approver",
    [
        "human: ",  # a blank subject
        "human:",  # no subject
        " human:x",  # padded before
        "human:x ",  # padded after
        "human: x",  # a padded subject
        "human:\tx",
        "human:x\u00a0",  # a no-break space is whitespace too
        "robot:x",  # not a human
        "Human:x",  # the prefix is exact
        "human:x\u200b",  # zero-width space (a format character)
        "human:a\nb",  # control characters anywhere
        "human:a\x00b",
        "human:a\u2028b",  # line separator
        "human:" + "x" * 257,  # over-long subject
    ],
)
def test_an_approver_that_does_not_name_a_human_fails_the_gate(approver: str) -> None:
    with pytest.raises(TokenInvalid):
        _verify(approver)


@pytest.mark.parametrize("approver", ["human:dana", "human:Jane Doe", "human:" + "x" * 256])
def test_an_approver_naming_a_human_releases_the_gate(approver: str) -> None:
    assert _verify(approver) == approver


def test_a_verified_confirmation_carries_its_issue_resolution_and_operation() -> None:
    token = mint_confirmation(
        SIGNER, BINDING, approver="human:dana", now_s=NOW, resolved_at_s=NOW + 3, jti="jti-9"
    )
    verified = verify_confirmation(token, RING, BINDING, now_s=NOW + 4)
    assert (verified.jti, verified.issued_at_s, verified.resolved_at_s, verified.op) == (
        "jti-9",
        NOW,
        NOW + 3,
        BINDING.op,
    )


def test_the_approver_groups_the_host_asserts_travel_sorted_and_absent_stays_absent() -> None:
    groups = ["group:records-officers", "group:dpo"]
    token = mint_confirmation(
        SIGNER, BINDING, approver="human:olga", now_s=NOW, approver_groups=groups
    )
    verified = verify_confirmation(token, RING, BINDING, now_s=NOW + 1)
    assert verified.approver_groups == ("group:dpo", "group:records-officers")
    plain = mint_confirmation(SIGNER, BINDING, approver="human:olga", now_s=NOW)
    assert verify_confirmation(plain, RING, BINDING, now_s=NOW + 1).approver_groups is None


@pytest.mark.parametrize(
    "groups", ["group:dpo", ["dpo"], ["group:a*"], [1], [f"group:{n}" for n in range(65)]]
)
def test_malformed_approver_groups_fail_the_gate(groups: object) -> None:
    token = mint_confirmation(
        SIGNER,
        BINDING,
        approver="human:olga",
        now_s=NOW,
        approver_groups=groups,  # type: ignore[arg-type]
    )
    with pytest.raises(TokenInvalid):
        verify_confirmation(token, RING, BINDING, now_s=NOW + 1)
