"""`engram-memory demo`: a narrated governed session through the real server.

The reference host starts the server as a subprocess over stdio (or HTTP), binds every call to
tenant `acme` / workspace `support` / principal `user:alice`, and walks the life of one memory:
capture -> admission -> search -> get -> forget (after a human confirmation) -> gone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
from mcp import StdioServerParameters

from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE, init_host_dir
from engram_memory.client.reference_host import (
    Binding,
    ConfirmationPrompt,
    ReferenceHost,
    connect,
    wait_until_listening,
)
from engram_memory.contract.types import ToolName
from engram_memory.host.keys import HostSigningKey

BINDING = Binding(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    purpose_ref="purpose:support-case",
    agent_id="agent:demo-assistant",
    session="session:demo",
    host_id="host:reference",
)


def demo_capture_arguments(
    text: str,
    idempotency_key: str,
    *,
    evidence_ref: str = "evidence:ticket/T-4711",
    purpose_ref: str = BINDING.purpose_ref,
) -> dict[str, Any]:
    """A well-formed capture citing one support ticket."""
    now_ms = int(time.time() * 1000)
    return {
        "idempotency_key": idempotency_key,
        "payload": {
            "schema_version": 2,
            "purpose_ref": purpose_ref,
            "valid_time": {"t": now_ms - 60_000},
            "components": [
                {
                    "component_id": "component:decision",
                    "kind": "decision",
                    "text": text,
                    "citation_ids": ["citation:ticket"],
                }
            ],
            "primary_component_id": "component:decision",
            "primary_event": {
                "at": now_ms - 60_000,
                "type_ref": "event:refund-approved",
                "citation_id": "citation:ticket",
            },
            "citations": [
                {
                    "citation_id": "citation:ticket",
                    "source_ref": "source:helpdesk",
                    "locator": {"scheme": "ticket", "value": "T-4711"},
                    "content_digest": "sha256:" + "ab" * 32,
                }
            ],
        },
        "evidence": {
            "evidence_ref": evidence_ref,
            "evidence_digest": "sha256:" + "cd" * 32,
            "citation_ids": ["citation:ticket"],
        },
    }


def _say(text: str) -> None:
    # Bold only on a terminal that wants colour: escapes do not belong in pipes and files.
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    print(f"\n\033[1m# {text}\033[0m" if bold else f"\n# {text}", flush=True)


def _show(envelope: Mapping[str, Any]) -> None:
    print(json.dumps(envelope, indent=2, ensure_ascii=False), flush=True)


async def _approve(prompt: ConfirmationPrompt) -> str | None:
    _say(
        f"The host asks a human: run {prompt.tool} on {prompt.target}?\n"
        f"#   operation digest {prompt.operation_digest}\n"
        "#   (demo operator answers: yes)"
    )
    return "human:demo-operator"


async def _session(host: ReferenceHost) -> int:
    _say("tools/list: what this binding may see (granted by policy, deny-as-missing)")
    print(", ".join(tool.name for tool in await host.list_tools()))

    _say("capture: a pending, sealed candidate (not searchable yet)")
    capture = await host.call(
        ToolName.CAPTURE,
        demo_capture_arguments(
            "Refund approved for order 4711 after the courier lost the parcel.",
            f"demo-capture-{time.time_ns()}",
        ),
    )
    _show(capture.envelope)
    candidate_id = capture.envelope["output"]["value"]["candidate_id"]

    _say("request_admission: the admission policy (Rego) decides, not the agent")
    admission = await host.call(
        ToolName.REQUEST_ADMISSION,
        {"candidate_id": candidate_id, "idempotency_key": f"demo-admit-{time.time_ns()}"},
    )
    _show(admission.envelope)
    record_id = admission.envelope["output"]["value"]["outcome"]["record_id"]

    search_args = {"query": "refund courier parcel", "purpose_ref": BINDING.purpose_ref}
    _say("search: the accepted record is found, redacted by policy, with a rank receipt")
    _show((await host.call(ToolName.SEARCH, search_args)).envelope)

    _say("get: one record with its read receipt")
    get_args = {"record_id": record_id, "purpose_ref": BINDING.purpose_ref}
    _show((await host.call(ToolName.GET, get_args)).envelope)

    _say("forget: destructive, so the host must obtain a human confirmation first")
    forget_args = {
        "record_id": record_id,
        "idempotency_key": f"demo-forget-{time.time_ns()}",
        "reason_ref": "reason:customer-request",
    }
    forget = await host.call_confirmed(ToolName.FORGET, forget_args, record_id, _approve)
    assert forget is not None
    _show(forget.envelope)

    _say("get after forget: NOT_FOUND (the item key is destroyed; content is gone)")
    _show((await host.call(ToolName.GET, get_args)).envelope)
    _say("search after forget: no longer finds it")
    after = await host.call(ToolName.SEARCH, search_args)
    _show(after.envelope)
    found = after.envelope["output"]["value"]["records"]
    _say("done: the journal, audit trail and receipts are in the data directory")
    return 0 if not found else 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_demo(workdir: Path, *, transport: str = "stdio") -> int:
    """Prepare keys and a fresh store under `workdir`, then run the session."""
    root_key, signing_key, public_keys = init_host_dir(workdir / "secrets")
    data_dir = workdir / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    env = {
        **os.environ,
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_HOST_KEYS": str(public_keys),
        "ENGRAM_ROOT_KEY": str(root_key),
        # init_host_dir made it: with it the server signs its audit checkpoints, and the
        # first run prints no "no checkpoint key" warning the demo does not explain.
        "ENGRAM_CHECKPOINT_KEY": str(root_key.parent / CHECKPOINT_KEY_FILE),
        "ENGRAM_POLICY": "embedded",
        "ENGRAM_MEMORY_ENABLED": "true",
    }
    signer = HostSigningKey.from_pem_file(signing_key)
    command = [sys.executable, "-m", "engram_memory.cli", "serve"]
    _say(
        f"engram-memory demo: server over {transport}, store in {data_dir}, embedded policy engine"
    )
    if transport == "stdio":
        params = StdioServerParameters(
            command=command[0], args=[*command[1:], "--transport", "stdio"], env=env
        )
        return anyio.run(_connected, params, signer)
    port = _free_port()
    process = subprocess.Popen([*command, "--transport", "http", "--port", str(port)], env=env)  # noqa: S603
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        wait_until_listening(url, process)
        return anyio.run(_connected, url, signer)
    finally:
        process.terminate()
        process.wait(timeout=10)


async def _connected(server: StdioServerParameters | str, signer: HostSigningKey) -> int:
    async with connect(server, signer, BINDING) as host:
        return await _session(host)
