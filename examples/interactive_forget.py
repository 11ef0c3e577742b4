"""A host that asks a real human before forgetting: copy this pattern into your own host.

Usage (after `./scripts/demo` created .engram-demo/secrets):
    .venv/bin/python examples/interactive_forget.py RECORD_ID [--secrets .engram-demo/secrets]

It connects to a fresh server over stdio with the demo's keys and data directory, shows the
human the tool, the target and the operation digest, and mints the confirmation only when the
human types `yes`. Anything else leaves the record untouched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path

import anyio
from mcp import StdioServerParameters

from engram_memory.client.demo import BINDING
from engram_memory.client.reference_host import ConfirmationPrompt, connect
from engram_memory.host.keys import HostSigningKey


async def ask_human(prompt: ConfirmationPrompt) -> str | None:
    print(f"\nThe agent asks to run {prompt.tool} on {prompt.target}.")
    print(f"Operation digest: {prompt.operation_digest}")
    print(json.dumps(dict(prompt.arguments), indent=2))
    answer = await anyio.to_thread.run_sync(input, "Type 'yes' to approve: ")
    if answer.strip().lower() != "yes":
        return None
    who = await anyio.to_thread.run_sync(input, "Your name (recorded as the approver): ")
    return f"human:{who.strip() or 'anonymous'}"


async def main(record_id: str, secrets: Path, data_dir: Path) -> int:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_HOST_KEYS": str(secrets / "host-keys.pem"),
        "ENGRAM_ROOT_KEY": str(secrets / "root.key"),
        "ENGRAM_MEMORY_ENABLED": "true",
    }
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "engram_memory.cli", "serve"], env=env
    )
    signer = HostSigningKey.from_pem_file(secrets / "host-signing.pem")
    async with connect(server, signer, BINDING) as host:
        arguments = {
            "record_id": record_id,
            "idempotency_key": f"forget-{uuid.uuid4().hex}",
            "reason_ref": "reason:operator-request",
        }
        outcome = await host.call_confirmed("engram_memory_forget", arguments, record_id, ask_human)
        if outcome is None:
            print("Not approved: nothing was sent to the server.")
            return 1
        print(json.dumps(outcome.envelope, indent=2))
        return 0 if not outcome.is_error else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("record_id")
    parser.add_argument("--secrets", default=".engram-demo/secrets")
    parser.add_argument("--data-dir", default=".engram-demo/data")
    args = parser.parse_args()
    raise SystemExit(anyio.run(main, args.record_id, Path(args.secrets), Path(args.data_dir)))
