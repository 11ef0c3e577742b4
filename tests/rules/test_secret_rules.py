"""Issue 3, rule 8 — secrets are never stored (SPEC §11), one case per named shape, through
the whole service: refused with INVALID_SCHEMA, nothing written, and the secret appears in no
envelope, log line, audit entry or file of the data directory.

The detector's shape catalogue is unit-tested in tests/contract/test_secrets.py and its
refusal at every stored field in tests/contract/test_parsing.py (see tests/RULES.md).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.runtime import Services
from tests.harness import Caller, error_of, fresh_key
from tests.rules.steps import CAPTURE, FORGET, files_holding
from tests.tools.test_tool_rules import accepted_record, high_water

# One real-looking instance of each shape the issue names.
SHAPES = {
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
    "bearer_token": "Authorization: Bearer k9Xq2Lm4Pz7Rt1Vw8Yb3Nc6Hd0Jf5Gs",
    "api_token": "ghp_R8mK2xQ9vL4tZ7wN1bC6yH3jF5dS0aE2pU8i",
    "connection_string_with_password": "postgres://svc_app:Tr0ub4dor3x@db.internal:5432/app",
    "env_assignment": "STRIPE_SECRET_KEY=rk8Hq2Wm5Zt9Lp3Xv7Nb1Cd4",
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyOjQyIiwiaWF0IjoxNzAwMDAwMDAwfQ"
        ".Qm9ndXNTaWduYXR1cmVGb3JUZXN0aW5nT25seTEyMzQ1Ng"
    ),
}


def _audit_text(services: Services) -> str:
    with services.database.transaction() as tx:
        rows = tx.fetchall("SELECT * FROM audit_entries")
    return json.dumps([[str(cell) for cell in row] for row in rows])


def _assert_never_echoed(
    secret: str, envelope: dict[str, Any], services: Services, logs: str
) -> None:
    fragments = {secret, *(line for line in secret.splitlines() if len(line) >= 12)}
    for fragment in fragments:
        assert fragment not in json.dumps(envelope)
        assert fragment not in logs
        assert fragment not in _audit_text(services)
        assert files_holding(services, fragment.encode()) == []


@pytest.mark.parametrize("shape", list(SHAPES))
def test_secret_shape_in_capture_is_invalid_schema_and_never_echoed(
    alice: Caller, services: Services, caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = SHAPES[shape]
    args = demo_capture_arguments(f"Deploy notes: {secret} (rotate monthly).", fresh_key())
    envelope = alice.call(CAPTURE, args)
    assert error_of(envelope) == ("INVALID_SCHEMA", False)
    assert high_water(services) == 0
    _assert_never_echoed(secret, envelope, services, caplog.text)


def test_secret_shape_in_reason_ref_is_invalid_schema_and_never_echoed(
    alice: Caller, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    record_id = accepted_record(alice)
    cursor = high_water(services)
    secret = SHAPES["api_token"]
    args = {"record_id": record_id, "idempotency_key": fresh_key(), "reason_ref": secret}
    envelope = alice.call(FORGET, args, alice.confirm(FORGET, args, record_id))
    assert error_of(envelope) == ("INVALID_SCHEMA", False)
    assert high_water(services) == cursor
    _assert_never_echoed(secret, envelope, services, caplog.text)
