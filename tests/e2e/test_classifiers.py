"""Content classifiers end to end (issue 22 item 1): the shipped acme `accounts` workspace
holds for adjudication every capture whose content mentions a customer or carries a valid
IBAN, and accepts the rest. The service runs the classifiers on the plaintext; only the
NAMES reach the policy. Real server over streamable HTTP, real MCP SDK client, the real OPA
server with its decision logs on the console, a real DuckDB file; the test then scans the
decision logs, every text column of every table, the whole store directory and the
service's stderr for the content: it is nowhere. Search and get classify each record they
return: a support advisor reads a record about a customer without its components and
citations, the rest in full, in both engines."""

from __future__ import annotations

import json
import secrets
import uuid
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest
from stdnum import iban as stdnum_iban

from engram_memory.client.reference_host import connect
from engram_memory.contract.classifiers import Classifier
from engram_memory.host.keys import HostSigningKey
from engram_memory.policy.authoring.default_bundle import default_bundle_dir
from engram_memory.policy.opa_server import start_opa_server
from engram_memory.store.connection import DATABASE_FILE
from tests.cli_runner import run_cli
from tests.e2e.conftest import ALICE, Deployment
from tests.e2e.test_governed_session import _admit, _capture, _get, _search, _value
from tests.servers import http_server, server_env

pytestmark = pytest.mark.e2e

ACCOUNTS = replace(ALICE, workspace="accounts")
ADVISOR = replace(ACCOUNTS, principal="user:zoe", groups=("group:support-advisors",))
CUSTOMER_ONLY_FIELDS = {"/citations", "/components"}
_TEXT_TYPES = ("VARCHAR", "JSON", "BLOB")


def _marker_iban() -> str:
    """A German IBAN no other test uses, with a valid mod-97 checksum, grouped by four, in
    which the service's card detector sees no card (about one random BBAN in ten holds a
    Luhn-valid run with an issuer prefix: the test then saw a `payment-card` it never planted)."""
    card = Classifier.compile({"name": "payment-card", "detector": "payment_card"})
    while True:
        bban = "".join(str(secrets.randbelow(10)) for _ in range(18))
        compact = f"DE{stdnum_iban.calc_check_digits('DE00' + bban)}{bban}"
        assert stdnum_iban.is_valid(compact)
        grouped = stdnum_iban.format(compact)
        if not card.matches(grouped):
            return grouped


def _text_values(database: Path) -> list[str]:
    """Every value of every text-like column of every table of the store, as text."""
    values: list[str] = []
    with duckdb.connect(str(database), read_only=True) as con:
        columns = con.execute(
            "SELECT table_schema, table_name, column_name FROM information_schema.columns"
            " WHERE data_type IN (?, ?, ?) AND table_schema NOT IN ('information_schema',"
            " 'pg_catalog')",
            list(_TEXT_TYPES),
        ).fetchall()
        assert columns, "the store has text columns"
        for schema, table, column in columns:
            rows = con.execute(f'SELECT "{column}" FROM "{schema}"."{table}"').fetchall()  # noqa: S608 - names from the catalog
            for (value,) in rows:
                if isinstance(value, bytes):
                    values.append(value.decode("latin-1"))
                elif value is not None:
                    values.append(str(value))
    return values


