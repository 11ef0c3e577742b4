"""Key rotation on a live in-process service: items keep opening, search and cursors keep
working, destroyed keys stay destroyed, old wrapped bytes are gone, refusals are audited."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin.maintenance import MaintenanceService, Operator
from engram_memory.admin.rotation import RotationService
from engram_memory.contract.exceptions import ConfigurationError, KeyStoreUnavailable, ToolError
from engram_memory.core.runtime import Services
from engram_memory.crypto import keyfile, rotation
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import LOCK_FILE, replace_and_shred_old
from tests.harness import Caller
from tests.tools.test_tool_rules import accepted_record, capture, code, forget, value

DANA = Operator("acme", "support", "human:dana")  # read + maintain
ERIN = Operator("acme", "support", "human:erin")  # read only
SCOPE = "tenant:acme/workspace:support"


def _key_files(services: Services) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(services.keys.directory.rglob("*.key"))}


def _files_holding(services: Services, needle: bytes) -> list[str]:
    services.database.checkpoint()
    root = services.keys.directory.parent
    return [p.name for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def _get(caller: Caller, record_id: str) -> dict[str, Any]:
    return caller.call(
        "engram_memory_get", {"record_id": record_id, "purpose_ref": caller.purpose_ref}
    )


def _search(caller: Caller, query: str, **extra: Any) -> dict[str, Any]:
    return caller.call(
        "engram_memory_search", {"query": query, "purpose_ref": caller.purpose_ref, **extra}
    )


def _audit_outcomes(services: Services, tool: str) -> list[str]:
    with services.database.transaction() as tx:
        rows = tx.fetchall(
            "SELECT outcome FROM audit_entries WHERE tool = ? ORDER BY sequence", [tool]
        )
    return [str(row[0]) for row in rows]


def test_scope_rotation_rewraps_every_key_and_every_item_still_opens(
    alice: Caller, services: Services
) -> None:
    records = [accepted_record(alice, f"Rotation keeps record {i} readable.") for i in range(3)]
    pending = capture(alice, "Pending through rotation.", evidence_ref="evidence:review/1")
    before = _key_files(services)
    lines: list[str] = []

    result = RotationService(services).rotate_scope_key(DANA, lines.append)

    assert result["complete"] is True
    assert result["epoch"] == 1
    assert result["rewrapped"] == len(before)
    assert any("key files" in line for line in lines)  # progress is reported
    for record_id in records:
        assert value(_get(alice, record_id))["record"]["record_id"] == record_id
    shown = MaintenanceService(services).inspect_candidate(
        DANA, pending["candidate_id"], show_content=True
    )
    assert "envelope" in shown
    for blob in _key_files(services).values():
        assert keyfile.read_header(blob).epoch == 1
    for old in before.values():
        assert _files_holding(services, old) == []
    assert _audit_outcomes(services, "admin:rotate_scope_key") == ["ok"]


def test_root_rotation_keeps_search_and_page_cursors_working(
    alice: Caller, services: Services
) -> None:
    records = [accepted_record(alice, f"Refund approved for order {i}.") for i in range(3)]
    first = value(_search(alice, "refund", limit=1))
    assert "next_page_cursor" in first
    old_root = services.root_key
    before = _key_files(services)
    new_root = old_root.rotated()

    result = RotationService(services).rotate_root_key(DANA, new_root, lambda _: None)

    assert result["complete"] is True
    assert services.root_key is new_root
    second = value(
        _search(alice, "refund", limit=1, page_cursor=first["next_page_cursor"])
    )  # a cursor issued before the rotation continues
    assert second["records"]
    assert len(value(_search(alice, "refund"))["records"]) == len(records)
    for record_id in records:
        assert value(_get(alice, record_id))
    for blob in _key_files(services).values():
        assert keyfile.read_header(blob).root_id == new_root.key_id
    for old in before.values():
        assert _files_holding(services, old) == []
    later = accepted_record(alice, "Captured after the root rotation.")
    services.root_key = new_root.without_previous()  # the old root is retired
    assert value(_get(alice, later))
    assert value(_get(alice, records[0]))


def test_a_key_destroyed_during_rotation_is_never_recreated(
    alice: Caller, services: Services
) -> None:
    records = [accepted_record(alice, f"Shred during rotation {i}.") for i in range(4)]
    by_shard = sorted(records, key=lambda r: services.keys.path_for(SCOPE, r).parent.name)
    swept_first, swept_last = by_shard[0], by_shard[-1]
    old = {r: services.keys.get(SCOPE, r) for r in records}
    forgotten: list[str] = []

    def progress(line: str) -> None:
        # Called between batches, with no shard lock held: the service runs meanwhile.
        if "key files 1/" in line:
            for record_id in (swept_first, swept_last):  # one re-wrapped, one not yet
                assert value(forget(alice, record_id))["projection_invalidation"] == "complete"
                forgotten.append(record_id)

    result = RotationService(services).rotate_scope_key(DANA, progress)

    assert forgotten == [swept_first, swept_last]
    assert result["complete"] is True
    for record_id in forgotten:
        assert services.keys.get(SCOPE, record_id) is None
        assert code(_get(alice, record_id)) == "NOT_FOUND"
        blob = old[record_id]
        assert blob is not None
        assert _files_holding(services, blob) == []
    for record_id in set(records) - set(forgotten):
        assert value(_get(alice, record_id))


def test_rotation_holds_the_shard_exclusively_while_it_replaces_a_key(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_id = accepted_record(alice, "Locked while re-wrapped.")
    path = services.keys.path_for(SCOPE, record_id)
    real = replace_and_shred_old
    probes: list[bool] = []

    def probing(target: Path, data: bytes) -> bool:
        fd = os.open(target.parent / LOCK_FILE, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # what destroy and get take
            probes.append(True)
        except BlockingIOError:
            probes.append(False)
        finally:
            os.close(fd)
        return real(target, data)

    monkeypatch.setattr(rotation, "replace_and_shred_old", probing)
    RotationService(services).rotate_scope_key(DANA, lambda _: None)
    assert probes == [False]  # a destroy had to wait for the replacement to finish
    assert services.keys.destroy(SCOPE, record_id)
    assert not path.exists()
    assert not replace_and_shred_old(path, b"resurrected?")
    assert not path.exists()


def test_an_interrupted_rotation_resumes_in_the_same_epoch(
    alice: Caller, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [accepted_record(alice, f"Interrupted rotation {i}.") for i in range(3)]
    real = replace_and_shred_old
    calls: list[Path] = []

    def crashing(target: Path, data: bytes) -> bool:
        calls.append(target)
        if len(calls) == 2:
            target.with_name(target.name + ".rot").write_bytes(data)  # a crash's leftover
            raise KeyStoreUnavailable("disk full")
        return real(target, data)

    monkeypatch.setattr(rotation, "replace_and_shred_old", crashing)
    with pytest.raises(ToolError) as failed:
        RotationService(services).rotate_scope_key(DANA, lambda _: None)
    assert failed.value.code.name == "STORE_UNAVAILABLE"
    for record_id in records:  # mixed epochs: the service reads both
        assert value(_get(alice, record_id))
    monkeypatch.setattr(rotation, "replace_and_shred_old", real)

    resumed = RotationService(services).rotate_scope_key(DANA, lambda _: None)

    assert resumed["resumed"] is True
    assert resumed["epoch"] == 1
    assert resumed["complete"] is True
    assert resumed["leftovers_shredded"] == 1
    assert not list(services.keys.directory.rglob("*.rot"))
    assert services.keys.read_state().pending == []
    assert _audit_outcomes(services, "admin:rotate_scope_key") == ["STORE_UNAVAILABLE", "ok"]


def test_a_tampered_key_header_is_blob_missing_and_keeps_the_rotation_pending(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice, "Tampered header.")
    path = services.keys.path_for(SCOPE, record_id)
    blob = bytearray(path.read_bytes())
    blob[15] ^= 0x01  # the epoch
    path.write_bytes(bytes(blob))
    assert code(_get(alice, record_id)) == "BLOB_MISSING"

    result = RotationService(services).rotate_scope_key(DANA, lambda _: None)

    assert result["complete"] is False
    assert result["unreadable"] == 1
    assert path.read_bytes() == bytes(blob)  # left for the operator, never "repaired"
    assert services.keys.read_state().pending


def test_an_operator_without_maintain_is_refused_and_audited(
    alice: Caller, services: Services
) -> None:
    accepted_record(alice, "Not rotated by a reader.")
    before = _key_files(services)
    with pytest.raises(ToolError) as refused:
        RotationService(services).rotate_scope_key(ERIN, lambda _: None)
    assert refused.value.code.name == "UNAUTHORIZED"
    assert _key_files(services) == before
    assert services.keys.read_state().epochs == {}
    assert _audit_outcomes(services, "admin:rotate_scope_key") == ["UNAUTHORIZED"]


def test_root_rotation_needs_maintain_in_every_scope_of_the_store(
    alice: Caller, services: Services
) -> None:
    accepted_record(alice, "One scope of two.")
    with services.database.transaction() as tx:
        tx.execute(
            "INSERT INTO journal_events VALUES (?, 1, 'e', 'capture', 't', '{}', 'h', 'h', 'i')",
            ["tenant:globex/workspace:main"],
        )
    old_root = services.root_key
    with pytest.raises(ToolError) as refused:
        RotationService(services).rotate_root_key(DANA, old_root.rotated(), lambda _: None)
    assert refused.value.code.name == "UNAUTHORIZED"
    assert services.root_key is old_root
    assert services.keys.read_state().root_id == old_root.key_id


def test_a_new_ring_without_the_store_root_or_index_root_is_refused(
    alice: Caller, services: Services
) -> None:
    accepted_record(alice, "Wrong rings.")
    stranger = RootKey(os.urandom(32), index_root=services.root_key.stable_index_root)
    other_index = RootKey(
        os.urandom(32), previous=(services.root_key.material,), index_root=os.urandom(32)
    )
    for ring in (stranger, other_index):
        with pytest.raises(ConfigurationError):
            RotationService(services).rotate_root_key(DANA, ring, lambda _: None)
    assert _audit_outcomes(services, "admin:rotate_root_key") == []
