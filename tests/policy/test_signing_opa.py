"""Compatibility, proven by the pinned OPA itself: `opa run --verification-key` accepts what
`policy sign` writes and refuses unsigned, tampered or foreign bundles; what `opa sign`
writes verifies with our verifier (same file hashes, JSON normalized as OPA does)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest

from engram_memory.contract.exceptions import BundleSignatureInvalid, OpaServerStartError
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DATA_FILE,
    DEFAULT_BUNDLE_DIR,
    MANIFEST_FILE,
    SIGNATURES_FILE,
    identity_for,
    manifest_bytes,
    read_tarball,
    write_tarball,
)
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.factory import open_policy_engine
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server
from engram_memory.policy.signing import WASM_CLAIM, load_verification_key, verify_signed_tarball
from engram_memory.policy.signing_keys import load_signing_key
from tests.policy.conftest import fixed_clock, subject
from tests.policy.signed_bundles import (
    KEY_ID,
    KeyPair,
    current_token,
    forge,
    make_key_pair,
    replace_token,
    signed_copy,
    token_parts,
)

pytestmark = pytest.mark.opa


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key_pair(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory, keys: KeyPair) -> Path:
    return signed_copy(tmp_path_factory.mktemp("signed") / "bundle", keys)


def test_opa_serves_a_bundle_signed_by_policy_sign(
    signed: Path, keys: KeyPair, opa_bin: Path
) -> None:
    key = (keys.public, KEY_ID)
    with start_opa_server(signed / BUNDLE_FILE, opa_bin, verification_key=key) as url:
        engine = OpaServerEngine(url)
        try:
            answer = engine.evaluate("engram/authz/decision", {})
            identity = read_tarball(signed / BUNDLE_FILE)[MANIFEST_FILE]
            assert answer.revision == json.loads(identity)["revision"]
        finally:
            engine.close()


def test_opa_spawn_with_a_key_decides_with_the_signed_bundle(
    signed: Path, keys: KeyPair, opa_bin: Path
) -> None:
    key = load_verification_key(keys.public, KEY_ID)
    with open_policy_engine("opa-spawn", signed, opa_bin=opa_bin, verification_key=key) as (
        engine,
        identity,
    ):
        decider = PolicyDecider(engine, identity, fixed_clock)
        assert decider.confirmation(subject(), "engram_memory_forget").required


def _unsigned(directory: Path, keys: KeyPair) -> None:
    shutil.copyfile(DEFAULT_BUNDLE_DIR / BUNDLE_FILE, directory / BUNDLE_FILE)


def _tampered(directory: Path, keys: KeyPair) -> None:
    def change(files: dict[str, bytes]) -> None:
        files["engram/authz/authz.rego"] += b"\n# tampered\n"

    forge(directory, change)


def _foreign_key(directory: Path, keys: KeyPair) -> None:
    stranger = make_key_pair(directory.parent / "stranger")
    shutil.rmtree(directory)
    signed_copy(directory, stranger)


@pytest.mark.parametrize(
    "spoil",
    [_unsigned, _tampered, _foreign_key],
    ids=lambda spoil: spoil.__name__.strip("_"),
)
def test_opa_refuses_what_our_verifier_refuses(
    tmp_path: Path,
    signed: Path,
    keys: KeyPair,
    opa_bin: Path,
    spoil: Callable[[Path, KeyPair], None],
) -> None:
    bundle = Path(shutil.copytree(signed, tmp_path / "bundle"))
    spoil(bundle, keys)
    key = load_verification_key(keys.public, KEY_ID)
    with pytest.raises(BundleSignatureInvalid):
        verify_signed_tarball((bundle / BUNDLE_FILE).read_bytes(), key)
    with (
        pytest.raises(OpaServerStartError),
        start_opa_server(bundle / BUNDLE_FILE, opa_bin, verification_key=(keys.public, KEY_ID)),
    ):
        pass


def test_a_foreign_key_id_is_refused_here_though_opa_with_one_key_ignores_it(
    tmp_path: Path, keys: KeyPair, opa_bin: Path
) -> None:
    # OPA verifies with the key configured under --verification-key-id whatever id the
    # token names; we also require the token to name that id, so a key reused under two
    # ids (say staging and production) cannot move bundles between them.
    bundle = signed_copy(tmp_path / "bundle", keys, key_id="staging")
    key = load_verification_key(keys.public, KEY_ID)
    with pytest.raises(BundleSignatureInvalid):
        verify_signed_tarball((bundle / BUNDLE_FILE).read_bytes(), key)
    with start_opa_server(bundle / BUNDLE_FILE, opa_bin, verification_key=(keys.public, KEY_ID)):
        pass


# Not our canonical bytes: whitespace, escapes and number spellings OPA must normalize.
_AWKWARD_DATA = """{
  "zz_awkward": {"text": "tab\\t bell\\u0007 back\\b form\\f sep\\u2028 \\u00e9 <&>",
                 "numbers": [1.0, 1e2, 1E+2, -0, 12345678901234567890],
                 "": null, "\\u00e9": true, "e": false},
  "engram": %s
}
"""


def test_a_bundle_signed_by_opa_sign_verifies_with_our_verifier(
    tmp_path: Path, keys: KeyPair, opa_bin: Path
) -> None:
    files = read_tarball(DEFAULT_BUNDLE_DIR / BUNDLE_FILE)
    engram = json.dumps(json.loads(files[DATA_FILE])["engram"], indent=3)
    files[DATA_FILE] = (_AWKWARD_DATA % engram).encode()
    files.pop(MANIFEST_FILE)
    identity = identity_for(files, "opa-signed")
    files[MANIFEST_FILE] = manifest_bytes(identity)  # `", "` separators: not normalized
    source = tmp_path / "source"
    for name, content in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(content)
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({"keyid": KEY_ID}))
    sign = [str(opa_bin), "sign", "--signing-key", str(keys.private), "--bundle", "."]
    subprocess.run(
        [*sign, "--claims-file", str(claims), "-o", str(tmp_path)],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=60,
    )
    files[SIGNATURES_FILE] = (tmp_path / SIGNATURES_FILE).read_bytes()
    write_tarball(files, tmp_path / BUNDLE_FILE)
    key = load_verification_key(keys.public, KEY_ID)
    assert verify_signed_tarball((tmp_path / BUNDLE_FILE).read_bytes(), key) == identity


def test_a_signature_without_the_wasm_claim_serves_through_opa_but_not_embedded(
    tmp_path: Path, signed: Path, keys: KeyPair, opa_bin: Path
) -> None:
    bundle = Path(shutil.copytree(signed, tmp_path / "bundle"))
    _, claims = token_parts(current_token(bundle))
    del claims[WASM_CLAIM]
    private = load_signing_key(keys.private)
    payload = json.dumps(claims).encode()
    replace_token(bundle, jwt.PyJWS().encode(payload, private, algorithm="RS256"))
    key = load_verification_key(keys.public, KEY_ID)
    with pytest.raises(BundleSignatureInvalid):
        EmbeddedWasmEngine(bundle, verification_key=key)
    with open_policy_engine("opa-spawn", bundle, opa_bin=opa_bin, verification_key=key) as (
        engine,
        identity,
    ):
        assert engine.evaluate("engram/authz/decision", {}).revision == identity.revision
