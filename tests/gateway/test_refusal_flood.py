"""A storm of bad bearer tokens writes a bounded, exact account to the gateway audit log."""

from __future__ import annotations

import pytest

from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.jwks import JwksCache
from engram_memory.gateway.oauth import JwtVerifier, ServedScope, TokenRules
from engram_memory.gateway.refusal_flood import RefusalFlood
from tests.gateway.conftest import RESOURCE, Clock, entries
from tests.gateway.token_issuer import TokenIssuer

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")


async def test_beyond_the_burst_refusals_are_counted_and_summarised_once_the_window_ends(
    issuer: TokenIssuer, audit: GatewayAudit
) -> None:
    clock = Clock()
    rules = TokenRules(
        issuer=issuer.issuer,
        audience=RESOURCE,
        algorithms=("RS256",),
        scopes=(ServedScope("acme", "support", ("purpose:support-case",)),),
    )
    flood = RefusalFlood(burst=2, interval_s=60, clock=clock)
    check = JwtVerifier(rules, JwksCache(issuer.jwks_url), audit, flood=flood)
    for _ in range(5):
        assert await check.verify_token("not-a-jwt") is None
    assert await check.verify_token(issuer.mint(aud="https://other.example")) is None
    assert [e["reason"] for e in entries(audit)] == ["malformed", "malformed", "wrong_audience"]
    clock.now += 61
    assert await check.verify_token("still-not-a-jwt") is None
    written = entries(audit)
    summary = written[3]
    assert (summary["reason"], summary["detail"]["summary_count"]) == ("malformed", "3")
    assert written[4]["reason"] == "malformed"
    assert "detail" not in written[4]
    # Stopping writes what is still open; the counts add up to every refusal made.
    for _ in range(3):
        await check.verify_token("again-not-a-jwt")
    check.flush_refusals()
    malformed = [e for e in entries(audit) if e["reason"] == "malformed"]
    counted = sum(int(e.get("detail", {}).get("summary_count", "1")) for e in malformed)
    assert counted == 5 + 1 + 3
