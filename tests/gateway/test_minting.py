"""The gateway's fast minter makes exactly the tokens the upstream verifies."""

from __future__ import annotations

from engram_memory.gateway.caller import Caller
from engram_memory.gateway.minting import LIFETIME_S, InvocationMinter
from engram_memory.host.context import verify_invocation
from engram_memory.host.keys import HostKeyring, HostSigningKey

CALLER = Caller(
    tenant="acme",
    workspace="support",
    principal="user:\u00e9lodie",
    agent_id="agent:desktop",
    session="session:gw-test",
    approver="human:elodie",
    purposes=("purpose:support-case",),
    groups=("group:billing", "group:support"),
)


def test_a_minted_token_verifies_with_every_claim_of_the_caller() -> None:
    signer = HostSigningKey.generate()
    keyring = HostKeyring({signer.kid: signer.private_key.public_key()})
    minter = InvocationMinter(signer, "host:gateway-desktop")
    first = verify_invocation(minter.mint(CALLER, "purpose:support-case"), keyring)
    second = verify_invocation(minter.mint(CALLER, "purpose:support-case"), keyring)
    assert (first.tenant, first.workspace, first.principal) == ("acme", "support", CALLER.principal)
    assert (first.agent_id, first.session, first.host_id) == (
        "agent:desktop",
        "session:gw-test",
        "host:gateway-desktop",
    )
    assert first.purpose_ref == "purpose:support-case"
    assert first.groups == CALLER.groups
    assert first.expires_at_s - first.issued_at_s == LIFETIME_S
    assert first.audit_id != second.audit_id


def test_a_token_from_another_key_does_not_verify() -> None:
    import pytest

    from engram_memory.contract.exceptions import TokenInvalid

    trusted = HostSigningKey.generate()
    keyring = HostKeyring({trusted.kid: trusted.private_key.public_key()})
    token = InvocationMinter(HostSigningKey.generate(), "host:x").mint(CALLER, "purpose:p")
    with pytest.raises(TokenInvalid):
        verify_invocation(token, keyring)


def test_a_minter_with_the_upstreams_audience_mints_tokens_only_that_store_accepts() -> None:
    import pytest

    from engram_memory.contract.exceptions import TokenInvalid

    signer = HostSigningKey.generate()
    public = {signer.kid: signer.private_key.public_key()}
    token = InvocationMinter(signer, "host:gw", audience="store:a").mint(CALLER, "purpose:p")
    assert verify_invocation(token, HostKeyring(public, audience="store:a")).tenant == "acme"
    for other in (HostKeyring(public, audience="store:b"), HostKeyring(public)):
        with pytest.raises(TokenInvalid):
            verify_invocation(token, other)
