"""Everything `engram-memory gateway --config FILE [--check]` verifies before it starts.

The file's own problems (YAML, unknown keys, bounds, unset `${VAR}`s: gateway/config.py) and
the checks against the machine are reported together, every one as `file:line: field:
message` with the line of the key at fault, so one run shows an operator everything to fix:

- `signing_key` is a readable Ed25519 private key;
- `audit_log` can be created (its directory exists or can be made) and no other gateway
  holds it (two clients cannot share one log: each needs its own configuration);
- `upstream.command[0]` is an executable (config.resolve_program says where it is looked
  for), and the files the child's `env` names (ENGRAM_HOST_KEYS, ENGRAM_ROOT_KEY, ...) exist;
- `stdio.os_user` is the user the gateway runs as (unless `allow_other_os_user`);
- `http.listen.host` off loopback comes with `http.allowed_hosts`.

These machine checks read the expanded document, not the validated model, so they still
run when another key of the file is wrong; a key the file check already faulted (an unset
`${VAR}`, a wrong type) is not checked again. Nothing is created or written here.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_memory._internal.yaml_source import YamlSource, dotted
from engram_memory.contract.exceptions import ConfigurationError, GatewayConfigError
from engram_memory.gateway.config import GatewayConfig, read_gateway_config, resolve_program
from engram_memory.gateway.os_user import effective_os_user
from engram_memory.host.keys import HostSigningKey
from engram_memory.transport.http_settings import is_loopback

# The operator page that explains every problem below.
GUIDE = "docs/operators/checking-configs.md"
# Variables of the child's `env` that name a file the server refuses to start without.
_CHILD_FILES = ("ENGRAM_HOST_KEYS", "ENGRAM_ROOT_KEY", "ENGRAM_CHECKPOINT_KEY")


def preflight(path: Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """The configuration at `path`, once the file and the machine both pass.

    Raises:
        GatewayConfigError: every problem found, in line order.
    """
    read = read_gateway_config(path, env)
    if read.document is not None:
        _check_machine(read.document, read.source)
    if read.config is None or read.source.problems:
        raise GatewayConfigError(_in_line_order(read.source.problems))
    return read.config


def _in_line_order(problems: list[str]) -> list[str]:
    def line(problem: str) -> int:
        parts = problem.split(":", 2)
        return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0

    return sorted(problems, key=line)  # stable: one line's problems keep their order


class _Machine(YamlSource):
    """Reports into `source`, except on a key that already has a problem (one cause, one
    line: `${HOME}` unset must not also read as "file /.engram-secrets/... not found")."""

    def __init__(self, source: YamlSource) -> None:
        super().__init__(source.name)
        self.lines = source.lines
        self.problems = source.problems
        prefix = f"{source.name}:"
        self._faulted = {
            problem.removeprefix(prefix).split(": ", 2)[1]
            for problem in source.problems
            if problem.startswith(prefix) and problem.count(": ") >= 2
        }

    def report(self, loc: Sequence[str | int], message: str) -> None:
        if dotted(loc) not in self._faulted:
            super().report(loc, message)


def _check_machine(document: dict[str, Any], file_source: YamlSource) -> None:
    source = _Machine(file_source)
    signing_key = document.get("signing_key")
    if isinstance(signing_key, str) and signing_key:
        _check_signing_key(Path(signing_key), source)
    audit_log = document.get("audit_log")
    if isinstance(audit_log, str) and audit_log:
        _check_audit_log(Path(audit_log), source)
    upstream = document.get("upstream")
    if isinstance(upstream, dict):
        _check_upstream(upstream, source)
    stdio = document.get("stdio")
    if document.get("mode") == "stdio" and isinstance(stdio, dict):
        _check_os_user(stdio, source)
    http = document.get("http")
    if document.get("mode") == "http" and isinstance(http, dict):
        _check_listener(http, source)


def _check_signing_key(path: Path, source: YamlSource) -> None:
    try:
        HostSigningKey.from_pem_file(path)
    except ConfigurationError as exc:
        hint = (
            "create one with `engram-memory host init --dir DIR` and point signing_key at "
            "DIR/host-signing.pem"
            if not path.exists()
            else "it must be an unencrypted Ed25519 private key (PEM)"
        )
        source.report(("signing_key",), f"{exc}: {hint}")


def _check_audit_log(path: Path, source: YamlSource) -> None:
    loc = ("audit_log",)
    if path.is_dir():
        source.report(loc, f"{path} is a directory: name a file in it")
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        source.report(loc, f"cannot create {path}: {ancestor} is not a writable directory")
        return
    if not path.exists():
        return  # created (with its directory) when the gateway starts
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        source.report(loc, f"cannot open {path}: {exc.strerror or type(exc).__name__}")
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        source.report(
            loc,
            f"{path} is in use by another gateway process: each MCP client needs its own "
            f"configuration with its own audit_log (see {GUIDE}, 'Several clients')",
        )
    finally:
        os.close(fd)  # closing releases the probe's lock


def _check_upstream(upstream: dict[str, Any], source: YamlSource) -> None:
    command = upstream.get("command")
    given_env = upstream.get("env")
    child_env = (
        {str(k): v for k, v in given_env.items() if isinstance(v, str)}
        if isinstance(given_env, dict)
        else {}
    )
    program = command[0] if isinstance(command, list) and command else None
    if isinstance(program, str) and program and resolve_program(program, child_env) is None:
        source.report(
            ("upstream", "command", 0),
            f"{program!r} is not an executable file, nor found on PATH or beside this "
            "gateway's Python: give its absolute path (`command -v engram-memory` in the "
            "venv prints it)",
        )
    for name in _CHILD_FILES:
        value = child_env.get(name)
        if value and not Path(value).expanduser().is_file():
            source.report(
                ("upstream", "env", name),
                f"{value} is not a readable file (the server refuses to start without it; "
                "`engram-memory host init --dir DIR` creates the keys)",
            )


def _check_os_user(stdio: dict[str, Any], source: YamlSource) -> None:
    os_user = stdio.get("os_user")
    if not isinstance(os_user, str) or stdio.get("allow_other_os_user") is True:
        return
    actual = effective_os_user()
    if os_user != actual:
        source.report(
            ("stdio", "os_user"),
            f"is {os_user!r} but the gateway runs as {actual!r}: set it to {actual!r} "
            "(or stdio.allow_other_os_user: true for a service account)",
        )


def _check_listener(http: dict[str, Any], source: YamlSource) -> None:
    listen = http.get("listen")
    host = listen.get("host", "127.0.0.1") if isinstance(listen, dict) else "127.0.0.1"
    if isinstance(host, str) and not is_loopback(host) and not http.get("allowed_hosts"):
        source.report(
            ("http", "listen", "host"),
            f"{host} is not loopback: set http.allowed_hosts to the Host names clients use "
            "(and http.allowed_origins to the browser origins, if any)",
        )
