"""A hostile agent captures every disguised secret of the corpus through the real server.

Over stdio, against `python -m engram_memory.cli serve` with the shipped Acme policy (whose
tenant adds the `ACME-DAC-…` shape), the MCP SDK client sends each capture of
tests/assets/secrets/disguises.json: homoglyphs, encodings, splits across components and
locators, shape misses, tenant patterns with other separators. Each one is answered
`INVALID_SCHEMA` (SPEC §11), and once the server has stopped the store holds exactly the
ordinary captures the same client made in between: no candidate, journal event or
idempotency entry of any refused capture, and the refusals are in the audit trail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.reference_host import CallOutcome
from engram_memory.store.database import Database
from tests.adversarial.refusal_support import ALICE, Store, bound_refusals
from tests.contract.secret_corpus import capture_arguments, disguises, ordinary

pytestmark = pytest.mark.e2e
CAPTURE = "engram_memory_capture"
BURST = 3
ORDINARY_LANGUAGES = ("en", "de", "ru", "ja", "ar")


def _code(outcome: CallOutcome) -> str:
    assert outcome.envelope["ok"] is False, outcome.envelope
    assert outcome.is_error is True
    code: str = outcome.envelope["error"]["code"]
    return code


def _rows(data_dir: Path, table: str) -> int:
    database = Database.open(data_dir)
    try:
        with database.reading() as tx:
            row = tx.fetchone(f"SELECT count(*) FROM {table}")  # noqa: S608 - constant names
    finally:
        database.close()
    assert row is not None
    return int(row[0])


async def test_every_disguised_secret_is_refused_by_the_real_server_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    store = Store.create(tmp_path, ENGRAM_REFUSAL_BURST=str(BURST))
    attacks = disguises()
    plain = [next(s for s in ordinary() if s.family == lang) for lang in ORDINARY_LANGUAGES]
    refused: dict[str, str] = {}
    served = 0
    with store.serving("stdio") as server:
        async with store.host(server) as host:
            for index, sample in enumerate(attacks):
                args = capture_arguments(sample, f"disguise-{index:04d}-key", ALICE.purpose_ref)
                refused[sample.sample_id] = _code(await host.call(CAPTURE, args))
                if index % 20 == 0:  # the same client is still served between attacks
                    legit = plain[served % len(plain)]
                    key = f"ordinary-capture-{served:04d}"
                    outcome = await host.call(
                        CAPTURE, capture_arguments(legit, key, ALICE.purpose_ref)
                    )
                    assert outcome.envelope["ok"] is True, outcome.envelope
                    value: dict[str, Any] = outcome.envelope["output"]["value"]
                    assert value["status"] == "committed_pending"
                    served += 1
    assert refused == {sample.sample_id: "INVALID_SCHEMA" for sample in attacks}
    # Exactly the ordinary captures were stored (one candidate, event and key each).
    assert served == len(range(0, len(attacks), 20))
    assert _rows(store.data_dir, "candidates") == served
    assert _rows(store.data_dir, "journal_events") == served
    assert _rows(store.data_dir, "idempotency") == served
    entries, refusals = bound_refusals(store.data_dir, "INVALID_SCHEMA", CAPTURE)
    assert (entries, refusals) == (BURST + 1, len(attacks))
