"""The HTTP gateway's bearer-token verifier against a real local issuer: real keys, a real
JWKS over HTTP, the real gateway audit log."""

from __future__ import annotations

import time
from typing import Any

import anyio
from cryptography.hazmat.primitives.asymmetric import rsa

from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.jwks import JwksCache
from engram_memory.gateway.oauth import (
    ClaimSource,
    GatewayAccessToken,
    JwtVerifier,
    ServedScope,
    TokenRules,
)
from engram_memory.gateway.token_cache import TokenCache
from tests.gateway.conftest import RESOURCE, Clock, entries
from tests.gateway.token_issuer import OMIT, TokenIssuer

SUPPORT = ServedScope("acme", "support", ("purpose:support-case",))


def rules_for(issuer: TokenIssuer, **overrides: Any) -> TokenRules:
    base: dict[str, Any] = {
        "issuer": issuer.issuer,
        "audience": RESOURCE,
        "algorithms": ("RS256", "ES256"),
        "scopes": (SUPPORT,),
        "groups": ClaimSource(claim="groups", prefix="group:"),
    }
    return TokenRules(**{**base, **overrides})


def verifier(
    issuer: TokenIssuer, audit: GatewayAudit, clock: Clock | None = None, **overrides: Any
) -> JwtVerifier:
    keys = JwksCache(issuer.jwks_url, clock=clock or Clock(), timeout_s=5)
    return JwtVerifier(rules_for(issuer, **overrides), keys, audit)


