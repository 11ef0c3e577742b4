"""Auditor commands for signed checkpoints (core/checkpoints.py):

- `audit checkpoint --out FILE`: ask the service for a signed checkpoint now (over the
  maintenance channel when a server runs, else on the stopped store), `read` authority;
- `audit checkpoint-key [--key FILE]`: print the checkpoint public key (PEM) and its key id,
  the values an auditor keeps;
- `audit verify --checkpoint FILE [--checkpoint-public-key PUB]` (the check itself,
  `checkpoint_lines`, is called by audit_cli's verify): prove the chains extend the file;
- `audit verify-manifest DIR`: an export manifest's signature and every file's sha256.

Exit codes: 0 verified; 1 the chains do not extend the checkpoint (or an export file does
not match its manifest); 2 a file or key that cannot be read; 5 a checkpoint or manifest
that is malformed or not signed by the given public key.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from engram_memory.contract.errors import ConfigurationError, ToolError
from engram_memory.core.checkpoint_verify import (
    CheckpointResult,
    file_sha256,
    verify_against_checkpoint,
)
from engram_memory.core.checkpoints import CHECKPOINT_FILE, CheckpointInvalid, verify_signature
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey, CheckpointSigningKey
from engram_memory.service_flags import add_service_flags, config_from_flags
from engram_memory.store.database import Database, StoreCorrupt, StoreOpenFailed, Transaction
from engram_memory.store.export import MANIFEST_FILE

EXIT_NOT_EXTENDED = 1
EXIT_UNREADABLE = 2
EXIT_UNTRUSTED = 5
PUBLIC_KEY_VARIABLE = "ENGRAM_CHECKPOINT_PUBLIC_KEY"


def add_verify_flags(verify: argparse.ArgumentParser) -> None:
    """`audit verify --checkpoint FILE [--checkpoint-public-key PUB]`."""
    verify.add_argument("--checkpoint", help="a signed checkpoint file: prove the chains extend it")
    verify.add_argument(
        "--checkpoint-public-key",
        help=f"the checkpoint public key (PEM) you kept (env {PUBLIC_KEY_VARIABLE})",
    )


def add_parsers(audit_sub: Any) -> None:
    """Register `checkpoint`, `checkpoint-key` and `verify-manifest` under `audit`."""
    checkpoint = audit_sub.add_parser(
        "checkpoint", help="sign the audit and journal heads now; write the checkpoint file"
    )
    checkpoint.add_argument("--out", required=True, help="the checkpoint file to write")
    add_service_flags(checkpoint)
    checkpoint.add_argument("--tenant", required=True)
    checkpoint.add_argument("--workspace", required=True)
    checkpoint.add_argument("--operator", required=True, help="the human asking: human:<subject>")
    key = audit_sub.add_parser(
        "checkpoint-key", help="print the checkpoint public key (PEM) and its key id"
    )
    key.add_argument(
        "--key", help="the private key file (default: ENGRAM_CHECKPOINT_KEY) or a public key"
    )
    export = audit_sub.add_parser(
        "verify-manifest", help="check an export's signed manifest and every file's sha256"
    )
    export.add_argument("dir", help="the export directory")
    export.add_argument(
        "--checkpoint-public-key",
        help=f"the checkpoint public key (PEM) you kept (env {PUBLIC_KEY_VARIABLE})",
    )


def _public_key(path_text: str | None) -> CheckpointPublicKey:
    """Raises: ConfigurationError: none named, or unreadable."""
    text = path_text or os.environ.get(PUBLIC_KEY_VARIABLE)
    if not text:
        raise ConfigurationError(
            f"no checkpoint public key: pass --checkpoint-public-key or set {PUBLIC_KEY_VARIABLE}"
        )
    return CheckpointPublicKey.from_pem_file(Path(text))


def _read_json(path: Path, what: str) -> object:
    """Raises: ConfigurationError: unreadable file; CheckpointInvalid: not JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{what} {path} cannot be read") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CheckpointInvalid(f"{what} {path} is not JSON") from exc


def checkpoint_lines(
    data_dir: Path, checkpoint: Path, public_key_path: str | None
) -> tuple[int, list[str]]:
    """Compare the stopped store in `data_dir` with a checkpoint file: (exit code, lines).

    The chains must have verified already (`audit verify` does that first); an export
    beside the checkpoint (manifest.json) is used to name the exact divergent entry.
    """
    try:
        database = Database.open(data_dir, read_only=True)
    except (StoreOpenFailed, StoreCorrupt) as exc:
        return EXIT_UNREADABLE, [f"FAILED: store cannot be read for the checkpoint: {exc}"]
    try:
        with database.transaction() as tx:
            return checkpoint_lines_in(tx, checkpoint, public_key_path)
    finally:
        database.close()


