"""How `dev-idp mint` finds the running development IdP and asks it for a token.

The running IdP writes its issuer URL and mint secret to a state file (0600, replaced
atomically, removed when it stops); `mint` reads it and POSTs the request to `/mint` with the
secret. Only this module's functions touch the file, so its shape lives here alone.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from engram_memory.contract.exceptions import DevIdpRefused
from engram_memory.gateway.dev_idp import (
    INVALID_REQUEST,
    MINT_PATH,
    NOT_RUNNING,
    STATE_UNWRITABLE,
    UNAUTHORIZED,
    UNREACHABLE,
)
from engram_memory.transport.http_settings import is_loopback

MINT_TIMEOUT_S = 10.0
_START_HINT = "start it with `engram-memory gateway dev-idp` (in another terminal)"


@dataclass(frozen=True)
class DevIdpState:
    """Where the running IdP is and the secret its `/mint` wants."""

    issuer: str
    mint_secret: str


def default_state_file() -> Path:
    return Path.home() / ".engram-dev-idp.json"


def write_state(path: Path, state: DevIdpState) -> None:
    """Write the state file 0600 (a temporary file renamed over it: a reader never sees
    half of one).

    Raises:
        DevIdpRefused: DEV_IDP_STATE_UNWRITABLE, the file cannot be written there.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"issuer": state.issuer, "mint_secret": state.mint_secret}, handle)
        os.replace(temporary, path)
    except OSError as exc:
        raise DevIdpRefused(
            STATE_UNWRITABLE,
            f"cannot write the state file {path}: {exc.strerror or type(exc).__name__}; "
            "pass a writable --state (and the same --state to `dev-idp mint`)",
        ) from None


def remove_state(path: Path, state: DevIdpState) -> None:
    """Remove the state file if it is still this run's (another run may have replaced it)."""
    with contextlib.suppress(DevIdpRefused, OSError):
        if read_state(path) == state:
            path.unlink()


def read_state(path: Path) -> DevIdpState:
    """Raises: DevIdpRefused: DEV_IDP_NOT_RUNNING, no usable state file at `path`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DevIdpRefused(NOT_RUNNING, f"no dev-idp state file {path}: {_START_HINT}") from None
    except (OSError, ValueError):
        raise DevIdpRefused(NOT_RUNNING, f"the state file {path} cannot be read") from None
    issuer, secret = (
        data.get(k) if isinstance(data, dict) else None for k in ("issuer", "mint_secret")
    )
    if not (isinstance(issuer, str) and isinstance(secret, str) and _on_loopback(issuer)):
        # Never send the secret off this machine, whatever the file says.
        raise DevIdpRefused(NOT_RUNNING, f"the state file {path} is not a dev-idp's")
    return DevIdpState(issuer, secret)


def _on_loopback(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme == "http" and is_loopback(parts.hostname or "")


def request_token(state: DevIdpState, request: dict[str, Any]) -> str:
    """A token from the running IdP for `request` (POST /mint's JSON body).

    Raises:
        DevIdpRefused: DEV_IDP_UNREACHABLE (nothing answers at the issuer),
            DEV_IDP_UNAUTHORIZED (the state file is another run's), DEV_IDP_INVALID_REQUEST
            (a field the IdP refused; `field` names it).
    """
    try:
        answer = httpx.post(
            state.issuer + MINT_PATH,
            json=request,
            headers={"Authorization": f"Bearer {state.mint_secret}"},
            timeout=MINT_TIMEOUT_S,
        )
        body = answer.json()
        if not isinstance(body, dict):
            raise ValueError
    except (httpx.HTTPError, ValueError):
        raise DevIdpRefused(
            UNREACHABLE, f"no dev-idp answers at {state.issuer}: {_START_HINT}"
        ) from None
    if answer.status_code == 200 and isinstance(body.get("access_token"), str):
        token: str = body["access_token"]
        return token
    if answer.status_code == 401:
        raise DevIdpRefused(
            UNAUTHORIZED,
            f"the dev-idp at {state.issuer} is not the one that wrote the state file: pass the "
            "running one's --state, or restart it",
        )
    if answer.status_code == 400 and body.get("code") == INVALID_REQUEST:
        field = body.get("field")
        raise DevIdpRefused(
            INVALID_REQUEST,
            "the dev-idp refused the request",
            field=field if isinstance(field, str) else "",
        )
    raise DevIdpRefused(
        UNREACHABLE,
        f"{state.issuer} answered {answer.status_code}, not as a dev-idp: {_START_HINT}",
    )