async def test_a_valid_token_binds_the_mapped_caller(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    token = issuer.mint("alice", groups=["support-advisors", "oncall", "oncall"])
    access = await verifier(issuer, audit).verify_token(token)
    assert isinstance(access, GatewayAccessToken)
    assert (access.tenant, access.workspace) == ("acme", "support")
    assert access.principal == "user:alice"
    assert access.agent_id == "agent:desk-client"
    assert access.approver == "human:alice"
    assert access.purposes == ("purpose:support-case",)
    assert access.groups == ("group:oncall", "group:support-advisors")
    assert token not in access.token
    assert entries(audit) == []


async def test_the_approver_is_asserted_in_the_tokens_groups_only_when_groups_are_mapped(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    token = issuer.mint("olga", groups=["records-officers"])
    mapped = await verifier(issuer, audit).verify_token(token)
    unmapped = await verifier(issuer, audit, groups=None).verify_token(token)
    assert isinstance(mapped, GatewayAccessToken)
    assert isinstance(unmapped, GatewayAccessToken)
    # The token speaks for human:olga, so its groups are hers: the confirmations the
    # gateway mints assert them (four-eyes); without a mapping it knows none, asserts none.
    assert mapped.approver_groups == ("group:records-officers",)
    assert unmapped.approver_groups is None
    empty = await verifier(issuer, audit).verify_token(issuer.mint("olga", groups=OMIT))
    assert isinstance(empty, GatewayAccessToken)
    assert empty.approver_groups == ()


async def test_an_es256_token_and_an_audience_list_are_accepted(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    token = issuer.mint(alg="ES256", aud=["https://other.example", RESOURCE])
    assert isinstance(await verifier(issuer, audit).verify_token(token), GatewayAccessToken)


async def test_fixed_tenant_and_workspace_values_bind_a_one_tenant_deployment(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    check = verifier(
        issuer, audit, tenant=ClaimSource(value="acme"), workspace=ClaimSource(value="support")
    )
    access = await check.verify_token(issuer.mint(tenant=OMIT, workspace=OMIT))
    assert isinstance(access, GatewayAccessToken)
    assert access.tenant == "acme"


def _refusals(issuer: TokenIssuer, foreign: TokenIssuer) -> dict[str, tuple[str, str]]:
    now = int(time.time())
    other_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {
        "garbage": ("not.a.jwt", "malformed"),
        "over 16 KiB": (issuer.mint(extra={"pad": "x" * 17 * 1024}), "malformed"),
        "alg none": (issuer.mint(alg="none"), "algorithm_refused"),
        "HS256 keyed with the public key": (
            issuer.mint(alg="HS256", key=issuer.public_pem()),
            "algorithm_refused",
        ),
        "RS384 not configured": (issuer.mint(alg="RS384"), "algorithm_refused"),
        "another issuer": (foreign.mint(), "wrong_issuer"),
        "no issuer": (issuer.mint(iss=OMIT), "missing_claim"),
        "our kid, another key": (issuer.mint(key=other_rsa), "bad_signature"),
        "another issuer's key claiming ours": (
            foreign.mint(iss=issuer.issuer, kid="rsa-1"),
            "bad_signature",
        ),
        "unknown kid": (issuer.mint(kid="rotated-away"), "unknown_key"),
        "no kid": (issuer.mint(kid=OMIT), "unknown_key"),
        "RS256 under the EC key's kid": (
            issuer.mint(kid="ec-1", key=issuer.private_key("rsa-1")),
            "algorithm_refused",
        ),
        "wrong audience": (issuer.mint(aud="https://other.example/mcp"), "wrong_audience"),
        "expired": (issuer.mint(iat=now - 600, exp=now - 300), "expired"),
        "not yet valid": (issuer.mint(nbf=now + 300), "not_yet_valid"),
        "issued in the future": (issuer.mint(iat=now + 300, exp=now + 600), "not_yet_valid"),
        "no subject": (issuer.mint(sub=OMIT), "missing_claim"),
        "no expiry": (issuer.mint(exp=OMIT), "missing_claim"),
        "no audience": (issuer.mint(aud=OMIT), "missing_claim"),
        "subject not a string": (issuer.mint(sub=42), "malformed"),
        "no tenant": (issuer.mint(tenant=OMIT), "missing_claim"),
        "tenant not a scope name": (issuer.mint(tenant="acme/*"), "malformed"),
        "another tenant": (issuer.mint(tenant="globex", workspace="main"), "scope_not_served"),
        "another workspace": (issuer.mint(workspace="sales"), "scope_not_served"),
        "groups not a list": (issuer.mint(groups="support-advisors"), "malformed"),
        "a wildcard group": (issuer.mint(groups=["support-*"]), "malformed"),
        "65 groups": (issuer.mint(groups=[f"g{i}" for i in range(65)]), "malformed"),
        "a subject with a control character": (issuer.mint(sub="alice\u0007"), "malformed"),
        "no agent": (issuer.mint(azp=OMIT), "missing_claim"),
    }


async def test_every_bad_token_is_refused_with_its_own_audited_reason(
    issuer: TokenIssuer, foreign_issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    check = verifier(issuer, audit, algorithms=("RS256", "ES256", "HS256"))
    cases = _refusals(issuer, foreign_issuer)
    for name, (token, reason) in cases.items():
        assert await check.verify_token(token) is None, name
        last = entries(audit)[-1]
        assert (last["event"], last["reason"]) == ("token_refused", reason), name
    log = audit.path.read_text()
    for token, _reason in cases.values():
        assert token not in log


async def test_a_token_living_longer_than_the_configured_maximum_is_refused(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    now = int(time.time())
    check = verifier(issuer, audit, max_lifetime_s=3600)
    assert await check.verify_token(issuer.mint(iat=now, exp=now + 3500)) is not None
    for token in (issuer.mint(iat=now, exp=now + 7200), issuer.mint(iat=now - 7000, exp=now + 60)):
        assert await check.verify_token(token) is None
        last = entries(audit)[-1]
        assert (last["event"], last["reason"]) == ("token_refused", "lifetime_too_long")


async def test_a_token_without_a_required_scope_is_audited_and_left_to_the_sdks_403(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    check = verifier(issuer, audit, required_scopes=("memory.use",))
    access = await check.verify_token(issuer.mint(scope="openid profile"))
    assert access is not None
    assert "memory.use" not in access.scopes
    assert entries(audit)[-1]["reason"] == "insufficient_scope"
    granted = await check.verify_token(issuer.mint(extra={"scp": ["memory.use"]}))
    assert granted is not None
    assert "memory.use" in granted.scopes


async def test_a_storm_of_unknown_kids_fetches_the_jwks_once_per_cooldown(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    clock = Clock()
    check = verifier(issuer, audit, clock)
    assert await check.verify_token(issuer.mint()) is not None
    assert issuer.jwks_fetches == 1
    for n in range(20):
        assert await check.verify_token(issuer.mint(kid=f"invented-{n}")) is None
    assert issuer.jwks_fetches == 1  # within the cooldown of the first fetch
    clock.now += 31
    assert await check.verify_token(issuer.mint(kid="invented-again")) is None
    assert await check.verify_token(issuer.mint(kid="and-again")) is None
    assert issuer.jwks_fetches == 2


async def test_a_rotated_in_key_is_fetched_after_the_cooldown(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    clock = Clock()
    check = verifier(issuer, audit, clock)
    assert await check.verify_token(issuer.mint()) is not None
    issuer.add_key("rsa-2")
    clock.now += 31
    assert await check.verify_token(issuer.mint(kid="rsa-2")) is not None


async def test_an_idp_outage_keeps_the_cached_keys_and_no_jwks_at_all_refuses_every_token(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    clock = Clock()
    cached = verifier(issuer, audit, clock)
    assert await cached.verify_token(issuer.mint()) is not None
    issuer.jwks_available = False
    clock.now += 3600
    assert await cached.verify_token(issuer.mint()) is not None
    cold = verifier(issuer, audit, Clock())
    assert await cold.verify_token(issuer.mint()) is None
    assert entries(audit)[-1]["reason"] == "jwks_unavailable"


def test_the_cache_keeps_a_token_until_its_expiry_or_its_own_lifetime_and_stays_bounded() -> None:
    clock = Clock()
    cache: TokenCache[str] = TokenCache(ttl_s=60, capacity=3, clock=clock)
    cache.put("short", "S", expires_at=clock.now + 30)
    cache.put("long", "L", expires_at=clock.now + 600)
    assert cache.get("short") == "S"
    clock.now += 31
    assert cache.get("short") is None
    assert cache.get("long") == "L"
    clock.now += 30
    assert cache.get("long") is None
    for name in "abcd":
        cache.put(name, name, expires_at=clock.now + 600)
    assert cache.get("a") is None
    assert cache.get("d") == "d"


async def test_an_accepted_token_is_answered_from_the_cache_and_a_refused_one_judged_each_time(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    check = verifier(issuer, audit)
    token = issuer.mint()
    first = await check.verify_token(token)
    assert first is not None
    assert await check.verify_token(token) is first
    wrong = issuer.mint(aud="https://other.example/mcp")
    assert await check.verify_token(wrong) is None
    assert await check.verify_token(wrong) is None
    assert [entry["reason"] for entry in entries(audit)] == ["wrong_audience"] * 2


async def test_an_idp_that_never_answers_refuses_the_token_once_the_fetch_times_out(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    keys = JwksCache(issuer.jwks_url, timeout_s=0.5)
    check = JwtVerifier(rules_for(issuer), keys, audit)
    issuer.jwks_answering.clear()
    with anyio.fail_after(10):
        assert await check.verify_token(issuer.mint()) is None
    assert entries(audit)[-1]["reason"] == "jwks_unavailable"