def checkpoint_lines_in(
    tx: Transaction, checkpoint: Path, public_key_path: str | None
) -> tuple[int, list[str]]:
    """`checkpoint_lines` on the snapshot `tx` reads (a running server's verification runs
    it inside its own snapshot)."""
    try:
        key = _public_key(public_key_path)
        document = _read_json(checkpoint, "checkpoint")
        result = verify_against_checkpoint(
            tx, document, key, export_dir=checkpoint.absolute().parent
        )
    except ConfigurationError as exc:
        return EXIT_UNREADABLE, [f"FAILED: {exc}"]
    except CheckpointInvalid as exc:
        return EXIT_UNTRUSTED, [f"FAILED: checkpoint not trusted: {exc}"]
    except StoreCorrupt as exc:
        return EXIT_UNREADABLE, [f"FAILED: store cannot be read for the checkpoint: {exc}"]
    return _result_lines(result)


def _result_lines(result: CheckpointResult) -> tuple[int, list[str]]:
    signed = result.checkpoint
    sequence = 0 if signed.audit is None else signed.audit[0]
    scopes = len(signed.journal)
    what = (
        f"checkpoint signed {signed.signed_at} (audit sequence {sequence}, "
        f"{scopes} journal scope{'' if scopes == 1 else 's'})"
    )
    notes = [f"note: {result.export_used}"] if result.export_used else []
    if result.extends:
        return 0, [f"extends {what}", *notes]
    lines = [f"FAILED: the chains do not extend the {what}"]
    lines += [f"  {d.line()}" for d in result.divergences]
    return EXIT_NOT_EXTENDED, lines + notes


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _checkpoint_command(args: argparse.Namespace) -> int:
    from engram_memory.admin.channel import send_command
    from engram_memory.admin.commands import AdminCommand, execute
    from engram_memory.admin.maintenance import Operator
    from engram_memory.app import open_service

    config = config_from_flags(args)
    command = AdminCommand.from_values(
        "audit-checkpoint", Operator(args.tenant, args.workspace, args.operator), vars(args)
    )
    try:
        output = send_command(config.data_dir, command, _progress)
        if output is None:
            with open_service(config) as service:
                output = execute(service.services, command, _progress)
    except ToolError as error:
        print(json.dumps({"ok": False, "code": error.code.name}))
        return 1
    print(json.dumps({"ok": True, "value": output}, indent=2))
    return 0


def _key_command(args: argparse.Namespace) -> int:
    text = args.key or os.environ.get("ENGRAM_CHECKPOINT_KEY")
    if not text:
        raise ConfigurationError("no checkpoint key: pass --key or set ENGRAM_CHECKPOINT_KEY")
    path = Path(text)
    try:
        is_private = b"PRIVATE KEY" in path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"checkpoint key {path} cannot be read") from exc
    public = (
        CheckpointSigningKey.from_pem_file(path).public
        if is_private
        else CheckpointPublicKey.from_pem_file(path)
    )
    sys.stdout.write(public.pem())
    print(f"key_id: {public.key_id}")
    return 0


def verify_manifest(directory: Path, key: CheckpointPublicKey) -> list[str]:
    """What is wrong with an export (empty: nothing): its manifest's signature, every listed
    file's sha256, and its checkpoint's signature and heads.

    Raises:
        ConfigurationError: the manifest cannot be read.
        CheckpointInvalid: the manifest is malformed or not signed by `key`.
    """
    manifest = _read_json(directory / MANIFEST_FILE, "manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise CheckpointInvalid("not an export manifest")
    verify_signature(manifest, key)
    problems = []
    for entry in manifest["files"]:
        name = str(entry.get("name", "")) if isinstance(entry, dict) else ""
        target = directory / name
        if not name or "/" in name or not target.is_file():
            problems.append(f"{name or '(unnamed)'}: missing")
        elif file_sha256(target) != entry.get("sha256"):
            problems.append(f"{name}: sha256 differs from the signed manifest")
    if (directory / CHECKPOINT_FILE).is_file():
        checkpoint = _read_json(directory / CHECKPOINT_FILE, "checkpoint")
        if not isinstance(checkpoint, dict):
            raise CheckpointInvalid("checkpoint.json is not a checkpoint")
        verify_signature(checkpoint, key)
        for field in ("audit_head", "journal_heads"):
            if checkpoint.get(field) != manifest.get(field):
                problems.append(f"{CHECKPOINT_FILE}: {field} differs from the manifest")
    return problems


def _verify_manifest_command(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    try:
        problems = verify_manifest(directory, _public_key(args.checkpoint_public_key))
    except ConfigurationError as exc:
        print(f"FAILED: {exc}")
        return EXIT_UNREADABLE
    except CheckpointInvalid as exc:
        print(f"FAILED: manifest not trusted: {exc}")
        return EXIT_UNTRUSTED
    if problems:
        print("FAILED: " + "; ".join(problems))
        return EXIT_NOT_EXTENDED
    print(f"ok: manifest signature and every file of {directory} verified")
    return 0


def run(args: argparse.Namespace) -> int | None:
    """Run a checkpoint command; None when `args` names another audit command."""
    handlers = {
        "checkpoint": _checkpoint_command,
        "checkpoint-key": _key_command,
        "verify-manifest": _verify_manifest_command,
    }
    handler = handlers.get(args.audit_command)
    return None if handler is None else handler(args)
