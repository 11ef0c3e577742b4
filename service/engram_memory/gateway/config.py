"""The gateway's configuration file (YAML), validated before anything starts.

Every problem is reported as `file:line: dotted.field: message` (policy/yaml_source.py, as the
policy YAML is), all at once. `${VAR}` in any string value expands from the environment (an
unset variable is a problem, never an empty string); relative paths (`signing_key`,
`audit_log`, a relative `upstream.command[0]` holding a `/`) resolve against the directory of
the configuration file, so the file means the same whatever the working directory.

`mode` chooses which section is required: `stdio:` (the binding of the one local user) or
`http:` (OAuth 2.1 protected resource; gateway/http.py). docs/operators/gateway.md documents
each key.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from engram_memory._internal.yaml_source import Path_, YamlSource, read_yaml
from engram_memory.contract.exceptions import GatewayConfigError, TokenInvalid
from engram_memory.contract.groups import is_group_ref
from engram_memory.contract.identifiers import SCOPE_PART, has_refused_character, is_scope_part
from engram_memory.contract.types import ALWAYS_CONFIRMED_TOOLS, SELECTABLE_CONFIRMED_TOOLS, one_of
from engram_memory.host.confirmation import check_approver

# Tools that need a human yes whatever the configuration says (SPEC §7).
ALWAYS_CONFIRMED = ALWAYS_CONFIRMED_TOOLS
# Tools the operator may add (SPEC §7: "when policy data selects it").
OPTIONALLY_CONFIRMED = SELECTABLE_CONFIRMED_TOOLS
# JWS algorithms a team deployment may allow; `none` and the HMAC family are refused (a
# shared secret would let anyone holding it mint tokens, and `none` is no signature).
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DEFAULT_MAX_TOKEN_LIFETIME_S = 86_400
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _identifier(value: str) -> str:
    if has_refused_character(value):
        raise ValueError("holds a control or format character")
    return value


def _scope_part(value: str) -> str:
    # fullmatch, not a `^...$` pattern: `$` would also accept a trailing newline.
    if not is_scope_part(value):
        raise ValueError(f"must match {SCOPE_PART.pattern}")
    return value


Ref = Annotated[str, Field(min_length=1, max_length=512), AfterValidator(_identifier)]
ScopePart = Annotated[str, AfterValidator(_scope_part)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _purpose(value: str) -> str:
    if not unicodedata.is_normalized("NFC", value):
        raise ValueError("must be NFC-normalized")
    if len(value.encode("utf-8")) > 512:
        raise ValueError("longer than 512 bytes")
    return value


class UpstreamConfig(_Model):
    """The engram-memory server the gateway calls: a child over stdio, or a URL."""

    command: tuple[str, ...] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = Field(default=None, pattern=r"^https?://")
    # The upstream store's ENGRAM_STORE_AUDIENCE: signed as every token's `aud`.
    audience: Ref | None = None
    timeout_s: float = Field(default=30, ge=1, le=300)

    @model_validator(mode="after")
    def _one_kind(self) -> UpstreamConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("exactly one of `command` and `url` is required")
        if self.url is not None and self.env:
            raise ValueError("`env` is only for a `command` upstream")
        return self


class ConfirmationConfig(_Model):
    """Which tools need a human yes beyond withdraw and forget, and how long a human has."""

    tools: tuple[Annotated[str, one_of(*OPTIONALLY_CONFIRMED)], ...] = ()
    timeout_s: float = Field(default=120, ge=1, le=240)


class StdioBinding(_Model):
    """The one local user a desktop (stdio) gateway acts for."""

    tenant: ScopePart
    workspace: ScopePart
    principal: Ref
    agent_id: Ref = "agent:gateway"
    purposes: tuple[Ref, ...] = Field(min_length=1, max_length=64)
    groups: tuple[str, ...] = Field(default=(), max_length=64)
    os_user: Annotated[str, Field(min_length=1, max_length=256)]
    allow_other_os_user: bool = False
    approver: str | None = None
    # The approver's groups (four-eyes rules); default: `groups` when the approver is the
    # OS user (the same person), none when `approver` names someone else.
    approver_groups: tuple[str, ...] | None = Field(default=None, max_length=64)

    @field_validator("purposes")
    @classmethod
    def _purposes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for purpose in value:
            _purpose(purpose)
        if len(set(value)) != len(value):
            raise ValueError("purposes must be distinct")
        return value

    @field_validator("groups", "approver_groups")
    @classmethod
    def _groups(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for group in value or ():
            if not is_group_ref(group):
                raise ValueError(f"{group!r} is not a group reference (`group:<name>`)")
        return value

    @field_validator("approver")
    @classmethod
    def _approver(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                check_approver(value)
            except TokenInvalid as exc:
                raise ValueError(f"must be `human:<subject>` ({exc})") from None
        return value

    @model_validator(mode="after")
    def _default_approver(self) -> StdioBinding:
        if self.approver is None:
            try:
                check_approver(self.effective_approver)
            except TokenInvalid as exc:
                raise ValueError(
                    f"os_user cannot name the approver; set `approver` ({exc})"
                ) from None
        return self

    @property
    def effective_approver(self) -> str:
        return self.approver if self.approver is not None else f"human:{self.os_user}"

    @property
    def effective_approver_groups(self) -> tuple[str, ...] | None:
        """The approver's groups as the confirmations assert them (sorted, unique)."""
        if self.approver_groups is not None:
            return tuple(sorted(set(self.approver_groups)))
        if self.approver is None:  # the OS user approves their own binding's calls
            return tuple(sorted(set(self.groups)))
        return None


