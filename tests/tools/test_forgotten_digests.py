"""Issue 9 item 7: once forgotten or withdrawn, an item's rows keep only keyed forms of its
content digests, the tombstoned-content guard (SPEC §4.4 step 4) still holds by comparing
keyed forms, and live rows keep their plain, reference-compatible digests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.digests import record_id_for
from engram_memory.core.forgotten import KEYED_PREFIX, key_forgotten_rows, keyed_form
from engram_memory.core.runtime import Services
from tests.harness import Caller
from tests.tools.test_tool_rules import CAPTURE, _key, admit, forget, value, withdraw

SCOPE = "tenant:acme/workspace:support"
DIGESTS = "payload_digest, guard_digest, record_digest"


def _record_digests(services: Services, record_id: str) -> tuple[str, str, str]:
    with services.database.reading() as tx:
        row = tx.fetchone(f"SELECT {DIGESTS} FROM records WHERE record_id = ?", [record_id])  # noqa: S608
    assert row is not None
    return (str(row[0]), str(row[1]), str(row[2]))


def _candidate_digests(services: Services, candidate_id: str) -> tuple[str, str, str]:
    with services.database.reading() as tx:
        row = tx.fetchone(
            f"SELECT {DIGESTS} FROM candidates WHERE candidate_id = ?",  # noqa: S608
            [candidate_id],
        )
    assert row is not None
    return (str(row[0]), str(row[1]), str(row[2]))


def _forgotten(alice: Caller, args: dict[str, Any]) -> tuple[str, str]:
    """Capture, admit and forget `args`; returns (candidate_id, record_id)."""
    candidate_id = value(alice.call(CAPTURE, args))["candidate_id"]
    record_id = value(admit(alice, candidate_id))["outcome"]["record_id"]
    value(forget(alice, record_id))
    return candidate_id, record_id


def _admitted_status(alice: Caller, args: dict[str, Any]) -> str:
    again = value(alice.call(CAPTURE, {**args, "idempotency_key": _key()}))
    status: str = value(admit(alice, again["candidate_id"]))["outcome"]["status"]
    return status


def test_a_forgotten_record_and_its_candidate_keep_only_keyed_digests(
    alice: Caller, services: Services
) -> None:
    args = demo_capture_arguments("Forgotten refund note.", _key())
    candidate_id = value(alice.call(CAPTURE, args))["candidate_id"]
    record_id = value(admit(alice, candidate_id))["outcome"]["record_id"]
    plain = _record_digests(services, record_id)
    assert record_id_for(plain[2]) == record_id  # live: the reference-compatible digests
    value(forget(alice, record_id))
    keyed = _record_digests(services, record_id)
    assert all(form.startswith(KEYED_PREFIX) for form in keyed)
    assert not set(keyed) & set(plain)
    assert _candidate_digests(services, candidate_id) == keyed


def test_a_withdrawn_candidate_keeps_only_keyed_digests(alice: Caller, services: Services) -> None:
    args = demo_capture_arguments("Withdrawn note.", _key())
    candidate_id = value(alice.call(CAPTURE, args))["candidate_id"]
    plain = _candidate_digests(services, candidate_id)
    value(withdraw(alice, candidate_id))
    keyed = _candidate_digests(services, candidate_id)
    assert all(form.startswith(KEYED_PREFIX) for form in keyed)
    assert not set(keyed) & set(plain)


def test_a_recapture_of_forgotten_content_is_still_held_and_unrelated_content_accepted(
    alice: Caller,
) -> None:
    args = demo_capture_arguments("Forgotten, then captured again.", _key())
    _forgotten(alice, args)
    assert _admitted_status(alice, args) == "pending_adjudication"
    unrelated = demo_capture_arguments("Unrelated content.", _key())
    assert _admitted_status(alice, unrelated) == "accepted"


def test_the_guard_digest_alone_still_holds_content_with_another_retention(
    alice: Caller,
) -> None:
    args = demo_capture_arguments("Same content, another retention.", _key())
    _forgotten(alice, args)
    retained = copy.deepcopy(args)
    retained["payload"]["retention"] = {"derivative_rule": "retain"}  # another payload digest
    assert _admitted_status(alice, retained) == "pending_adjudication"


def test_one_digest_keys_to_unrelated_forms_in_two_scopes_and_after_a_root_rotation(
    services: Services,
) -> None:
    plain = "sha256:" + "c" * 64
    root = services.root_key
    here = keyed_form(root.forgotten_digest_key(SCOPE), plain)
    there = keyed_form(root.forgotten_digest_key("tenant:globex/workspace:main"), plain)
    assert here != there
    # The key derives from the stable index root: a root rotation must not strand the guard.
    assert keyed_form(root.rotated().forgotten_digest_key(SCOPE), plain) == here


def test_rows_forgotten_by_an_earlier_build_are_keyed_at_start_and_still_guard(
    alice: Caller, services: Services
) -> None:
    args = demo_capture_arguments("Forgotten before the upgrade.", _key())
    candidate_id = value(alice.call(CAPTURE, args))["candidate_id"]
    plain = _candidate_digests(services, candidate_id)
    record_id = value(admit(alice, candidate_id))["outcome"]["record_id"]
    value(forget(alice, record_id))
    keyed = _record_digests(services, record_id)
    with services.database.transaction() as tx:  # what an earlier build left
        for table in ("records", "candidates"):
            tx.execute(
                f"UPDATE {table} SET payload_digest = ?, guard_digest = ?, record_digest = ? "  # noqa: S608
                "WHERE record_id = ?",
                [*plain, record_id],
            )
    assert key_forgotten_rows(services.database, services.root_key) == 2
    assert key_forgotten_rows(services.database, services.root_key) == 0
    assert _record_digests(services, record_id) == keyed
    assert _candidate_digests(services, candidate_id) == keyed
    assert _admitted_status(alice, args) == "pending_adjudication"


@pytest.mark.parametrize("digest", ["sha256:" + "a" * 64, KEYED_PREFIX + "b" * 64])
def test_keying_is_idempotent(digest: str) -> None:
    once = keyed_form(b"k" * 32, digest)
    assert keyed_form(b"k" * 32, once) == once
    assert once.startswith(KEYED_PREFIX)
