"""`audit prove` and `audit verify-proof` (admin/proofs.py).

    engram-memory audit prove ENTRY [--tree-size N] --data-dir DIR --out PROOF
    engram-memory audit prove --consistency OLD NEW --data-dir DIR --out PROOF
    engram-memory audit verify-proof PROOF --checkpoint-public-key KEY [--checkpoint KEPT]

A size the service checkpointed is proven against that stored checkpoint's note; any other
size needs the checkpoint key to sign one now.

Exit codes: 0 proven / verified; 1 the proof does not lead to the signed root(s); 2 bad
input (unreadable file or key, no such entry or sizes); 5 a checkpoint note not signed by
the given key.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from engram_memory.contract.exception_codes import EXIT_FAILED, EXIT_UNTRUSTED
from engram_memory.contract.exceptions import CheckpointInvalid, ConfigurationError, ProofInvalid
from engram_memory.crypto.checkpoint_key import PUBLIC_KEY_VARIABLE, CheckpointSigningKey

COMMANDS = ("prove", "verify-proof")


def add_parsers(audit_sub: Any) -> None:
    prove = audit_sub.add_parser(
        "prove", help="a Merkle inclusion proof of one entry, or a consistency proof"
    )
    prove.add_argument("entry", nargs="?", type=int, help="the audit entry's sequence")
    prove.add_argument(
        "--consistency", nargs=2, type=int, metavar=("OLD", "NEW"), help="two tree sizes"
    )
    prove.add_argument(
        "--tree-size", type=int, help="prove ENTRY in the tree of this size (default: today's)"
    )
    prove.add_argument("--data-dir", help="the stopped store (env ENGRAM_DATA_DIR)")
    prove.add_argument(
        "--checkpoint-key",
        help="signs the notes of sizes no stored checkpoint has (env ENGRAM_CHECKPOINT_KEY)",
    )
    prove.add_argument("--out", required=True, help="the proof file to write")
    verify = audit_sub.add_parser(
        "verify-proof", help="check a proof with only it and the checkpoint public key"
    )
    verify.add_argument("proof", help="the proof file")
    verify.add_argument(
        "--checkpoint-public-key",
        help=f"the checkpoint public key (PEM) you kept (env {PUBLIC_KEY_VARIABLE})",
    )
    verify.add_argument(
        "--checkpoint",
        help="a checkpoint you kept (checkpoint.json of format 2, or its note): the proof "
        "must lead to its root",
    )


def _prove(args: argparse.Namespace) -> int:
    from engram_memory.admin.proofs import prove_consistency, prove_inclusion

    if (args.entry is None) == (args.consistency is None):
        raise ConfigurationError("name one ENTRY, or --consistency OLD NEW")
    if args.tree_size is not None and args.entry is None:
        raise ConfigurationError("--tree-size goes with ENTRY")
    key_text = args.checkpoint_key or os.environ.get("ENGRAM_CHECKPOINT_KEY")
    key = CheckpointSigningKey.from_pem_file(Path(key_text)) if key_text else None
    data_dir = Path(args.data_dir or os.environ.get("ENGRAM_DATA_DIR") or ".engram")
    if args.entry is not None:
        document = prove_inclusion(data_dir, args.entry, key, args.tree_size)
    else:
        document = prove_consistency(data_dir, args.consistency[0], args.consistency[1], key)
    out = Path(args.out)
    try:
        out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", "utf-8")
    except OSError as exc:
        raise ConfigurationError(f"{out} cannot be written") from exc
    print(f"wrote {out}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from engram_memory.admin.checkpointing import _public_key
    from engram_memory.admin.proofs import kept_note, read_document, verify_proof

    public = _public_key(args.checkpoint_public_key)
    document = read_document(Path(args.proof))
    try:
        kept = None if args.checkpoint is None else kept_note(Path(args.checkpoint), public)
        proven = verify_proof(document, public, kept)
    except CheckpointInvalid as exc:
        print(f"FAILED: checkpoint not trusted: {exc}")
        return EXIT_UNTRUSTED
    except ProofInvalid as exc:
        print(f"FAILED: {exc}")
        return EXIT_FAILED
    print(f"ok: {proven}")
    return 0


def run(args: argparse.Namespace) -> int | None:
    """Run a proof command; None when `args` names another audit command."""
    if args.audit_command == "prove":
        return _prove(args)
    if args.audit_command == "verify-proof":
        return _verify(args)
    return None