class Listen(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=1, le=65535)


class ClaimMapping(_Model):
    """Where one part of the binding comes from: a token claim (with an optional prefix
    added to its value) or a fixed value for a one-tenant deployment."""

    claim: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    value: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    prefix: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> ClaimMapping:
        if (self.claim is None) == (self.value is None):
            raise ValueError("exactly one of `claim` and `value` is required")
        return self


class ClaimsConfig(_Model):
    principal: ClaimMapping = ClaimMapping(claim="sub", prefix="user:")
    tenant: ClaimMapping = ClaimMapping(claim="tenant")
    workspace: ClaimMapping = ClaimMapping(claim="workspace")
    groups: ClaimMapping | None = None
    agent: ClaimMapping | None = None


class ServedScope(_Model):
    tenant: ScopePart
    workspace: ScopePart
    purposes: tuple[Ref, ...] = Field(min_length=1, max_length=64)

    @field_validator("purposes")
    @classmethod
    def _purposes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for purpose in value:
            _purpose(purpose)
        return value


class HttpBinding(_Model):
    """A team (HTTP) gateway: an OAuth 2.1 protected resource (gateway/http.py)."""

    listen: Listen = Listen()
    resource: str = Field(pattern=r"^https?://")
    issuer: str = Field(min_length=1)
    jwks_url: str = Field(pattern=r"^https?://")
    audience: str | None = None
    algorithms: tuple[str, ...] = Field(default=("RS256", "ES256"), min_length=1)
    required_scopes: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    claims: ClaimsConfig = ClaimsConfig()
    scopes: tuple[ServedScope, ...] = Field(min_length=1)
    # The longest lifetime a bearer token may have (`exp - iat`) or have left (`exp - now`):
    # a stolen 10-year token would otherwise be a 10-year key. 1 min .. 7 days.
    max_token_lifetime_s: int = Field(default=DEFAULT_MAX_TOKEN_LIFETIME_S, ge=60, le=604_800)

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for algorithm in value:
            if algorithm not in ASYMMETRIC_ALGORITHMS:
                allowed = ", ".join(sorted(ASYMMETRIC_ALGORITHMS))
                raise ValueError(f"{algorithm!r} is refused: allowed are {allowed}")
        return value

    @property
    def effective_audience(self) -> str:
        return self.audience if self.audience is not None else self.resource


