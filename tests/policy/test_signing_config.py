"""The verification key as configuration: both variables or neither, and with a key only a
bundle signed by it opens (the same path `serve`, `admin` and `import` take)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory.contract.exceptions import BundleSignatureInvalid, ConfigurationError
from engram_memory.core.service_config import load_config
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR
from engram_memory.policy.factory import open_policy_engine
from tests.policy.signed_bundles import KEY_ID, KeyPair, make_key_pair, signed_copy


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key_pair(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def env(tmp_path: Path, keys: KeyPair) -> dict[str, str]:
    for name in ("root.key", "host-keys.pem"):
        (tmp_path / name).write_text("placeholder: only existence is checked here\n")
    return {
        "ENGRAM_ROOT_KEY": str(tmp_path / "root.key"),
        "ENGRAM_HOST_KEYS": str(tmp_path / "host-keys.pem"),
        "ENGRAM_BUNDLE_VERIFICATION_KEY": str(keys.public),
        "ENGRAM_BUNDLE_KEY_ID": KEY_ID,
    }


@pytest.mark.parametrize("missing", ["ENGRAM_BUNDLE_VERIFICATION_KEY", "ENGRAM_BUNDLE_KEY_ID"])
def test_the_key_and_its_id_must_be_configured_together(env: dict[str, str], missing: str) -> None:
    del env[missing]
    with pytest.raises(ConfigurationError):
        load_config(env=env)


def test_a_missing_key_file_is_a_configuration_error(env: dict[str, str], tmp_path: Path) -> None:
    env["ENGRAM_BUNDLE_VERIFICATION_KEY"] = str(tmp_path / "absent.pem")
    with pytest.raises(ConfigurationError):
        load_config(env=env)


def test_without_a_key_signatures_are_not_checked(env: dict[str, str]) -> None:
    del env["ENGRAM_BUNDLE_VERIFICATION_KEY"], env["ENGRAM_BUNDLE_KEY_ID"]
    assert load_config(env=env).bundle_verification_key is None


@pytest.mark.parametrize("engine", ["embedded", "opa-spawn"])
def test_a_configured_key_refuses_an_unsigned_bundle(env: dict[str, str], engine: str) -> None:
    key = load_config(env=env).bundle_verification_key
    with (
        pytest.raises(BundleSignatureInvalid),
        open_policy_engine(engine, DEFAULT_BUNDLE_DIR, verification_key=key),
    ):
        pass


def test_a_configured_key_opens_the_bundle_it_signed(
    env: dict[str, str], keys: KeyPair, tmp_path: Path
) -> None:
    bundle = signed_copy(tmp_path / "bundle", keys)
    key = load_config(env=env).bundle_verification_key
    assert key is not None
    with open_policy_engine("embedded", bundle, verification_key=key) as (_, identity):
        assert identity.revision.startswith("engram-default+")
