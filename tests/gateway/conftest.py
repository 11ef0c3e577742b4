"""Fixtures of the gateway tests: a local OAuth issuer (and a foreign one) on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.gateway.audit_log import GatewayAudit
from tests.gateway.token_issuer import TokenIssuer, running_issuer

# The gateway's canonical URL in unit tests: the audience the issuer mints for.
RESOURCE = "http://127.0.0.1:8787/mcp"


@pytest.fixture
def issuer() -> Iterator[TokenIssuer]:
    """The organisation's identity provider, minting tokens for RESOURCE."""
    yield from running_issuer(RESOURCE)


@pytest.fixture
def foreign_issuer() -> Iterator[TokenIssuer]:
    """Another identity provider with keys of its own (the "another issuer" cases)."""
    yield from running_issuer(RESOURCE)


class Clock:
    """A clock the test moves (epoch seconds, also fine as a monotonic clock)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[GatewayAudit]:
    """A real gateway audit log in the test's directory."""
    log = GatewayAudit.open(tmp_path / "gateway-audit.jsonl", "host:gateway-test")
    yield log
    log.close()


def entries(audit: GatewayAudit) -> list[dict[str, Any]]:
    """The audit log's entries as written."""
    return [json.loads(line) for line in audit.path.read_text().splitlines()]
