"""Issue 3, rule 2 — the confirmation gate (SPEC §7), at the tool level.

Each check of a confirmation gets its own failing case; every failing case must leave the
state unchanged and the confirmation unspent. Token-level unit tests of the same checks live
in tests/host/test_tokens.py (see tests/RULES.md).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.contract.canonical import normalize
from engram_memory.contract.digests import operation_digest
from engram_memory.contract.errors import ProtocolCode
from engram_memory.contract.exceptions import ProtocolRefusal
from engram_memory.core.runtime import Services, ServiceSettings
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.host.confirmation import (
    CONFIRMATION_TYP,
    ConfirmationBinding,
    mint_confirmation,
)
from engram_memory.host.keys import HostKeyring, HostSigningKey
from engram_memory.host.tokens import sign
from engram_memory.policy.decider import PolicyDecider
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.store.database import Database
from engram_memory.tools.dispatch import MemoryService
from tests.harness import SIGNER, Caller, _clock, error_of, fresh_key, ok_value
from tests.rules.steps import (
    ADMIT,
    CAPTURE,
    FORGET,
    GET,
    WITHDRAW,
    Clock,
    ClockedCaller,
    capture_op,
    count_rows,
    get_args,
)
from tests.tools.test_tool_rules import accepted_record, capture, high_water

APPROVER = "human:dana"


def _forget_args(record_id: str) -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": fresh_key("f"), "reason_ref": "reason:r"}


def _binding(caller: Caller, args: dict[str, Any], **changes: str) -> ConfirmationBinding:
    fields = {
        "cap": FORGET,
        "target": args["record_id"],
        "op": operation_digest(FORGET, normalize(args)),
        "session": caller.session,
        "principal": caller.principal,
        **changes,
    }
    return ConfirmationBinding(**fields)


Mint = Callable[[Caller, dict[str, Any], int], str]


def _minted(
    *,
    signer: HostSigningKey = SIGNER,
    approver: str = APPROVER,
    iat_ago: int = 0,
    resolved_ago: int | None = None,
    lifetime: int = 120,
    **changes: str,
) -> Mint:
    def mint(caller: Caller, args: dict[str, Any], now_s: int) -> str:
        return mint_confirmation(
            signer,
            _binding(caller, args, **changes),
            approver=approver,
            now_s=now_s - iat_ago,
            resolved_at_s=None if resolved_ago is None else now_s - resolved_ago,
            lifetime_s=lifetime,
        )

    return mint


def _without_resolved_at(caller: Caller, args: dict[str, Any], now_s: int) -> str:
    binding = _binding(caller, args)
    claims = {**binding.__dict__, "approver": APPROVER, "iat": now_s, "exp": now_s + 60}
    return sign({**claims, "jti": uuid.uuid4().hex}, SIGNER, CONFIRMATION_TYP)


DEFECTIVE: dict[str, Mint] = {
    "signature_of_an_untrusted_key": _minted(signer=HostSigningKey.generate()),
    "cap_of_another_tool": _minted(cap=WITHDRAW),
    "target_of_another_record": _minted(target="mem_" + "a" * 52),
    "op_digest_of_other_arguments": _minted(op="sha256:" + "0" * 64),
    "session_of_another_session": _minted(session="session:other"),
    "principal_of_another_principal": _minted(principal="user:dave"),
    "approver_not_human": _minted(approver="agent:assistant"),
    "approver_self_declared_delegate": _minted(approver="delegate:human:dana"),
    "ttl_longer_than_policy_allows": _minted(lifetime=121),  # acme: ttl_seconds 120
    "ttl_expired_since_creation": _minted(iat_ago=100, resolved_ago=10, lifetime=90),
    "execution_more_than_30_s_after_resolution": _minted(iat_ago=40, resolved_ago=31),
    "resolved_at_in_the_future": _minted(resolved_ago=-60),
    "resolved_at_missing": _without_resolved_at,
}


@pytest.fixture
def whole_second(clock: Clock) -> int:
    """Pin the clock to a whole second so the 30 s / TTL edges are exact."""
    clock.now_ms -= clock.now_ms % 1000
    return clock.now_ms // 1000


@pytest.mark.parametrize("defect", list(DEFECTIVE))
def test_gate_failed_for_each_failing_confirmation_check_and_state_unchanged(
    timed_alice: ClockedCaller, services: Services, whole_second: int, defect: str
) -> None:
    record_id = accepted_record(timed_alice)
    args = _forget_args(record_id)
    cursor, spent = high_water(services), count_rows(services, "consumed_confirmations")

    token = DEFECTIVE[defect](timed_alice, args, whole_second)
    assert error_of(timed_alice.call(FORGET, args, token)) == ("gate_failed", False)

    assert high_water(services) == cursor
    assert count_rows(services, "consumed_confirmations") == spent
    assert ok_value(timed_alice.call(GET, get_args(timed_alice, record_id)))


@pytest.mark.parametrize(
    "edge",
    [
        _minted(lifetime=120),  # exactly the policy TTL
        _minted(iat_ago=30, resolved_ago=30),  # execution exactly 30 s after resolution
    ],
    ids=["ttl_equal_to_policy_ttl", "execution_exactly_30_s_after_resolution"],
)
def test_gate_passes_a_valid_confirmation_at_the_edges(
    timed_alice: ClockedCaller, whole_second: int, edge: Mint
) -> None:
    record_id = accepted_record(timed_alice)
    args = _forget_args(record_id)
    forgotten = ok_value(timed_alice.call(FORGET, args, edge(timed_alice, args, whole_second)))
    assert forgotten["receipt"]["to_state"] == "tombstoned"


def test_gate_ttl_is_at_most_300_s_where_policy_sets_no_ttl(
    timed_alice: ClockedCaller, whole_second: int
) -> None:
    carol = timed_alice.as_(tenant="globex", workspace="main", principal="user:carol")
    first, second = accepted_record(carol, "One."), accepted_record(carol, "Two.")
    too_long = _forget_args(first)
    token = _minted(lifetime=301)(carol, too_long, whole_second)
    assert error_of(carol.call(FORGET, too_long, token)) == ("gate_failed", False)
    assert ok_value(carol.call(GET, get_args(carol, first)))

    longest = _forget_args(second)
    token = _minted(lifetime=300)(carol, longest, whole_second)
    assert ok_value(carol.call(FORGET, longest, token))["receipt"]["to_state"] == "tombstoned"


def test_gate_missing_confirmation_for_forget_is_json_rpc_32603_and_changes_nothing(
    alice: Caller, services: Services
) -> None:
    record_id = accepted_record(alice)
    cursor = high_water(services)
    with pytest.raises(ProtocolRefusal) as refused:
        alice.call(FORGET, _forget_args(record_id))
    assert refused.value.code is ProtocolCode.CONTEXT_UNAVAILABLE
    assert refused.value.code.rpc_code == -32603
    assert high_water(services) == cursor
    assert ok_value(alice.call(GET, get_args(alice, record_id)))


def test_gate_capture_and_admission_need_confirmation_where_policy_selects_it(
    alice: Caller, services: Services
) -> None:
    dave = alice.as_(principal="user:dave")  # acme: captures and admissions by dave confirmed
    args = demo_capture_arguments("Proposed by a contributor.", fresh_key("dave"))
    with pytest.raises(ProtocolRefusal) as refused:
        dave.call(CAPTURE, args)
    assert refused.value.code is ProtocolCode.CONTEXT_UNAVAILABLE
    assert high_water(services) == 0

    wrong_target = dave.confirm(CAPTURE, args, "sha256:" + "0" * 64)
    assert error_of(dave.call(CAPTURE, args, wrong_target)) == ("gate_failed", False)
    op = capture_op(args)  # a capture confirmation's target is its operation digest
    candidate_id = ok_value(dave.call(CAPTURE, args, dave.confirm(CAPTURE, args, op)))[
        "candidate_id"
    ]

    admit_args = {"candidate_id": candidate_id, "idempotency_key": fresh_key("a")}
    with pytest.raises(ProtocolRefusal):
        dave.call(ADMIT, admit_args)
    assert high_water(services) == 1
    confirmed = dave.confirm(ADMIT, admit_args, candidate_id)
    assert ok_value(dave.call(ADMIT, admit_args, confirmed))["outcome"]["status"] == "accepted"

    # Where policy does not select it (alice, a steward), no confirmation is needed.
    assert ok_value(alice.call(CAPTURE, demo_capture_arguments("Steward.", fresh_key())))


def test_gate_consumes_the_confirmation_whatever_the_outcome(alice: Caller) -> None:
    # The gate passes, then the call fails (unknown record): the jti is spent anyway.
    args = _forget_args("mem_" + "b" * 52)
    token = alice.confirm(FORGET, args, args["record_id"])
    assert error_of(alice.call(FORGET, args, token)) == ("NOT_FOUND", False)
    assert error_of(alice.call(FORGET, args, token)) == ("gate_failed", False)


def test_gate_single_use_jti_is_persisted_across_a_restart(
    tmp_path: Path, engine: EmbeddedWasmEngine
) -> None:
    root_key, data = RootKey(os.urandom(32)), tmp_path / "data"

    def service(database: Database) -> Caller:
        return Caller(
            MemoryService(
                Services(
                    database=database,
                    keys=KeyStore(data / KEYS_DIRECTORY),
                    decider=PolicyDecider(engine, engine.identity, _clock),
                    root_key=root_key,
                    host_keys=HostKeyring({SIGNER.kid: SIGNER.private_key.public_key()}),
                    settings=ServiceSettings(host_memory_enabled=True),
                )
            )
        )

    database = Database.open(data)
    try:
        before = service(database)
        candidate_id = capture(before, "Withdrawn across a restart.")["candidate_id"]
        args = {"candidate_id": candidate_id, "idempotency_key": fresh_key(), "reason_ref": "r:x"}
        token = before.confirm(WITHDRAW, args, candidate_id)
        assert ok_value(before.call(WITHDRAW, args, token))["receipt"]["to_state"] == "withdrawn"
    finally:
        database.close()

    database = Database.open(data)
    try:
        # Same key and arguments: a replay, which must still pass the gate (SPEC §6).
        after = service(database)
        assert error_of(after.call(WITHDRAW, args, token)) == ("gate_failed", False)
        fresh = after.confirm(WITHDRAW, args, candidate_id)
        assert ok_value(after.call(WITHDRAW, args, fresh))["replayed"] is True
    finally:
        database.close()


@pytest.mark.parametrize("tool", [FORGET, CAPTURE])
def test_gate_model_written_confirmed_true_is_invalid_schema(
    alice: Caller, services: Services, tool: str
) -> None:
    if tool == FORGET:
        record_id = accepted_record(alice)
        caller, args = alice, {**_forget_args(record_id), "confirmed": True}
    else:  # dave's captures need a confirmation: `confirmed: true` is no substitute
        caller = alice.as_(principal="user:dave")
        args = {**demo_capture_arguments("Self-confirmed.", fresh_key()), "confirmed": True}
    cursor = high_water(services)
    # No host confirmation at all: schema validation (before the gate) refuses the field.
    assert error_of(caller.call(tool, args)) == ("INVALID_SCHEMA", False)
    assert high_water(services) == cursor


def test_gate_failed_for_a_resolution_timestamp_even_seconds_in_the_future(
    timed_alice: ClockedCaller, services: Services, whole_second: int
) -> None:
    record_id = accepted_record(timed_alice)
    args = _forget_args(record_id)
    token = _minted(iat_ago=-3, resolved_ago=-3)(timed_alice, args, whole_second)
    assert error_of(timed_alice.call(FORGET, args, token)) == ("gate_failed", False)
    assert ok_value(timed_alice.call(GET, get_args(timed_alice, record_id)))
