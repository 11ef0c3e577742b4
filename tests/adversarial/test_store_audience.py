"""A token spent on one store is not accepted by another trusting the same host key
(issue 23, finding 8 d), against two real `serve` processes.

Both stores trust one host key; each has its own `ENGRAM_STORE_AUDIENCE`. A token minted for
store A (`aud` = A) is served by A and refused by B (-32603, the binding is invalid there);
a token without `aud` is refused by both; a token minted for B is served by B.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engram_memory.client.reference_host import mint_for
from tests.adversarial.wire import ALICE, make_secrets, raw_stdio, search_call

INVALID_BINDING = -32603


def test_a_token_for_one_store_is_refused_by_another_trusting_the_same_host_key(
    tmp_path: Path,
) -> None:
    secrets = make_secrets(tmp_path, ENGRAM_STORE_AUDIENCE="store:a")
    env_b = {
        **secrets.env,
        "ENGRAM_DATA_DIR": str(tmp_path / "data-b"),
        "ENGRAM_STORE_AUDIENCE": "store:b",
    }
    for_a = mint_for(secrets.signer, replace(ALICE, audience="store:a"))
    for_b = mint_for(secrets.signer, replace(ALICE, audience="store:b"))
    for_nobody = mint_for(secrets.signer, ALICE)
    with raw_stdio(secrets.env) as store_a, raw_stdio(env_b) as store_b:
        assert store_a.exchange(search_call(1, for_a))["result"]["structuredContent"]["ok"]
        # The same token, spent once more on the other store.
        assert store_b.exchange(search_call(2, for_a))["error"]["code"] == INVALID_BINDING
        assert store_a.exchange(search_call(3, for_nobody))["error"]["code"] == INVALID_BINDING
        assert store_b.exchange(search_call(4, for_nobody))["error"]["code"] == INVALID_BINDING
        assert store_b.exchange(search_call(5, for_b))["result"]["structuredContent"]["ok"]


def test_a_store_without_an_audience_refuses_a_token_naming_one(tmp_path: Path) -> None:
    secrets = make_secrets(tmp_path)
    with raw_stdio(secrets.env) as store:
        named = mint_for(secrets.signer, replace(ALICE, audience="store:a"))
        assert store.exchange(search_call(1, named))["error"]["code"] == INVALID_BINDING
        assert store.exchange(search_call(2, secrets.token()))["result"]["structuredContent"]["ok"]
