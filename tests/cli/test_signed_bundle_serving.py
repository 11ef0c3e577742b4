"""The real `serve` process with a bundle verification key: a tampered bundle is refused at
start-up (one line, exit 2, nothing written); a correctly signed one is served. (Unsigned
bundles and half-configured keys are refused by the same path: test_signing_config.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import Binding, connect
from engram_memory.host.keys import HostSigningKey
from tests.policy.signed_bundles import KEY_ID, KeyPair, forge, make_key_pair, signed_copy
from tests.servers import http_server, server_env

ALICE = Binding(
    tenant="acme", workspace="support", principal="user:alice", purpose_ref="purpose:support-case"
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key_pair(tmp_path_factory.mktemp("bundle-keys"))


@pytest.fixture
def host_signing_key(tmp_path: Path) -> Path:
    return init_host_dir(tmp_path / "secrets")[1]


@pytest.fixture
def env(tmp_path: Path, keys: KeyPair, host_signing_key: Path) -> dict[str, str]:
    root_key, _, public_keys = init_host_dir(tmp_path / "secrets")
    return server_env(
        tmp_path / "data",
        root_key,
        public_keys,
        ENGRAM_BUNDLE_VERIFICATION_KEY=str(keys.public),
        ENGRAM_BUNDLE_KEY_ID=KEY_ID,
    )


def _serve(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram_memory.cli", "serve"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _tamper(files: dict[str, bytes]) -> None:
    files["engram/authz/authz.rego"] += b"\n# tampered\n"


def test_serve_refuses_a_tampered_signed_bundle_with_one_line_and_exit_2(
    tmp_path: Path, keys: KeyPair, env: dict[str, str]
) -> None:
    bundle = signed_copy(tmp_path / "bundle", keys)
    forge(bundle, _tamper)
    result = _serve({**env, "ENGRAM_BUNDLE": str(bundle)})
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "data").exists()


async def test_serve_answers_governed_calls_with_a_correctly_signed_bundle(
    tmp_path: Path, keys: KeyPair, env: dict[str, str], host_signing_key: Path
) -> None:
    bundle = signed_copy(tmp_path / "bundle", keys)
    signer = HostSigningKey.from_pem_file(host_signing_key)
    with http_server({**env, "ENGRAM_BUNDLE": str(bundle)}) as (_, url):
        async with connect(url, signer, ALICE) as host:
            args = {"query": "anything", "purpose_ref": ALICE.purpose_ref}
            outcome = await host.call("engram_memory_search", args)
    assert outcome.envelope["ok"] is True
