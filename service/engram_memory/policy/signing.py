"""Signed bundles in OPA's own format (`policy sign`, verification at load and in `policy
verify`).

`bundle.tar.gz` gains `.signatures.json`: `{"signatures": ["<JWT>"]}`, one compact JWS
(RS256, header `kid`) whose payload lists every other file of the tarball with the hash OPA
computes for it (`opa_hash.py`), plus `keyid`. So `opa run --verification-key PUB
--verification-key-id ID --bundle bundle.tar.gz` accepts the bundle, and a bundle signed by
`opa sign` (with a claims file carrying `keyid`) verifies here.

`policy.wasm` lives beside the tarball, not in it (OPA would refuse a signed file it cannot
find), so the signature binds it through one extra claim OPA ignores: `engram_wasm`, the
Wasm's SHA-256. The embedded engine requires that claim: the Wasm it runs, like the data
and modules, is the one the signer signed. A bundle signed by `opa sign` has no such claim;
it verifies for an OPA server, not for the embedded engine.

The content digest and revision exclude `.signatures.json` (like `.manifest`), so signing
never changes a revision; the lock records the new tarball sha256 and who signed.

Verification is strict, in this order: exactly one token; header only `alg` (= RS256, fixed
by the key type), `typ`, `kid`; the RSA signature; the key id named by `kid` and/or `keyid`
(at least one, all equal to the configured id); no `scope`; only SHA-256 hashes; the listed
names are exactly the tarball's files minus `.signatures.json`, each hash matching.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from engram_memory.contract.exceptions import BundleError, BundleSignatureInvalid
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DATA_FILE,
    MANIFEST_FILE,
    SIGNATURES_FILE,
    WASM_FILE,
    content_digest,
    read_artifacts,
    tarball_files,
    verify_bundle,
)
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.opa_hash import HASH_ALGORITHM, opa_file_hash
from engram_memory.policy.signing_keys import (
    ALGORITHM,
    VerificationKey,
    load_verification_key,
)

__all__ = [
    "BundleSignatureInvalid",
    "SignedBundle",
    "VerificationKey",
    "load_signed_bundle",
    "load_verification_key",
    "verify_signed_bundle",
    "verify_signed_tarball",
]

WASM_CLAIM = "engram_wasm"
_ALLOWED_HEADER = frozenset({"alg", "typ", "kid"})


@dataclass(frozen=True)
class SignedBundle:
    """What a verified signed bundle directory gives the embedded engine: the identity and
    the exact bytes (data, Wasm) the signature was checked over."""

    identity: BundleIdentity
    data: bytes
    wasm: bytes


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _single_token(raw: bytes | None) -> str:
    if raw is None:
        raise BundleSignatureInvalid(f"bundle is not signed (no {SIGNATURES_FILE})")
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise BundleSignatureInvalid(f"{SIGNATURES_FILE} is not JSON") from exc
    tokens = document.get("signatures") if isinstance(document, dict) else None
    if not isinstance(tokens, list) or len(tokens) != 1 or not isinstance(tokens[0], str):
        raise BundleSignatureInvalid(f"{SIGNATURES_FILE} must hold exactly one signature")
    return tokens[0]


def _verified_claims(raw: bytes | None, key: VerificationKey) -> dict[str, Any]:
    token = _single_token(raw)
    try:
        header = jwt.get_unverified_header(token)
        # The accepted algorithm comes from the key type, never from the token: `none`,
        # HS256 keyed with the public key, or anything but RS256 fails here.
        decoded = jwt.PyJWS().decode_complete(token, key=key.public_key, algorithms=[ALGORITHM])
        claims = json.loads(decoded["payload"])
    except (jwt.PyJWTError, ValueError) as exc:
        raise BundleSignatureInvalid(
            f"bundle signature does not verify with key id {key.key_id}"
        ) from exc
    if set(header) - _ALLOWED_HEADER or header.get("typ", "JWT") != "JWT":
        raise BundleSignatureInvalid("bundle signature header has unsupported fields")
    if not isinstance(claims, dict):
        raise BundleSignatureInvalid("bundle signature payload is not an object")
    named = [value for value in (header.get("kid"), claims.get("keyid")) if value is not None]
    if not named:
        raise BundleSignatureInvalid("bundle signature names no key id (kid or keyid)")
    if any(value != key.key_id for value in named):
        raise BundleSignatureInvalid(f"bundle is signed for another key id, not {key.key_id}")
    if claims.get("scope", "") != "":
        raise BundleSignatureInvalid("bundle signature carries a scope; none is configured")
    return claims


def _signed_hashes(claims: dict[str, Any]) -> dict[str, str]:
    listing = claims.get("files")
    if not isinstance(listing, list):
        raise BundleSignatureInvalid("bundle signature lists no files")
    hashes: dict[str, str] = {}
    for entry in listing:
        name = entry.get("name") if isinstance(entry, dict) else None
        digest = entry.get("hash") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(digest, str) or name in hashes:
            raise BundleSignatureInvalid("bundle signature has a malformed or repeated file")
        if entry.get("algorithm") != HASH_ALGORITHM:
            raise BundleSignatureInvalid(f"{name}: only {HASH_ALGORITHM} file hashes are accepted")
        hashes[name] = digest.lower()
    return hashes


def _check_files(files: dict[str, bytes], hashes: dict[str, str]) -> None:
    unsigned = sorted(set(files) - set(hashes))
    if unsigned:
        raise BundleSignatureInvalid(f"{unsigned[0]}: file is not covered by the signature")
    missing = sorted(set(hashes) - set(files))
    if missing:
        raise BundleSignatureInvalid(f"{missing[0]}: signed file is missing from the bundle")
    for name in sorted(files):
        try:
            actual = opa_file_hash(name, files[name])
        except BundleError as exc:
            raise BundleSignatureInvalid(f"{name}: cannot be hashed for verification") from exc
        if actual != hashes[name]:
            raise BundleSignatureInvalid(f"{name}: content differs from the signed hash")


def _identity(files: dict[str, bytes]) -> BundleIdentity:
    try:
        manifest = json.loads(files.get(MANIFEST_FILE) or b"")
        revision = manifest["revision"]
        identity = BundleIdentity(revision=revision, digest=content_digest(files))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BundleError("bundle .manifest revision does not name its content") from exc
    if manifest.get("roots") != ["engram"]:
        raise BundleError('bundle .manifest roots must be ["engram"]')
    return identity


def verified_files(
    files: dict[str, bytes], key: VerificationKey
) -> tuple[BundleIdentity, dict[str, Any]]:
    unsigned = dict(files)
    claims = _verified_claims(unsigned.pop(SIGNATURES_FILE, None), key)
    _check_files(unsigned, _signed_hashes(claims))
    return _identity(unsigned), claims


def verify_signed_tarball(tar_bytes: bytes, key: VerificationKey) -> BundleIdentity:
    """Verify a bundle tarball's signature against `key`; return the identity its signed
    `.manifest` and content give (revision = `<label>+<content digest>`).

    Raises:
        BundleSignatureInvalid: unsigned, wrong key or key id, a file added, removed or
            changed, or a malformed signature.
        BundleError: unreadable tarball, or a signed revision that does not name the
            content.
    """
    return verified_files(tarball_files(tar_bytes, "bundle tarball"), key)[0]


def _check_wasm_claim(claims: dict[str, Any], wasm: bytes) -> None:
    wasm_claim = claims.get(WASM_CLAIM)
    if not isinstance(wasm_claim, dict) or wasm_claim.get("name") != WASM_FILE:
        raise BundleSignatureInvalid(
            f"the signature does not cover {WASM_FILE} (sign with `engram-memory policy sign`)"
        )
    if wasm_claim.get("algorithm") != HASH_ALGORITHM or wasm_claim.get("hash") != _sha256(wasm):
        raise BundleSignatureInvalid(f"{WASM_FILE}: content differs from the signed hash")


def load_signed_bundle(
    bundle_dir: Path | str, key: VerificationKey, *, bind_wasm: bool = True
) -> SignedBundle:
    """Verify a bundle directory against its lock and its signature (with `bind_wasm`, also
    the `engram_wasm` claim binding `policy.wasm`; an OPA server never runs the Wasm);
    return the bytes that were verified, so the caller loads exactly those.

    Raises:
        BundleSignatureInvalid: as `verify_signed_tarball`, or `policy.wasm` not signed or
            not the signed one.
        BundleError: the bundle does not match its lock, or changed while being read.
    """
    directory = Path(bundle_dir)
    locked = verify_bundle(directory)
    tar_bytes, wasm = read_artifacts(directory)
    files = tarball_files(tar_bytes, directory / BUNDLE_FILE)
    try:
        identity, claims = verified_files(files, key)
        if bind_wasm:
            _check_wasm_claim(claims, wasm)
    except BundleSignatureInvalid as exc:
        # The operator needs to know which bundle was refused, not only why.
        raise BundleSignatureInvalid(f"{directory}: {exc}") from exc
    if identity != locked:
        raise BundleError(f"{directory}: bundle changed while being verified")
    if DATA_FILE not in files:
        raise BundleError(f"{directory}: bundle has no {DATA_FILE}")
    return SignedBundle(identity=identity, data=files[DATA_FILE], wasm=wasm)


def verify_signed_bundle(
    bundle_dir: Path | str, key: VerificationKey, *, bind_wasm: bool = True
) -> BundleIdentity:
    """`load_signed_bundle` for callers that only need the identity.

    Raises:
        BundleSignatureInvalid, BundleError: as `load_signed_bundle`.
    """
    return load_signed_bundle(bundle_dir, key, bind_wasm=bind_wasm).identity
