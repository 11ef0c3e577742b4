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

from engram_memory.cli.service_flags import add_service_flags, config_from_flags
from engram_memory.contract.exceptions import ConfigurationError, ToolError
from engram_memory.crypto.checkpoint_key import (
    PUBLIC_KEY_VARIABLE,
    CheckpointPublicKey,
    CheckpointSigningKey,
)


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


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _checkpoint_command(args: argparse.Namespace) -> int:
    from engram_memory.admin.channel import send_command
    from engram_memory.admin.commands import AdminCommand, execute
    from engram_memory.admin.maintenance import Operator
    from engram_memory.server.app import open_service

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


def _verify_manifest_command(args: argparse.Namespace) -> int:
    from engram_memory.admin.checkpointing import (
        EXIT_NOT_EXTENDED,
        EXIT_UNREADABLE,
        EXIT_UNTRUSTED,
        _public_key,
        verify_manifest,
    )
    from engram_memory.contract.exceptions import CheckpointInvalid

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
