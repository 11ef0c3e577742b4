"""The reference host: the trusted side of the MCP connection, for the demo, tests and copying.

A host binds every call to a tenant/workspace/principal/purpose with a signed invocation
context, and before a destructive call shows a human what will happen (tool, target,
operation digest) and mints a confirmation only on an explicit yes. This is host-side code:
it uses the MCP SDK's client; the server never imports it.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
from mcp import Client, StdioServerParameters

from engram_memory.admin.host_setup import CHECKPOINT_KEY_FILE
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.contract.groups import canonical_groups
from engram_memory.host.confirmation import (
    CONFIRMATION_META_KEY,
    ConfirmationBinding,
    mint_confirmation,
)
from engram_memory.host.context import INVOCATION_META_KEY, mint_invocation
from engram_memory.host.keys import HostSigningKey
from engram_memory.transport.http_serving import HEALTH_PATH


@dataclass(frozen=True)
class Binding:
    """Who a call runs for; the host decides this, never the model."""

    tenant: str
    workspace: str
    principal: str
    purpose_ref: str
    agent_id: str = "agent:reference"
    session: str = "session:reference"
    host_id: str = "host:reference"
    # The principal's groups as the host's identity provider asserts them (`group:<name>`);
    # signed into the `groups` claim, sorted and unique. Empty = the claim is omitted.
    groups: tuple[str, ...] = ()
    # The store's ENGRAM_STORE_AUDIENCE, signed as `aud` (None: the store has none).
    audience: str | None = None


@dataclass(frozen=True)
class ConfirmationPrompt:
    """What a human is shown before approving a destructive call."""

    tool: str
    target: str
    operation_digest: str
    arguments: Mapping[str, Any]


# Returns the approving human's subject (e.g. "human:dana") or None for "no".
Approver = Callable[[ConfirmationPrompt], Awaitable[str | None]]


@dataclass(frozen=True)
class CallOutcome:
    envelope: dict[str, Any]
    is_error: bool
    text: str


def mint_for(signer: HostSigningKey, binding: Binding, **overrides: Any) -> str:
    """An invocation token for `binding` with a fresh `audit_id` (a token binds one request:
    docs/integrators/host.md "A fresh token for every request"); `overrides` replace claims."""
    b = binding
    groups = overrides.pop("groups", canonical_groups(b.groups))
    return mint_invocation(
        signer,
        host_id=b.host_id,
        tenant=b.tenant,
        workspace=b.workspace,
        principal=b.principal,
        agent_id=b.agent_id,
        session=b.session,
        purpose_ref=b.purpose_ref,
        audit_id=overrides.pop("audit_id", f"audit:{uuid.uuid4().hex}"),
        groups=groups,
        audience=overrides.pop("audience", b.audience),
        **overrides,
    )


class ReferenceHost:
    """Binds, confirms and calls over one MCP client session."""

    def __init__(self, client: Client, signer: HostSigningKey, binding: Binding) -> None:
        self.client = client
        self.signer = signer
        self.binding = binding

    def rebind(self, **changes: Any) -> ReferenceHost:
        """The same connection acting for another binding (e.g. another tenant in tests)."""
        return ReferenceHost(self.client, self.signer, replace(self.binding, **changes))

    def invocation_meta(self, **overrides: Any) -> dict[str, Any]:
        return {INVOCATION_META_KEY: mint_for(self.signer, self.binding, **overrides)}

    async def list_tools(self) -> list[types.Tool]:
        meta: types.RequestParamsMeta = self.invocation_meta()  # type: ignore[assignment]
        result = await self.client.list_tools(meta=meta)
        return list(result.tools)

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        confirmation: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> CallOutcome:
        """Call a tool with a fresh invocation context (and a confirmation if given).

        The raw request is sent through the session so that the SDK's client-side output
        validation, which would re-list tools without our context, does not interfere.
        """
        call_meta: dict[str, Any] = dict(meta) if meta is not None else self.invocation_meta()
        if confirmation is not None:
            call_meta[CONFIRMATION_META_KEY] = confirmation
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=tool, arguments=dict(arguments), _meta=call_meta
            )
        )
        result = await self.client.session.send_request(request, types.CallToolResult)
        text = (
            result.content[0].text
            if result.content and isinstance(result.content[0], types.TextContent)
            else ""
        )
        return CallOutcome(dict(result.structured_content or {}), bool(result.is_error), text)

    def confirmation_for(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        target: str,
        approver: str,
        approver_groups: list[str] | None = None,
    ) -> str:
        """Mint the confirmation a human gave for exactly this call (with the groups this
        host asserts for the approver, for four-eyes rules, when given)."""
        binding = ConfirmationBinding(
            cap=tool,
            target=target,
            op=operation_digest(tool, normalize(dict(arguments))),
            session=self.binding.session,
            principal=self.binding.principal,
        )
        return mint_confirmation(
            self.signer, binding, approver=approver, approver_groups=approver_groups
        )

    async def call_confirmed(
        self, tool: str, arguments: Mapping[str, Any], target: str, approve: Approver
    ) -> CallOutcome | None:
        """Ask a human first; call only on an explicit yes. None when the human said no."""
        prompt = ConfirmationPrompt(
            tool, target, operation_digest(tool, normalize(dict(arguments))), arguments
        )
        approver = await approve(prompt)
        if approver is None:
            return None
        token = self.confirmation_for(tool, arguments, target, approver)
        return await self.call(tool, arguments, confirmation=token)


def server_env(data_dir: Path, root_key: Path, public_keys: Path, **extra: str) -> dict[str, str]:
    """The environment of a server this host starts: its store in `data_dir`, the root key
    file, the host's public keys, memory enabled, the embedded policy engine; `extra` adds or
    overrides variables. Nothing else of the host's environment leaks into the server.
    A checkpoint key `host init` made beside the root key signs the server's checkpoints."""
    checkpoint_key = root_key.parent / CHECKPOINT_KEY_FILE
    signing = {"ENGRAM_CHECKPOINT_KEY": str(checkpoint_key)} if checkpoint_key.is_file() else {}
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_HOST_KEYS": str(public_keys),
        "ENGRAM_ROOT_KEY": str(root_key),
        "ENGRAM_MEMORY_ENABLED": "true",
        "ENGRAM_POLICY": "embedded",
        **signing,
        **extra,
    }


def wait_until_listening(url: str, process: subprocess.Popen[bytes], attempts: int = 400) -> None:
    """Block until a server process started with `--transport http` accepts connections.

    Raises:
        RuntimeError: the process exited, or never listened within the attempts.
    """
    # The health probe, not the MCP endpoint: a plain GET there is a request the SDK refuses,
    # which the audit trail would record.
    health = httpx.URL(url).copy_with(path=HEALTH_PATH)
    for _ in range(attempts):
        try:
            if httpx.get(health, timeout=0.5).status_code == httpx.codes.OK:
                return
        except httpx.TransportError:
            try:
                code = process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            raise RuntimeError(f"server exited during start-up with code {code}") from None
    raise RuntimeError("server never listened")


@asynccontextmanager
async def connect(
    server: StdioServerParameters | str,
    signer: HostSigningKey,
    binding: Binding,
    *,
    mode: str = "auto",
) -> AsyncIterator[ReferenceHost]:
    """Connect over stdio (server parameters) or streamable HTTP (a URL)."""
    async with Client(server, mode=mode, cache=None) as client:
        yield ReferenceHost(client, signer, binding)
