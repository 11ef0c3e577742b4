"""The dropped-response failpoint through the real server process over stdio.

`ENGRAM_UNSAFE_FAILPOINTS` arms capture and forget once each when the server starts; the
reference host sees MUTATION_OUTCOME_UNKNOWN, retries with the same key and arguments, and
gets the definitive committed result. The journal is then read from the store file.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.client.reference_host import Binding, CallOutcome, connect
from engram_memory.core.failpoints import ENV_VAR
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.database import Database
from tests.servers import server_env

pytestmark = pytest.mark.e2e

ALICE = Binding(
    tenant="acme",
    workspace="support",
    principal="user:alice",
    purpose_ref="purpose:support-case",
)
SCOPE = "tenant:acme/workspace:support"
CAPTURE = "engram_memory_capture"
FORGET = "engram_memory_forget"
APPROVER = "human:test-operator"


def _key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def _value(outcome: CallOutcome) -> dict[str, Any]:
    assert outcome.envelope["ok"] is True, outcome.envelope
    value: dict[str, Any] = outcome.envelope["output"]["value"]
    return value


def _error(outcome: CallOutcome) -> tuple[str, bool]:
    assert outcome.envelope["ok"] is False, outcome.envelope
    assert outcome.is_error is True
    return outcome.envelope["error"]["code"], outcome.envelope["error"]["retriable"]


def _journal(data_dir: Path) -> list[tuple[str, str, str]]:
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            rows = tx.fetchall(
                "SELECT operation, cursor, target_id FROM journal_events "
                "WHERE scope_ref = ? ORDER BY cursor",
                [SCOPE],
            )
    finally:
        database.close()
    return [(str(op), str(cursor), str(target)) for op, cursor, target in rows]


async def test_dropped_capture_and_forget_responses_resolve_on_retry_over_stdio(
    tmp_path: Path,
) -> None:
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    data_dir = tmp_path / "data"
    env = server_env(
        data_dir,
        root_key,
        public_keys,
        **{ENV_VAR: f"drop_response_after_commit:{CAPTURE},drop_response_after_commit:{FORGET}"},
    )
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "engram_memory.cli", "serve"], env=env
    )
    signer = HostSigningKey.from_pem_file(signing_key)
    capture_args = demo_capture_arguments("Refund approved for order 4711.", _key("capture"))

    async with connect(server, signer, ALICE) as host:
        assert _error(await host.call(CAPTURE, capture_args)) == ("MUTATION_OUTCOME_UNKNOWN", True)
        captured = _value(await host.call(CAPTURE, capture_args))
        assert captured["status"] == "duplicate_exact"

        admit_args = {"candidate_id": captured["candidate_id"], "idempotency_key": _key("admit")}
        admitted = _value(await host.call("engram_memory_request_admission", admit_args))
        record_id = admitted["outcome"]["record_id"]

        forget_args = {
            "record_id": record_id,
            "idempotency_key": _key("forget"),
            "reason_ref": "reason:request",
        }
        token = host.confirmation_for(FORGET, forget_args, record_id, APPROVER)
        first = await host.call(FORGET, forget_args, confirmation=token)
        assert _error(first) == ("MUTATION_OUTCOME_UNKNOWN", True)
        token = host.confirmation_for(FORGET, forget_args, record_id, APPROVER)
        forgotten = _value(await host.call(FORGET, forget_args, confirmation=token))
        assert forgotten["replayed"] is True

        get_args = {"record_id": record_id, "purpose_ref": ALICE.purpose_ref}
        assert _error(await host.call("engram_memory_get", get_args)) == ("NOT_FOUND", False)

    # The stdio server has exited with its client: read what it committed.
    journal = _journal(data_dir)
    assert [op for op, _, _ in journal] == ["capture", "accept", "tombstone"]
    assert journal[0][1:] == (captured["cursor"], captured["candidate_id"])
    assert journal[2][1:] == (forgotten["receipt"]["cursor"], record_id)
