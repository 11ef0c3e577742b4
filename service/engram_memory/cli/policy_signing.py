"""`engram-memory policy sign | keygen` and the signature half of `policy verify`.

For compliance authors: make a signing key pair, sign a built bundle in OPA's format, and
check a bundle's lock and signature before handing it to a service or an OPA fleet.
Exit codes: 0 done; 2 (printed by the CLI as one line) for a bundle that does not verify,
an unusable key, or bad arguments.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR, read_lock, verify_bundle
from engram_memory.policy.signing_keys import SIGNING_KEY_FILE, VERIFICATION_KEY_FILE

SIGNING_COMMANDS = frozenset({"sign", "keygen"})


def add_signing_parsers(policy_sub: Any) -> None:
    """Register `policy sign` and `policy keygen`."""
    sign = policy_sub.add_parser(
        "sign",
        help="sign a built bundle (OPA's .signatures.json, RS256) and record it in the lock",
    )
    sign.add_argument(
        "bundle_dir", nargs="?", default="bundle", help="bundle directory (default ./bundle)"
    )
    sign.add_argument(
        "--signing-key", required=True, help="PEM RSA private key, mode 0600 (policy keygen)"
    )
    sign.add_argument(
        "--key-id", required=True, help="key id the signature names (OPA's --verification-key-id)"
    )
    keygen = policy_sub.add_parser(
        "keygen",
        help=f"make a bundle signing key pair: {SIGNING_KEY_FILE} (0600) and "
        f"{VERIFICATION_KEY_FILE}",
    )
    keygen.add_argument("--out", required=True, help="directory for the two key files")


def add_verification_flags(verify: argparse.ArgumentParser) -> None:
    """`policy verify --verification-key PUB --key-id ID [--json]`."""
    verify.add_argument(
        "--verification-key", help="PEM RSA public key the bundle must be signed with"
    )
    verify.add_argument("--key-id", help="key id the signature must name (with the key)")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")


def run_verify(args: argparse.Namespace) -> int:
    """Verify a bundle against its lock and, with a key, its signature; print the result.

    Raises:
        BundleError: the bundle does not match its lock.
        BundleSignatureInvalid: a key is given and the bundle is unsigned, signed with
            another key or key id, or altered after signing.
        SigningKeyError, ConfigurationError: unusable key, or only one of key and key id.
    """
    # Here, not at the top: JWT and the key code only for the command that needs them.
    from engram_memory.contract.exceptions import SigningKeyError
    from engram_memory.policy.signing import load_verification_key, verify_signed_bundle

    directory = Path(args.bundle_dir or DEFAULT_BUNDLE_DIR)
    if bool(args.verification_key) != bool(args.key_id):
        raise SigningKeyError("--verification-key and --key-id go together")
    signature = read_lock(directory).get("signature")
    signer = signature.get("key_id") if isinstance(signature, dict) else None
    if args.verification_key:
        key = load_verification_key(Path(args.verification_key), args.key_id)
        identity = verify_signed_bundle(directory, key)
        status = f"signature verified: key id {key.key_id} ({key.fingerprint})"
        checked = True
    else:
        identity = verify_bundle(directory)
        checked = False
        status = "unsigned"
        if signer is not None:
            status = f"signed by key id {signer} (signature not checked: give --verification-key)"
    if args.json:
        result = {
            "revision": identity.revision,
            "digest": identity.digest,
            "signed": checked or signer is not None,
            "signature_verified": checked,
            "key_id": args.key_id if checked else signer,
        }
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"bundle verified: {identity.revision}")
    print(f"revision {identity.revision}\ndigest {identity.digest}\n{status}")
    return 0


def run_signing(args: argparse.Namespace) -> int:
    """Run `policy sign` or `policy keygen`.

    Raises:
        SigningKeyError: unusable key or key id, or a key file that exists already.
        BundleError: the bundle does not match its lock (it is never signed then).
    """
    from engram_memory.policy.authoring.sign import sign_bundle
    from engram_memory.policy.signing_keys import generate_key_pair

    if args.policy_command == "keygen":
        private, public, fingerprint = generate_key_pair(Path(args.out))
        print(f"signing key {private} (mode 0600: keep it secret, never in the bundle)")
        print(f"verification key {public} (give it to services and OPA servers)")
        print(f"fingerprint {fingerprint}")
        return 0
    directory = Path(args.bundle_dir)
    sign_bundle(directory, Path(args.signing_key), args.key_id)
    lock = read_lock(directory)
    print(f"bundle signed: {lock['revision']}")
    print(f"key id {args.key_id} ({lock['signature']['public_key_sha256']})")
    return 0
