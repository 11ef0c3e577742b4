"""`engram-memory host init | mint | new-root-key`: operator set-up of a host's keys (never
reachable over MCP)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser("host", help="host key set-up and tokens")
    host_sub = parser.add_subparsers(dest="host_command", required=True)
    init = host_sub.add_parser("init", help="create root key + host signing key (0600)")
    init.add_argument("--dir", default=".engram-secrets")
    rotate = host_sub.add_parser(
        "new-root-key",
        help="create the key file for `admin rotate-root-key`: a new root, the current one(s) "
        "kept as previous, the index root carried over (0600)",
    )
    rotate.add_argument("--current", required=True, help="the present ENGRAM_ROOT_KEY file")
    rotate.add_argument("--out", required=True, help="the new key file (must not exist)")
    rotate.add_argument(
        "--drop-previous",
        action="store_true",
        help="write only the current root and index root of --current (after a completed "
        "rotation, once no kept backup needs the previous roots)",
    )
    mint = host_sub.add_parser("mint", help="print an invocation context token (testing)")
    mint.add_argument("--signing-key", required=True)
    for name in ("tenant", "workspace", "principal", "purpose-ref"):
        mint.add_argument(f"--{name}", required=True)
    mint.add_argument("--agent-id", default="agent:cli")
    mint.add_argument("--session", default="session:cli")
    mint.add_argument("--host-id", default="host:cli")
    mint.add_argument("--audit-id", default="audit:cli")
    mint.add_argument("--lifetime", type=int, default=120)
    return parser


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: building the parser must stay cheap (cli/main.py).
    from engram_memory.admin.host_setup import (
        CHECKPOINT_KEY_FILE,
        CHECKPOINT_PUBLIC_FILE,
        init_host_dir,
    )
    from engram_memory.crypto.keys import RootKey
    from engram_memory.host.context import mint_invocation
    from engram_memory.host.keys import HostSigningKey

    if args.host_command == "init":
        root, signing, public = init_host_dir(Path(args.dir))
        print(f"ENGRAM_ROOT_KEY={root}\nENGRAM_HOST_KEYS={public}\n# host signing key: {signing}")
        directory = Path(args.dir)
        print(
            f"ENGRAM_CHECKPOINT_KEY={directory / CHECKPOINT_KEY_FILE}\n"
            f"# checkpoint public key, for auditors: {directory / CHECKPOINT_PUBLIC_FILE}"
        )
        return 0
    if args.host_command == "new-root-key":
        current = RootKey.load(Path(args.current))
        ring = current.without_previous() if args.drop_previous else current.rotated()
        ring.write_new(Path(args.out))
        print(f"root key id {ring.key_id.hex()} written to {args.out}")
        return 0
    signer = HostSigningKey.from_pem_file(Path(args.signing_key))
    token = mint_invocation(
        signer,
        host_id=args.host_id,
        tenant=args.tenant,
        workspace=args.workspace,
        principal=args.principal,
        agent_id=args.agent_id,
        session=args.session,
        purpose_ref=args.purpose_ref,
        audit_id=args.audit_id,
        lifetime_s=args.lifetime,
    )
    sys.stdout.write(token + "\n")
    return 0
