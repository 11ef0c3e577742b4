"""A small MCP host for engram-memory that an integrator can copy.

What a host must do, and this one does (README.md beside this file explains each):
  1. start the server over stdio, or connect to it over streamable HTTP;
  2. bind EVERY call to tenant / workspace / principal / purpose with a signed invocation
     context in `_meta` (the model never chooses these; they come from the config file);
  3. before `withdraw` and `forget` (and the tools the tenant's policy makes confirmable,
     `confirm_tools`), show the human the tool, the target and the operation digest, and
     mint a confirmation only on an explicit typed `yes`;
  4. act on the envelope's `code` and `retriable`: retry retriable failures with the SAME
     key and arguments (a `MUTATION_OUTCOME_UNKNOWN` may have committed), never with new ones.

Usage:
    python examples/host/host.py --config host.yaml list
    python examples/host/host.py --config host.yaml search "refund courier"
    python examples/host/host.py --config host.yaml get mem_...
    python examples/host/host.py --config host.yaml capture capture.json
    python examples/host/host.py --config host.yaml admit candidate_...
    python examples/host/host.py --config host.yaml withdraw candidate_... [--reason REF]
    python examples/host/host.py --config host.yaml forget mem_... [--reason REF]
    python examples/host/host.py --config host.yaml repl      # the same commands, one per line

Results (envelopes) go to stdout as JSON; prompts and notes go to stderr.
Exit codes: 0 ok, 1 tool error, 2 usage/config error, 3 not approved (nothing sent),
4 refused by the server at the protocol level (JSON-RPC error: binding or visibility),
5 cannot connect (nothing sent), 6 the stdio server exited at start-up (e.g. its store is
held by another server), 7 the connection was lost or a call got no answer in time,
130 interrupted (Ctrl-C).
Each of 5-7 is one line on stderr naming the problem (engram_memory.client.connection_failures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shlex
import string
import sys
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, TextIO

import anyio
import yaml
from mcp import MCPError, StdioServerParameters
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engram_memory.client.connection_failures import connect_explained, is_transport_failure
from engram_memory.client.reference_host import (
    Approver,
    Binding,
    CallOutcome,
    ConfirmationPrompt,
    ReferenceHost,
)
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.contract.exceptions import (
    CannotConnect,
    ConfigurationError,
    ConnectionLost,
    ServerExited,
    ServerUnavailable,
)
from engram_memory.contract.groups import canonical_groups
from engram_memory.host.keys import HostSigningKey

OK, TOOL_ERROR, USAGE, NOT_APPROVED, REFUSED = 0, 1, 2, 3, 4
# Printed as one line each: nothing sent / the stdio server exited at start-up / the
# connection failed once made (a mutation under way may have committed).
UNAVAILABLE = {CannotConnect: 5, ServerExited: 6, ConnectionLost: 7}
INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
ALWAYS_CONFIRMED = frozenset({"engram_memory_withdraw", "engram_memory_forget"})

# ---------------------------------------------------------------------------- configuration


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Closed):
    """Either an `mcpServers`-style stdio entry (command, args, env) or an HTTP `url`."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("server needs exactly one of `command` (stdio) or `url` (HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("server.url must start with http:// or https://")
        return self


class BindingConfig(_Closed):
    """Who every call runs for. ADAPT: take these from your own authentication."""

    tenant: str
    workspace: str
    principal: str
    purpose_ref: str
    agent_id: str = "agent:reference-host"
    host_id: str = "host:reference"
    # One MCP session per host run unless fixed here; confirmations are bound to it.
    session: str | None = None
    # The principal's groups from your identity provider (`group:<name>`), signed into the
    # context so the policy's grants by group apply; sorted and de-duplicated here.
    groups: list[str] = Field(default_factory=list)

    @field_validator("groups")
    @classmethod
    def _canonical(cls, groups: list[str]) -> list[str]:
        return canonical_groups(groups)


class HostConfig(_Closed):
    server: ServerConfig
    signing_key: str  # the host's Ed25519 private key (PEM); its public key is in ENGRAM_HOST_KEYS
    binding: BindingConfig
    # The human at this console as the host authenticated them (e.g. "human:dana").
    # None: the host asks for a name after each "yes".
    approver: str | None = None
    # Tools your tenant's policy data makes confirmable for this principal (SPEC §7), besides
    # withdraw and forget, which always are: e.g. capture and admission for a new hire.
    confirm_tools: list[str] = Field(default_factory=list)
    retries: int = Field(default=2, ge=0, le=10)
    # How long to wait for the server to start (stdio) or connect, and for each answer.
    timeout_seconds: float = Field(default=60, gt=0, le=3600)
    retry_backoff_seconds: float = Field(default=0.5, ge=0)


class ConfigError(Exception):
    """The host configuration file is missing, unreadable or invalid."""


def _substitute(value: Any, variables: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return string.Template(value).safe_substitute(variables)
    if isinstance(value, list):
        return [_substitute(item, variables) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, variables) for key, item in value.items()}
    return value


def load_config(path: Path, environ: Mapping[str, str]) -> HostConfig:
    """Read a YAML or JSON host config; `${VAR}` expands from the environment, and
    `${CONFIG_DIR}` is the directory of the config file.

    Raises:
        ConfigError: unreadable or invalid.
    """
    try:
        raw = yaml.safe_load(path.read_text("utf-8"))  # JSON is valid YAML
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read ({type(exc).__name__})") from exc
    variables = {**environ, "CONFIG_DIR": str(path.resolve().parent)}
    try:
        return HostConfig.model_validate(_substitute(raw, variables))
    except ValidationError as exc:  # one line: `field.path: message; ...`
        problems = [f"{'.'.join(map(str, e['loc'])) or '-'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(f"{path}: {'; '.join(problems)}") from exc


def binding_of(config: HostConfig) -> Binding:
    b = config.binding
    return Binding(
        tenant=b.tenant,
        workspace=b.workspace,
        principal=b.principal,
        purpose_ref=b.purpose_ref,
        agent_id=b.agent_id,
        session=b.session or f"session:{uuid.uuid4().hex}",
        host_id=b.host_id,
        groups=tuple(b.groups),
    )


def server_of(config: HostConfig) -> StdioServerParameters | str:
    s = config.server
    if s.url is not None:
        return s.url
    assert s.command is not None  # checked by ServerConfig
    # The SDK adds a few safe variables (PATH, HOME, ...) under `env`, as desktop clients do.
    return StdioServerParameters(command=s.command, args=s.args, env=s.env, cwd=s.cwd)


# ------------------------------------------------------------------------ the human's "yes"


async def read_stdin_line(stdin: TextIO) -> str:
    """`stdin.readline()` on a daemon thread of its own ("" at end of input).

    Not an AnyIO worker thread: a read blocked on the terminal cannot be cancelled, and a
    worker thread is joined at exit, so Ctrl-C at a prompt would hang the host until the
    human pressed Enter. A daemon thread is simply left behind.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def deliver(line: str) -> None:
        if not answer.done():
            answer.set_result(line)

    def read() -> None:
        try:
            line = stdin.readline()
        except (OSError, ValueError):  # stdin closed under us: end of input
            line = ""
        with contextlib.suppress(RuntimeError):  # the loop has closed: the host is leaving
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=read, name="host stdin", daemon=True).start()
    return await answer


def terminal_approver(config: HostConfig, stdin: TextIO, stderr: TextIO) -> Approver:
    """Ask the human at the terminal. Only an explicit `yes` approves; anything else,
    including end of input, is a no. ADAPT: your UI, with your authenticated user."""

    async def read_line(text: str) -> str:
        print(text, end="", file=stderr, flush=True)
        return await read_stdin_line(stdin)

    async def approve(prompt: ConfirmationPrompt) -> str | None:
        print(
            f"\nThe agent asks to run {prompt.tool}\n"
            f"  target:           {prompt.target}\n"
            f"  operation digest: {prompt.operation_digest}\n"
            f"  arguments:        {json.dumps(dict(prompt.arguments), sort_keys=True)}",
            file=stderr,
        )
        if (await read_line("Type 'yes' to approve: ")).strip().lower() != "yes":
            return None
        if config.approver is not None:
            return config.approver
        name = (await read_line("Your name (recorded as the approver): ")).strip()
        return f"human:{name}" if name else None

    return approve


# ------------------------------------------------------------------------------- commands


# The REPL's `help`: one line per command.
COMMANDS = {
    "list": "list                             the tools this binding may see",
    "search": "search QUERY [--limit N]         search admitted memories for the bound purpose",
    "get": "get RECORD_ID                    read one memory",
    "capture": "capture FILE.json                propose a memory from capture arguments",
    "admit": "admit CANDIDATE_ID [--key KEY]   ask the admission policy to admit a candidate",
    "withdraw": "withdraw CANDIDATE_ID [--key KEY] [--reason REF]   asks you first",
    "forget": "forget RECORD_ID [--key KEY] [--reason REF]        asks you first",
    "help": "help, ?                          this list",
    "quit": "quit, exit                       leave (so does end of input)",
}


class _Parser(argparse.ArgumentParser):
    """Raises instead of printing the usage and exiting, so that the REPL answers a mistyped
    command in one line and goes on."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="host.py", add_help=False, exit_on_error=False)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    search = sub.add_parser("search")
    # Every word: `search refund courier` is one query, quoted or not.
    search.add_argument("query", nargs="+")
    search.add_argument("--limit", type=int)
    sub.add_parser("get").add_argument("record_id")
    capture = sub.add_parser("capture")
    capture.add_argument("file", help="capture arguments as JSON (idempotency_key optional)")
    for name, target in (
        ("admit", "candidate_id"),
        ("withdraw", "candidate_id"),
        ("forget", "record_id"),
    ):
        command = sub.add_parser(name)
        command.add_argument(target)
        command.add_argument("--key", help="idempotency key (reuse it to retry the same call)")
        if name != "admit":
            command.add_argument("--reason", default="reason:operator-request")
    sub.add_parser("repl")
    sub.add_parser("quit")
    return parser


class HostCommands:
    """Turns one command into one bound (and, where needed, confirmed) tool call."""

    def __init__(
        self, host: ReferenceHost, config: HostConfig, approve: Approver, out: TextIO
    ) -> None:
        self.host, self.config, self.approve, self.out = host, config, approve, out

    def _print(self, document: object) -> None:
        print(json.dumps(document, indent=2, ensure_ascii=False), file=self.out, flush=True)

    async def run(self, args: argparse.Namespace) -> int:
        try:
            return await self._run(args)
        except MCPError as refused:
            if is_transport_failure(refused):
                raise  # connect_explained reports it in one line
            # Binding missing/unverifiable or tool not visible: stop, tell the operator.
            print(f"refused by the server: {refused.code} {refused.message}", file=sys.stderr)
            return REFUSED

    async def _run(self, args: argparse.Namespace) -> int:
        purpose = self.host.binding.purpose_ref
        if args.command == "list":
            self._print([tool.name for tool in await self.host.list_tools()])
            return OK
        if args.command == "search":
            query = " ".join(args.query)
            arguments: dict[str, Any] = {"query": query, "purpose_ref": purpose}
            if args.limit is not None:
                arguments["limit"] = args.limit
            return await self._call("engram_memory_search", arguments)
        if args.command == "get":
            arguments = {"record_id": args.record_id, "purpose_ref": purpose}
            return await self._call("engram_memory_get", arguments)
        if args.command == "capture":
            try:
                arguments = json.loads(Path(args.file).read_text("utf-8"))
            except (OSError, ValueError) as exc:
                print(f"cannot read capture arguments: {exc}", file=sys.stderr)
                return USAGE
            if not isinstance(arguments, dict):
                print("capture arguments must be a JSON object", file=sys.stderr)
                return USAGE
            arguments.setdefault("idempotency_key", _new_key("capture"))
            # A capture confirmation is bound to the payload, via the operation digest.
            target = operation_digest("engram_memory_capture", normalize(arguments))
            return await self._call("engram_memory_capture", arguments, target)
        if args.command == "admit":
            arguments = {"candidate_id": args.candidate_id, "idempotency_key": _key(args)}
            return await self._call("engram_memory_request_admission", arguments, args.candidate_id)
        if args.command == "withdraw":
            arguments = {
                "candidate_id": args.candidate_id,
                "idempotency_key": _key(args),
                "reason_ref": args.reason,
            }
            return await self._call("engram_memory_withdraw", arguments, args.candidate_id)
        if args.command == "forget":
            arguments = {
                "record_id": args.record_id,
                "idempotency_key": _key(args),
                "reason_ref": args.reason,
            }
            return await self._call("engram_memory_forget", arguments, args.record_id)
        print(f"unknown command {args.command!r}", file=sys.stderr)
        return USAGE

    async def _call(self, tool: str, arguments: dict[str, Any], target: str = "") -> int:
        """Call once, retrying retriable failures with the same arguments (and, for a
        confirmed tool, a fresh human confirmation each time: a replay passes the gate too)."""
        confirmed = tool in ALWAYS_CONFIRMED or tool in self.config.confirm_tools
        if "idempotency_key" in arguments:
            print(f"idempotency_key: {arguments['idempotency_key']}", file=sys.stderr)
        for attempt in range(self.config.retries + 1):
            if attempt:
                await anyio.sleep(self.config.retry_backoff_seconds * 2 ** (attempt - 1))
                print(f"retrying {tool} (attempt {attempt + 1})", file=sys.stderr)
            outcome: CallOutcome | None
            if confirmed:
                outcome = await self.host.call_confirmed(tool, arguments, target, self.approve)
            else:
                outcome = await self.host.call(tool, arguments)
            if outcome is None:
                print("Not approved: nothing was sent to the server.", file=sys.stderr)
                return NOT_APPROVED
            self._print(outcome.envelope)
            if not outcome.is_error:
                return OK
            if not outcome.envelope.get("error", {}).get("retriable", False):
                return TOOL_ERROR
        return TOOL_ERROR


def _new_key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def _key(args: argparse.Namespace) -> str:
    return str(args.key) if args.key else _new_key(str(args.command))


async def repl(commands: HostCommands, parser: argparse.ArgumentParser, stdin: TextIO) -> int:
    """One command per line; `quit`, `exit` or end of input leaves with 0. A command that
    fails prints its line and the REPL goes on; a lost connection ends it (ConnectionLost).
    """
    while True:
        print("engram> ", end="", file=sys.stderr, flush=True)
        line = await read_stdin_line(stdin)
        if not line:
            return OK  # end of input
        try:
            words = shlex.split(line)
        except ValueError as exc:  # e.g. an unclosed quote
            print(f"cannot read that line: {exc}", file=sys.stderr)
            continue
        name = words[0] if words else ""
        if name in ("quit", "exit"):
            return OK
        if name in ("help", "?"):
            print("\n".join(COMMANDS.values()), file=sys.stderr)
        elif name and name not in COMMANDS:
            print(f"unknown command {name!r}: type `help` for the list", file=sys.stderr)
        elif name:
            try:
                args = parser.parse_args(words)
            except (argparse.ArgumentError, SystemExit) as exc:
                print(f"{exc}; usage: {COMMANDS[name].split('  ')[0]}", file=sys.stderr)
                continue
            await commands.run(args)


async def run_host(
    config: HostConfig,
    argv: list[str],
    *,
    approve: Approver | None = None,
    stdin: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
) -> int:
    """Connect, run one command (or the REPL), disconnect. `approve` defaults to asking the
    human on the terminal; tests and other UIs pass their own callback."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        print(f"usage error: {exc}\n{__doc__}", file=sys.stderr)
        return USAGE
    if args.command == "quit":
        return OK
    try:
        signer = HostSigningKey.from_pem_file(Path(config.signing_key))
    except ConfigurationError as exc:
        print(f"host config error: {exc}", file=sys.stderr)
        return USAGE
    approver = approve or terminal_approver(config, stdin, sys.stderr)
    server, timeout = server_of(config), config.timeout_seconds
    try:
        # The stdio server's own stderr is relayed once it has started; a failure to connect
        # or to stay connected is one line naming the problem, never a traceback.
        async with connect_explained(
            server, signer, binding_of(config), timeout_s=timeout, relay=sys.stderr
        ) as host:
            commands = HostCommands(host, config, approver, out)
            if args.command == "repl":
                return await repl(commands, parser, stdin)
            return await commands.run(args)
    except ServerUnavailable as failure:
        print(failure, file=sys.stderr)
        return UNAVAILABLE[type(failure)]


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    top = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--config", required=True, type=Path, help="host config (YAML or JSON)")
    top.add_argument("command", nargs=argparse.REMAINDER)
    options = top.parse_args(argv)
    # The SDK logs a server's stray output with a traceback; failures are reported above.
    logging.getLogger("mcp").setLevel(logging.CRITICAL)
    try:
        config = load_config(options.config, os.environ if environ is None else environ)
    except ConfigError as exc:
        print(f"host config error: {exc}", file=sys.stderr)
        return USAGE
    try:
        return anyio.run(run_host, config, options.command)
    except KeyboardInterrupt:  # Ctrl-C; the SDK has stopped a stdio server on the way out
        print("interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