@pytest.mark.opa
async def test_a_customer_mention_is_held_and_nothing_of_the_text_leaves_the_process(
    tmp_path: Path, host_secrets: tuple[Path, Path, Path]
) -> None:
    marker = f"marker{uuid.uuid4().hex}"
    iban = _marker_iban()
    held_text = f"The customer {marker} asked to pay from {iban}."
    plain_text = f"Refund approved for parcel {marker}x after courier loss."
    root_key, signing_key, public_keys = host_secrets
    data_dir, decision_log, stderr_log = tmp_path / "data", tmp_path / "opa.log", tmp_path / "err"
    env = server_env(data_dir, root_key, public_keys)
    signer = HostSigningKey.from_pem_file(signing_key)
    bundle = default_bundle_dir() / "bundle.tar.gz"
    with (
        start_opa_server(bundle, decision_log=decision_log) as opa_url,
        stderr_log.open("wb") as stderr,
    ):
        env["ENGRAM_POLICY"] = opa_url
        with http_server(env, stderr=stderr) as (_process, url):
            async with connect(url, signer, ACCOUNTS) as host:
                held = await _capture(host, held_text)
                held_outcome = (await _admit(host, held["candidate_id"]))["outcome"]
                plain = await _capture(host, plain_text)
                plain_outcome = (await _admit(host, plain["candidate_id"]))["outcome"]
            # A read classifies the record it returns: the names reach the policy, the
            # text does not (the scans below cover the reads' decisions too).
            async with connect(url, signer, ADVISOR) as reader:
                read = _value(await _get(reader, str(plain_outcome["record_id"])))
                found = await _search(reader, marker + "x")

    assert held_outcome["status"] == "pending_adjudication"
    assert plain_outcome["status"] == "accepted"
    assert read["record"]["components"]
    assert [p["record"]["record_id"] for p in found] == [plain_outcome["record_id"]]

    # The decision logs were written, and they carry the names: the policy saw the facts.
    logged = decision_log.read_text("utf-8")
    decisions = [json.loads(line) for line in logged.splitlines() if '"decision_id"' in line]
    admissions = [d for d in decisions if d.get("path") == "engram/admission/decision"]
    assert [d["input"].get("classifiers") for d in admissions] == [
        {"decision": ["customer", "iban"], "primary": ["customer", "iban"]},
        {},
    ]
    assert [d["result"]["decision"] for d in admissions] == ["adjudication_required", "accept"]
    reads = [
        d["input"]["classifiers"]
        for d in decisions
        if d.get("path") == "engram/authz/decision"
        and d["input"]["tool"] in {"engram_memory_get", "engram_memory_search"}
    ]
    assert reads == [{}, {}]  # one decision each: the record matched nothing

    compact = iban.replace(" ", "")
    needles = [marker, compact, iban, compact[4:], iban[5:]]
    sources = {
        "OPA decision log": logged,
        "service stderr": stderr_log.read_text("utf-8", "replace"),
        "store text columns": "\n".join(_text_values(data_dir / DATABASE_FILE)),
    }
    for path in data_dir.rglob("*"):
        if path.is_file():
            sources[f"store file {path.name}"] = path.read_bytes().decode("latin-1")
    leaks = [(where, n) for where, text in sources.items() for n in needles if n in text]
    assert leaks == []


@pytest.mark.parametrize("deployment", ["stdio-embedded", "http-opa"], indirect=True)
async def test_both_engines_hold_a_customer_mention_and_accept_the_rest(
    deployment: Deployment,
) -> None:
    async with deployment.host(ACCOUNTS) as host:
        outcomes = []
        for text in (
            f"Kundin {uuid.uuid4().hex} bittet um Rückruf.",  # the German term, any case
            f"Card {uuid.uuid4().hex[:6]}: 4111 1111 1111 1111 refunded.",  # a valid card
            # A longer word holding a term, and a card number failing Luhn: no match.
            f"Parcel {uuid.uuid4().hex}: Kundennummer and 4111 1111 1111 1112 unchanged.",
        ):
            captured = await _capture(host, text)
            outcomes.append((await _admit(host, captured["candidate_id"]))["outcome"]["status"])
    assert outcomes == ["pending_adjudication", "pending_adjudication", "accepted"]


def _adjudicate_accept(deployment: Deployment, candidate_id: str) -> str:
    """Dana, the accounts workspace's maintenance operator, accepts a held candidate."""
    who = ["--tenant", "acme", "--workspace", "accounts", "--operator", "human:dana"]
    done = run_cli(
        deployment.env,
        "admin",
        *who,
        "adjudicate",
        candidate_id,
        "--decision",
        "accept",
        "--reason",
        "reason:e2e",
    )
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["value"]["record_id"])


@pytest.mark.parametrize("deployment", ["stdio-embedded", "http-opa"], indirect=True)
async def test_both_engines_redact_a_record_about_a_customer_for_an_advisor(
    deployment: Deployment,
) -> None:
    word = f"parcel{uuid.uuid4().hex[:8]}"
    async with deployment.host(ACCOUNTS) as host:
        held = await _capture(host, f"The client asked about {word} twice.")
        assert (await _admit(host, held["candidate_id"]))["outcome"]["status"] == (
            "pending_adjudication"
        )
        plain = await _capture(host, f"The depot lost {word} in transit.")
        plain_outcome = (await _admit(host, plain["candidate_id"]))["outcome"]
    customer_id = _adjudicate_accept(deployment, held["candidate_id"])
    plain_id = str(plain_outcome["record_id"])

    async with deployment.host(ADVISOR) as reader:
        customer = _value(await _get(reader, customer_id))
        unmatched = _value(await _get(reader, plain_id))
        page = {p["record"]["record_id"]: p for p in await _search(reader, word)}
    assert set(customer["redacted_fields"]) >= CUSTOMER_ONLY_FIELDS
    assert "components" not in customer["record"]
    assert customer["record"]["record_digest"]  # what the rule allows is still there
    assert not CUSTOMER_ONLY_FIELDS & set(unmatched["redacted_fields"])
    assert unmatched["record"]["components"]
    assert set(page) == {customer_id, plain_id}
    assert set(page[customer_id]["redacted_fields"]) >= CUSTOMER_ONLY_FIELDS
    assert not CUSTOMER_ONLY_FIELDS & set(page[plain_id]["redacted_fields"])