class GatewayConfig(_Model):
    """The whole gateway configuration (docs/operators/gateway.md)."""

    mode: Literal["stdio", "http"]
    host_id: Ref
    signing_key: Path
    audit_log: Path
    upstream: UpstreamConfig
    confirmation: ConfirmationConfig = ConfirmationConfig()
    stdio: StdioBinding | None = None
    http: HttpBinding | None = None

    @model_validator(mode="after")
    def _section_for_mode(self) -> GatewayConfig:
        if self.mode == "stdio" and self.stdio is None:
            raise ValueError("mode stdio needs a `stdio:` section")
        if self.mode == "http" and self.http is None:
            raise ValueError("mode http needs an `http:` section")
        return self

    @property
    def confirmed_tools(self) -> frozenset[str]:
        return frozenset((*ALWAYS_CONFIRMED, *self.confirmation.tools))


def _expand(value: object, loc: Path_, env: Mapping[str, str], source: YamlSource) -> object:
    """`${VAR}` expanded in every string, recursively; an unset variable is reported."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                source.report(loc, f"environment variable {name} is not set")
                return ""
            return env[name]

        return _VARIABLE.sub(substitute, value)
    if isinstance(value, dict):
        return {key: _expand(item, (*loc, str(key)), env, source) for key, item in value.items()}
    if isinstance(value, list):
        return [_expand(item, (*loc, index), env, source) for index, item in enumerate(value)]
    return value


def _resolve_paths(document: dict[str, Any], base: Path) -> None:
    """Relative paths resolve against the configuration file's directory."""
    for key in ("signing_key", "audit_log"):
        value = document.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            document[key] = str(base / value)
    upstream = document.get("upstream")
    if isinstance(upstream, dict):
        command = upstream.get("command")
        if isinstance(command, list) and command and isinstance(command[0], str):
            program = command[0]
            if "/" in program and not os.path.isabs(program):
                upstream["command"] = [str(base / program), *command[1:]]


def resolve_program(program: str, env: Mapping[str, str]) -> str | None:
    """The executable `upstream.command[0]` names, or None.

    A name holding `/` is a path (made absolute against the file's directory at load). A bare
    name is looked up on the child's PATH (its `env` PATH, else the gateway's), then beside
    the Python running the gateway: a client that starts `/venv/bin/engram-memory gateway`
    thus finds `engram-memory serve` in the same venv even when the venv is not on PATH.
    """
    search_path = env.get("PATH", os.environ.get("PATH"))
    found = shutil.which(program, path=search_path)
    if found is None and "/" not in program:
        found = shutil.which(program, path=str(Path(sys.executable).parent))
    return found


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """A configuration file as read: where its lines are, the expanded document (None when
    it did not parse into a mapping) and the validated model (None when any problem was
    found). `source.problems` holds every problem so far (gateway/preflight.py adds more)."""

    source: YamlSource
    document: dict[str, Any] | None
    config: GatewayConfig | None


def read_gateway_config(path: Path, env: Mapping[str, str] | None = None) -> ReadConfig:
    """Read, expand and validate the configuration at `path`, collecting every problem."""
    source = YamlSource(str(path))
    document = read_yaml(path, source)
    if source.problems:
        return ReadConfig(source, None, None)
    if not isinstance(document, dict):
        source.report((), "the configuration must be a mapping of keys")
        return ReadConfig(source, None, None)
    expanded = _expand(document, (), os.environ if env is None else env, source)
    assert isinstance(expanded, dict)
    _resolve_paths(expanded, path.resolve().parent)
    try:
        config = GatewayConfig.model_validate(expanded)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            if source.key_problems and "[key]" in error["loc"]:
                continue
            message = error["msg"].removeprefix("Value error, ")
            source.report(tuple(error["loc"]), message)
        return ReadConfig(source, expanded, None)
    return ReadConfig(source, expanded, None if source.problems else config)


def load_gateway_config(path: Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read, expand and validate the configuration at `path` (the file alone: the signing
    key, OS user and audit log are gateway/preflight.py's).

    Raises:
        GatewayConfigError: every problem found, one `file:line: field: message` each.
    """
    read = read_gateway_config(path, env)
    if read.config is None:
        raise GatewayConfigError(read.source.problems)
    return read.config
