"""`engram-memory import` leaves the state, journal and audit trail the tools leave.

The same corpus goes once through the six-tool service (capture, then request_admission with
the key the import derives) and once through the import, into two data directories, with
the same policy, binding and a frozen clock. Equal: candidate ids, states and payload
digests; records' states, cursors and payload digests; journal cursors, operations and
targets; every audit entry's tool, outcome, targets, idempotency key digest and the policy
paths of its receipts; `audit verify` on both.

Legitimately different: every receipt carries a random `decision_id`, so receipt digests
differ, and with them each record's `authorization_receipt_digest`, `record_digest`,
`record_id` and event hashes (records are therefore compared through their candidate id);
sealed bodies (fresh random keys); audit ids and `recorded_at`-independent entry hashes; and
the import's one extra `admin:import` entry naming the operator's run.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.maintenance import Operator
from engram_memory.admin.verification import verify_store
from engram_memory.bulk.importer import IMPORT_HOST, ImportBinding, admission_key_for
from engram_memory.cli.bulk_import import import_file, numbered_lines
from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.keys import HostKeyring
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import MemoryService
from tests.harness import SIGNER, Caller

CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
PURPOSE = "purpose:support-case"
FROZEN_MS = 1_790_000_000_000
SESSION = f"import:{uuid.uuid4().hex}"
# Both directories, and the rerun, under one root key.
ROOT = os.urandom(32)


def corpus() -> list[str]:
    """~20 lines: accepted, rejected and held captures, a duplicate, a conflicting reuse of
    a key, a never-store secret, a foreign purpose, a line that is not JSON, a blank line."""

    def line(text: str, key: str, evidence_ref: str = "evidence:ticket/T-1") -> str:
        arguments = demo_capture_arguments(text, key, evidence_ref=evidence_ref)
        arguments["payload"]["valid_time"] = {"t": FROZEN_MS - 60_000}
        arguments["payload"]["primary_event"]["at"] = FROZEN_MS - 60_000
        return json.dumps(arguments)

    lines = [
        line(f"Refund {n} approved for order {4700 + n}.", f"equivalence-{n:04d}")
        for n in range(12)
    ]
    lines.insert(
        3,
        line("Evidence from an untrusted source.", "equivalence-untrusted", "evidence:untrusted/x"),
    )
    lines.insert(5, line("Needs a human look.", "equivalence-held", "evidence:other/y"))
    lines.append(lines[0])  # the same capture again: replayed, never loaded twice
    lines.append(line("Other content under a used key.", "equivalence-0001"))  # DIGEST_CONFLICT
    lines.append(line("Password: hunter2-AKIAIOSFODNN7EXAMPLE", "equivalence-secret"))
    foreign = json.loads(line("Another purpose.", "equivalence-purpose"))
    foreign["payload"]["purpose_ref"] = "purpose:elsewhere"
    lines.append(json.dumps(foreign))
    lines.append("{not json")
    lines.append("")
    return lines


def _services(data_dir: Path, engine: EmbeddedWasmEngine, root: RootKey) -> Services:
    def frozen() -> int:
        return FROZEN_MS

    return Services(
        database=Database.open(data_dir),
        keys=KeyStore(data_dir / KEYS_DIRECTORY),
        decider=PolicyDecider(engine, engine.identity, frozen),
        root_key=root,
        host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
        settings=ServiceSettings(host_memory_enabled=True),
        clock_ms=frozen,
    )


def _through_tools(services: Services, lines: list[str]) -> None:
    caller = Caller(MemoryService(services), principal="user:alice", purpose_ref=PURPOSE)
    caller = replace(caller, session=SESSION)
    claims = {"host_id": IMPORT_HOST, "agent_id": IMPORT_HOST, "now_s": FROZEN_MS // 1000}
    for text in filter(None, (t.strip() for t in lines)):
        try:
            arguments: Any = json.loads(text)
        except ValueError:
            arguments = None
        try:
            envelope = caller.call(CAPTURE, arguments, **claims)
        except ProtocolRefusal:
            continue  # audited by the service; the agent sees a JSON-RPC error
        if not envelope["ok"]:
            continue
        admission = {
            "candidate_id": envelope["output"]["value"]["candidate_id"],
            "idempotency_key": admission_key_for(arguments["idempotency_key"]),
        }
        caller.call(ADMIT, admission, **claims)


def _state(data_dir: Path) -> dict[str, Any]:
    database = Database.open(data_dir, read_only=True)
    try:
        with database.reading() as tx:
            records = {
                str(row[0]): row[1:]
                for row in tx.fetchall(
                    "SELECT r.candidate_id, r.state, r.payload_digest, r.recorded_cursor,"
                    " r.accept_cursor, r.expires_at_ms FROM records r"
                )
            }
            record_candidate = dict(tx.fetchall("SELECT record_id, candidate_id FROM records"))
            paths = dict(tx.fetchall("SELECT receipt_digest, policy_path FROM decision_receipts"))

            def named(target: str) -> str:
                return (
                    "record-of:" + record_candidate[target]
                    if target in record_candidate
                    else target
                )

            audit = [
                (
                    tool,
                    outcome,
                    [named(t) for t in json.loads(targets)],
                    key_digest,
                    [paths[d] for d in json.loads(receipts)],
                )
                for tool, outcome, targets, key_digest, receipts in tx.fetchall(
                    "SELECT tool, outcome, target_ids_json, idempotency_key_digest,"
                    " receipt_digests_json FROM audit_entries WHERE tool NOT LIKE 'admin:%'"
                    " ORDER BY sequence"
                )
            ]
            return {
                "candidates": tx.fetchall(
                    "SELECT candidate_id, state, payload_digest, guard_digest, capture_cursor,"
                    " sealed_body IS NULL FROM candidates ORDER BY candidate_id"
                ),
                "records": records,
                "journal": [
                    (cursor, operation, named(target))
                    for cursor, operation, target in tx.fetchall(
                        "SELECT cursor, operation, target_id FROM journal_events ORDER BY cursor"
                    )
                ],
                "audit": audit,
                "postings": tx.fetchall("SELECT count(*) FROM lexical_postings"),
            }
    finally:
        database.close(checkpoint=False)


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory, engine: EmbeddedWasmEngine
) -> tuple[Path, Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("import-equivalence")
    root = RootKey(ROOT)
    lines = corpus()
    tools_dir, import_dir = base / "tools", base / "import"
    services = _services(tools_dir, engine, root)
    _through_tools(services, lines)
    services.database.close()
    source = base / "corpus.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    services = _services(import_dir, engine, root)
    binding = ImportBinding("acme", "support", "user:alice", PURPOSE, SESSION)
    who = Operator("acme", "support", "human:dana")
    summary = import_file(services, who, binding, source, batch=6)
    services.database.close()
    return tools_dir, import_dir, summary


def test_import_leaves_the_state_journal_and_audit_the_tools_leave(
    loaded: tuple[Path, Path, dict[str, Any]],
) -> None:
    tools_dir, import_dir, _ = loaded
    through_tools, through_import = _state(tools_dir), _state(import_dir)
    assert through_import == through_tools
    assert len(through_tools["records"]) == 12


def test_the_import_with_worker_processes_leaves_the_same_state_journal_and_audit(
    loaded: tuple[Path, Path, dict[str, Any]], engine: EmbeddedWasmEngine
) -> None:
    # The lines' own work in two spawned workers (bulk/pool.py), each with its own engine
    # loaded from the parent's bundle; the writes in this process, in line order.
    tools_dir, import_dir, summary = loaded
    pooled_dir = import_dir.parent / "pooled"
    services = _services(pooled_dir, engine, RootKey(ROOT))
    binding = ImportBinding("acme", "support", "user:alice", PURPOSE, SESSION)
    who = Operator("acme", "support", "human:dana")
    source = import_dir.parent / "corpus.jsonl"
    pooled = import_file(services, who, binding, source, batch=6, workers=2)
    services.database.close()
    assert pooled == summary
    assert _state(pooled_dir) == _state(tools_dir)
    assert verify_store(pooled_dir, None).entries == verify_store(tools_dir, None).entries + 1


def test_import_counts_every_line_by_outcome(loaded: tuple[Path, Path, dict[str, Any]]) -> None:
    _, _, summary = loaded
    assert summary == {
        "lines": 19,
        "accepted": 12,
        "rejected": 1,
        "pending_adjudication": 1,
        "replayed": 1,
        "DIGEST_CONFLICT": 1,
        "INVALID_SCHEMA": 2,
        "rpc:-32603": 1,
    }


def test_both_stores_verify(loaded: tuple[Path, Path, dict[str, Any]]) -> None:
    tools_dir, import_dir, _ = loaded
    tools, imported = verify_store(tools_dir, None), verify_store(import_dir, None)
    assert imported.events == tools.events > 0
    # One more entry: the operator's admin:import run.
    assert imported.entries == tools.entries + 1


def test_a_rerun_replays_every_line_and_loads_nothing_twice(
    loaded: tuple[Path, Path, dict[str, Any]], engine: EmbeddedWasmEngine
) -> None:
    _, import_dir, _ = loaded
    before = _state(import_dir)
    source = import_dir.parent / "corpus.jsonl"
    assert len(list(numbered_lines(source))) == 19
    services = _services(import_dir, engine, RootKey(ROOT))
    binding = ImportBinding("acme", "support", "user:alice", PURPOSE, SESSION)
    summary = import_file(services, Operator("acme", "support", "human:dana"), binding, source, 7)
    services.database.close()
    after = _state(import_dir)
    assert summary["replayed"] == 15  # every line that was loaded, the held one included
    assert after["records"] == before["records"]
    assert after["candidates"] == before["candidates"]
    assert after["journal"] == before["journal"]
    assert verify_store(import_dir, None).events == len(before["journal"])
