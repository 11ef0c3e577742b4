"""Signed bundles: what signing changes (and does not), and every forgery verification must
refuse. OPA's own acceptance of our signatures is in test_signing_opa.py."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from engram_memory.contract.exceptions import (
    BundleError,
    BundleSignatureInvalid,
    ConfigurationError,
    SigningKeyError,
)
from engram_memory.policy.authoring.sign import sign_bundle
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DATA_FILE,
    DEFAULT_BUNDLE_DIR,
    LOCK_FILE,
    SIGNATURES_FILE,
    WASM_FILE,
    load_bundle_identity,
    read_lock,
    read_tarball,
    verify_bundle,
)
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.opa_hash import normalized_json, opa_file_hash
from engram_memory.policy.signing import (
    load_signed_bundle,
    load_verification_key,
    verify_signed_tarball,
)
from engram_memory.policy.signing_keys import (
    SIGNING_KEY_FILE,
    VERIFICATION_KEY_FILE,
    generate_key_pair,
    load_signing_key,
)
from tests.policy.signed_bundles import (
    KEY_ID,
    KeyPair,
    b64url,
    current_token,
    forge,
    make_key_pair,
    private_mode,
    replace_token,
    signed_copy,
    token_parts,
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key_pair(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key_pair(tmp_path_factory.mktemp("other-keys"))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, keys: KeyPair) -> Path:
    return signed_copy(tmp_path_factory.mktemp("pristine") / "bundle", keys)


@pytest.fixture
def signed(tmp_path: Path, pristine: Path) -> Path:
    """A fresh copy of one signed bundle (signing once per module keeps the tests fast)."""
    return Path(shutil.copytree(pristine, tmp_path / "bundle"))


def _verify(directory: Path, keys: KeyPair, key_id: str = KEY_ID) -> None:
    load_signed_bundle(directory, load_verification_key(keys.public, key_id))


def _sign_token(keys: KeyPair, header: dict[str, str], claims: dict[str, object]) -> str:
    private = load_signing_key(keys.private)
    payload = json.dumps(claims).encode()
    return jwt.PyJWS().encode(payload, private, algorithm="RS256", headers=header)


def test_signing_keeps_the_revision_and_records_the_signer_in_the_lock(
    signed: Path, keys: KeyPair
) -> None:
    assert load_bundle_identity(signed) == load_bundle_identity(DEFAULT_BUNDLE_DIR)
    assert verify_bundle(signed) == load_bundle_identity(DEFAULT_BUNDLE_DIR)
    lock = read_lock(signed)
    assert lock["signature"]["key_id"] == KEY_ID
    assert lock["signature"]["algorithm"] == "RS256"
    assert lock["bundle"]["sha256"] != read_lock(DEFAULT_BUNDLE_DIR)["bundle"]["sha256"]
    assert SIGNATURES_FILE in read_tarball(signed / BUNDLE_FILE)


def test_signing_the_same_bundle_again_gives_the_same_bytes(signed: Path, keys: KeyPair) -> None:
    before = (signed / BUNDLE_FILE).read_bytes(), (signed / LOCK_FILE).read_bytes()
    sign_bundle(signed, keys.private, KEY_ID)
    assert ((signed / BUNDLE_FILE).read_bytes(), (signed / LOCK_FILE).read_bytes()) == before


def test_re_signing_with_another_key_replaces_the_signature(
    signed: Path, keys: KeyPair, other_keys: KeyPair
) -> None:
    sign_bundle(signed, other_keys.private, "next-key")
    _verify(signed, other_keys, "next-key")
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_the_signature_names_every_file_and_the_key_id_in_opa_format(signed: Path) -> None:
    header, claims = token_parts(current_token(signed))
    assert header == {"alg": "RS256", "kid": KEY_ID, "typ": "JWT"}
    names = {entry["name"] for entry in claims["files"]}  # type: ignore[attr-defined]
    assert names == set(read_tarball(signed / BUNDLE_FILE)) - {SIGNATURES_FILE}
    assert claims["keyid"] == KEY_ID


def test_a_correctly_signed_bundle_verifies_and_loads(signed: Path, keys: KeyPair) -> None:
    key = load_verification_key(keys.public, KEY_ID)
    identity = verify_signed_tarball((signed / BUNDLE_FILE).read_bytes(), key)
    assert identity == load_bundle_identity(signed)
    engine = EmbeddedWasmEngine(signed, verification_key=key)
    try:
        assert engine.identity == identity
    finally:
        engine.close()


def _change_module(files: dict[str, bytes]) -> None:
    files["engram/authz/authz.rego"] += b"\n# tampered\n"


def _change_data(files: dict[str, bytes]) -> None:
    data = json.loads(files[DATA_FILE])
    data["tampered"] = True
    files[DATA_FILE] = json.dumps(data).encode()


def _add_file(files: dict[str, bytes]) -> None:
    files["engram/extra/extra.rego"] = b"package engram.extra\n"


def _drop_file(files: dict[str, bytes]) -> None:
    del files["engram/retention/retention.rego"]


def _unsign(files: dict[str, bytes]) -> None:
    del files[SIGNATURES_FILE]


FORGERIES = [_change_module, _change_data, _add_file, _drop_file, _unsign]


@pytest.mark.parametrize("change", FORGERIES, ids=lambda change: change.__name__)
def test_a_forged_bundle_with_a_consistent_lock_fails_only_its_signature(
    signed: Path, keys: KeyPair, change: Callable[[dict[str, bytes]], None]
) -> None:
    forge(signed, change)
    verify_bundle(signed)  # the lock alone is fooled
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)
    key = load_verification_key(keys.public, KEY_ID)
    with pytest.raises(BundleSignatureInvalid):
        verify_signed_tarball((signed / BUNDLE_FILE).read_bytes(), key)
    with pytest.raises(BundleSignatureInvalid):
        EmbeddedWasmEngine(signed, verification_key=key)


def test_a_swapped_policy_wasm_is_refused(signed: Path, keys: KeyPair, tmp_path: Path) -> None:
    other = tmp_path / "other.wasm"
    other.write_bytes((signed / WASM_FILE).read_bytes() + b"\0")
    (signed / WASM_FILE).write_bytes(other.read_bytes())
    forge(signed, lambda files: None)
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_the_wrong_key_id_is_refused(signed: Path, keys: KeyPair) -> None:
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys, "someone-else")


def test_another_key_is_refused(signed: Path, other_keys: KeyPair) -> None:
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, other_keys)


def test_a_token_naming_no_key_id_is_refused(signed: Path, keys: KeyPair) -> None:
    _, claims = token_parts(current_token(signed))
    del claims["keyid"]
    replace_token(signed, _sign_token(keys, {}, claims))
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_a_token_whose_kid_and_keyid_disagree_is_refused(signed: Path, keys: KeyPair) -> None:
    _, claims = token_parts(current_token(signed))
    replace_token(signed, _sign_token(keys, {"kid": "another"}, claims))
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_a_scoped_token_is_refused(signed: Path, keys: KeyPair) -> None:
    _, claims = token_parts(current_token(signed))
    replace_token(signed, _sign_token(keys, {"kid": KEY_ID}, {**claims, "scope": "write"}))
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_an_unsigned_alg_none_token_is_refused(signed: Path, keys: KeyPair) -> None:
    _, claims = token_parts(current_token(signed))
    header = b64url(json.dumps({"alg": "none", "kid": KEY_ID}).encode())
    replace_token(signed, f"{header}.{b64url(json.dumps(claims).encode())}.")
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_an_hmac_token_keyed_with_the_public_key_is_refused(signed: Path, keys: KeyPair) -> None:
    _, claims = token_parts(current_token(signed))
    header = b64url(json.dumps({"alg": "HS256", "kid": KEY_ID}).encode())
    signing_input = f"{header}.{b64url(json.dumps(claims).encode())}"
    mac = hmac.new(keys.public.read_bytes(), signing_input.encode(), hashlib.sha256).digest()
    replace_token(signed, f"{signing_input}.{b64url(mac)}")
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_an_extra_header_field_is_refused(signed: Path, keys: KeyPair) -> None:
    _, claims = token_parts(current_token(signed))
    header = {"kid": KEY_ID, "jku": "https://keys.invalid/jwks"}
    replace_token(signed, _sign_token(keys, header, claims))
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_two_signatures_are_refused(signed: Path, keys: KeyPair) -> None:
    token = current_token(signed)

    def twice(files: dict[str, bytes]) -> None:
        files[SIGNATURES_FILE] = json.dumps({"signatures": [token, token]}).encode()

    forge(signed, twice)
    with pytest.raises(BundleSignatureInvalid):
        _verify(signed, keys)


def test_a_bundle_that_does_not_match_its_lock_is_never_signed(
    tmp_path: Path, keys: KeyPair
) -> None:
    bundle = signed_copy(tmp_path / "bundle", keys)
    (bundle / WASM_FILE).write_bytes(b"\0asm")
    with pytest.raises(BundleError):
        sign_bundle(bundle, keys.private, KEY_ID)


def test_json_is_hashed_over_opa_normalized_encoding() -> None:
    raw = b'{ "b" : [1.0, 1e2, -0], "a": "\\b\\f\\u2028<&>\\u00e9\\u0001" }'
    expected = '{"a":"\\b\\f\\u2028<&>\u00e9\\u0001","b":[1.0,1e2,-0]}'.encode()
    assert normalized_json(raw) == expected


def test_keygen_writes_a_private_key_only_its_owner_can_read(tmp_path: Path) -> None:
    private, public, fingerprint = generate_key_pair(tmp_path / "keys")
    assert (private.name, public.name) == (SIGNING_KEY_FILE, VERIFICATION_KEY_FILE)
    assert private_mode(private) == 0o600
    assert private_mode(public) == 0o644
    assert load_verification_key(public, KEY_ID).fingerprint == fingerprint
    with pytest.raises(SigningKeyError):
        generate_key_pair(tmp_path / "keys")


def test_a_signing_key_readable_by_others_is_refused(tmp_path: Path, keys: KeyPair) -> None:
    loose = tmp_path / "loose.pem"
    loose.write_bytes(keys.private.read_bytes())
    loose.chmod(0o640)
    with pytest.raises(SigningKeyError):
        load_signing_key(loose)


def test_a_verification_key_others_can_write_is_refused(tmp_path: Path, keys: KeyPair) -> None:
    loose = tmp_path / "loose.pem"
    loose.write_bytes(keys.public.read_bytes())
    loose.chmod(0o666)
    with pytest.raises(ConfigurationError):
        load_verification_key(loose, KEY_ID)


def test_weak_or_non_rsa_keys_are_refused(tmp_path: Path) -> None:
    weak = make_key_pair(tmp_path / "weak", bits=1024)
    with pytest.raises(SigningKeyError):
        load_signing_key(weak.private)
    with pytest.raises(SigningKeyError):
        load_verification_key(weak.public, KEY_ID)
    ec_public = tmp_path / "ec.pem"
    ec_public.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(SigningKeyError):
        load_verification_key(ec_public, KEY_ID)


@pytest.mark.parametrize("key_id", ["", "has space", "line\nbreak", "-leading", "x" * 129])
def test_a_malformed_key_id_is_refused(keys: KeyPair, key_id: str) -> None:
    with pytest.raises(SigningKeyError):
        load_verification_key(keys.public, key_id)


def test_an_encrypted_signing_key_is_refused(tmp_path: Path, keys: KeyPair) -> None:
    private = load_signing_key(keys.private)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    encrypted.chmod(0o600)
    with pytest.raises(SigningKeyError):
        load_signing_key(encrypted)


def test_a_private_key_given_as_the_verification_key_is_refused(keys: KeyPair) -> None:
    with pytest.raises(SigningKeyError):
        load_verification_key(keys.private, KEY_ID)


def test_only_data_json_and_manifest_are_hashed_as_json_and_yaml_data_is_refused() -> None:
    assert (
        opa_file_hash("engram/x/data.json", b'{ "a" : 1 }')
        == hashlib.sha256(b'{"a":1}').hexdigest()
    )
    assert (
        opa_file_hash("engram/x/other.json", b'{ "a" : 1 }')
        == hashlib.sha256(b'{ "a" : 1 }').hexdigest()
    )
    with pytest.raises(BundleError):
        opa_file_hash("data.yaml", b"a: 1\n")
    with pytest.raises(BundleError):
        opa_file_hash("data.json", b"{not json")
