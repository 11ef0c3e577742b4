"""Identifiers and log lines against the real processes (issue 23, finding 8 b).

- An identifier with a control character (a tenant `acme\\n`, a principal holding an ANSI
  escape, ...) in a host-signed invocation context is an invalid binding (-32603) at the real
  `serve`; in a bearer token it is a 401 `token_refused`/`malformed` at the real gateway.
  Shapes are matched whole (`fullmatch`): Python's `$` accepts a trailing newline.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engram_memory.client.reference_host import mint_for
from tests.adversarial.wire import ALICE, Secrets, make_secrets, raw_stdio, search_call
from tests.e2e.test_gateway_http import TeamGateway, post_initialize, team_gateway

# (claim, hostile value) of a host-signed invocation context
_HOSTILE_CLAIMS: dict[str, tuple[str, str]] = {
    "tenant_newline": ("tenant", "acme\n"),
    "workspace_newline": ("workspace", "support\n"),
    "principal_ansi": ("principal", "user:alice\x1b[31m"),
    "principal_c1_csi": ("principal", "user:alice\x9b31m"),
    "agent_newline": ("agent_id", "agent:desk\n"),
    "session_bidi": ("session", "session:\u202eevil"),
    "purpose_newline": ("purpose_ref", ALICE.purpose_ref + "\n"),
}


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Secrets:
    return make_secrets(tmp_path_factory.mktemp("identifiers"))


def test_an_invocation_context_with_a_control_character_in_any_identifier_is_refused(
    secrets: Secrets,
) -> None:
    with raw_stdio(secrets.env) as serve:
        for number, (claim, value) in enumerate(_HOSTILE_CLAIMS.values(), start=1):
            token = mint_for(secrets.signer, replace(ALICE, **{claim: value}))
            answer = serve.exchange(search_call(number, token))
            assert answer["error"]["code"] == -32603, claim
        honest = serve.exchange(search_call(99, secrets.token()))
        assert honest["result"]["structuredContent"]["ok"] is True


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TeamGateway, Path]]:
    directory = tmp_path_factory.mktemp("team-logs")
    log_path = directory / "gateway.log"
    with log_path.open("wb") as log, team_gateway(directory, stderr=log) as gateway:
        yield gateway, log_path


@pytest.mark.parametrize(
    "claims",
    [{"tenant": "acme\n"}, {"workspace": "support\n"}, {"sub": "alice\x1b[31m"}],
    ids=["tenant_newline", "workspace_newline", "subject_ansi"],
)
def test_a_bearer_token_with_a_control_character_in_its_binding_is_401_malformed(
    team: tuple[TeamGateway, Path], claims: dict[str, str]
) -> None:
    gateway, _log = team
    refused = post_initialize(gateway, gateway.issuer.mint(**claims))
    assert refused.status_code == 401
    last = gateway.gateway_audit()[-1]
    assert (last["event"], last["reason"]) == ("token_refused", "malformed")
