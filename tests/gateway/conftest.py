"""Fixtures of the gateway tests: a local OAuth issuer (and a foreign one) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
