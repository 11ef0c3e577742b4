"""The optional `groups` claim: absent means none, the canonical form verifies, and any other
form makes the whole invocation context invalid (the call is refused like a forged one)."""

from __future__ import annotations

import pytest

from engram_memory.client.reference_host import Binding, mint_for
from engram_memory.contract.exceptions import TokenInvalid
from engram_memory.contract.groups import canonical_groups
from engram_memory.host.context import (
    INVOCATION_TYP,
    mint_invocation,
    verify_invocation,
)
from engram_memory.host.keys import HostKeyring, HostSigningKey
from engram_memory.host.tokens import sign
from engram_memory.policy.decider import Subject

NOW = 1_800_000_000
SIGNER = HostSigningKey.generate()
RING = HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()})


def _signed_with_groups(groups: object) -> str:
    """A token whose `groups` claim is exactly `groups`, bypassing the minting helper."""
    claims = {
        "iss": "host:a",
        "tenant": "acme",
        "workspace": "support",
        "principal": "user:zoe",
        "agent_id": "agent:x",
        "session": "session:1",
        "purpose_ref": "purpose:p",
        "audit_id": "audit:1",
        "iat": NOW,
        "exp": NOW + 60,
        "groups": groups,
    }
    return sign(claims, SIGNER, INVOCATION_TYP)


def _minted(groups: list[str] | None) -> str:
    return mint_invocation(
        SIGNER,
        host_id="host:a",
        tenant="acme",
        workspace="support",
        principal="user:zoe",
        agent_id="agent:x",
        session="session:1",
        purpose_ref="purpose:p",
        audit_id="audit:1",
        groups=groups,
        now_s=NOW,
    )


def test_a_context_without_the_claim_has_no_groups() -> None:
    assert verify_invocation(_minted(None), RING, NOW + 1).groups == ()


def test_an_empty_groups_claim_means_no_groups() -> None:
    assert verify_invocation(_signed_with_groups([]), RING, NOW + 1).groups == ()


def test_sorted_unique_groups_are_bound_to_the_context() -> None:
    groups = ["group:advisors", "group:case-team", "group:ünïcode"]
    assert verify_invocation(_minted(groups), RING, NOW + 1).groups == tuple(groups)


def test_the_limits_themselves_are_accepted() -> None:
    longest = "group:" + "a" * 250
    many = [f"group:g{i:02d}" for i in range(64)]
    assert verify_invocation(_minted([longest]), RING, NOW + 1).groups == (longest,)
    assert len(verify_invocation(_minted(many), RING, NOW + 1).groups) == 64


@pytest.mark.parametrize(
    "groups",
    [
        "group:advisors",  # not a list
        {"group:advisors": True},  # not a list
        None,  # an explicit null is not "absent"
        [42],  # not a string
        [["group:advisors"]],  # nested
        ["advisors"],  # no prefix
        ["user:zoe"],  # another kind of reference
        ["group:"],  # empty name
        ["GROUP:advisors"],  # the prefix is exact
        ["group:b", "group:a"],  # unsorted
        ["group:a", "group:a"],  # duplicate
        [f"group:g{i:02d}" for i in range(65)],  # too many
        ["group:" + "a" * 251],  # 257 bytes
        ["group:" + "é" * 126],  # 258 UTF-8 bytes, 132 characters
        ["group:a\nb"],  # control character
        ["group:a\u200bb"],  # format character (zero-width space)
        ["group:a\u2028b"],  # line separator
        ["group:e\u0301"],  # not NFC
        ["group:*"],  # wildcard
        ["group:\ud800"],  # lone surrogate
    ],
)
def test_a_malformed_groups_claim_invalidates_the_context(groups: object) -> None:
    with pytest.raises(TokenInvalid):
        verify_invocation(_signed_with_groups(groups), RING, NOW + 1)


def test_canonical_groups_sorts_and_deduplicates_a_hosts_groups() -> None:
    assert canonical_groups(["group:b", "group:a", "group:b"]) == ["group:a", "group:b"]


@pytest.mark.parametrize("groups", [["advisors"], [f"group:g{i}" for i in range(65)]])
def test_canonical_groups_refuses_what_could_not_verify(groups: list[str]) -> None:
    with pytest.raises(ValueError, match="group"):
        canonical_groups(groups)


def test_the_reference_host_signs_the_groups_of_its_binding() -> None:
    binding = Binding("acme", "support", "user:zoe", "purpose:p", groups=("group:b", "group:a"))
    context = verify_invocation(mint_for(SIGNER, binding), RING)
    assert context.groups == ("group:a", "group:b")
    bare = Binding("acme", "support", "user:zoe", "purpose:p")
    assert verify_invocation(mint_for(SIGNER, bare), RING).groups == ()


def test_the_policy_input_carries_groups_only_when_there_are_some() -> None:
    bare = Subject("acme", "support", "user:zoe", "agent:x", "purpose:p", "host:a")
    assert "groups" not in bare.as_input()
    member = Subject("acme", "support", "user:zoe", "agent:x", "purpose:p", "host:a", ("group:a",))
    assert member.as_input() == {**bare.as_input(), "groups": ["group:a"]}
