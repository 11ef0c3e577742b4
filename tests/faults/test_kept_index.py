"""The search index kept across a clean stop, on the real server over stdio (issue 20 item 8):
the stop keeps it (without the records forgotten meanwhile), the next start takes it and
answers searches exactly as a start that reads the store; a kept index with a flipped byte,
or none at all after a SIGKILL, changes no answer: the start reads the store instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram_memory.client.demo import demo_capture_arguments
from engram_memory.core.index_keeping import opened_index
from engram_memory.core.index_reading import index_fingerprint
from engram_memory.crypto.keys import RootKey
from engram_memory.search.embedding import EmbeddingModel, load_embedding_model
from engram_memory.store.database import Database
from engram_memory.store.kept_index import FILE_NAME
from tests.adversarial.evidence_support import (
    ALICE,
    Server,
    accepted,
    forget_args,
    real_server,
    value,
)
from tests.cli_runner import run_cli
from tests.faults.ops_support import StdioServer, invocation_meta

pytestmark = pytest.mark.e2e

SEARCH = "engram_memory_search"
QUERIES = ["parcel refund", "courier", "lost parcel approved"]


async def _answers(server: Server) -> list[Any]:
    """Every query's ranked record ids and scores, as an agent sees them."""
    answers = []
    async with server.host() as host:
        for query in QUERIES:
            found = value(
                await host.call(SEARCH, {"query": query, "purpose_ref": host.binding.purpose_ref})
            )
            answers.append([(p["record"]["record_id"], p.get("score")) for p in found["records"]])
    return answers


async def _stored(server: Server) -> tuple[list[str], str]:
    """Records kept and one forgotten, written through the tools; (kept ids, forgotten id)."""
    async with server.host() as host:
        kept = [
            await accepted(host, f"Courier lost parcel {n}; refund approved.") for n in range(5)
        ]
        gone = await accepted(host, "Courier lost parcel 77; refund approved, then forgotten.")
        args = forget_args(gone)
        token = host.confirmation_for("engram_memory_forget", args, gone, "human:dana")
        value(await host.call("engram_memory_forget", args, confirmation=token))
    return kept, gone


def _kept_ids(server: Server) -> set[str]:
    """The record ids the kept index holds, opened as the next start opens it."""
    root = RootKey.load(Path(server.env["ENGRAM_ROOT_KEY"]))
    loaded = load_embedding_model()
    model = loaded if isinstance(loaded, EmbeddingModel) else None
    database = Database.open(server.data_dir, read_only=True)
    try:
        with database.reading(audit_complete=False) as tx:
            fingerprint = index_fingerprint(tx)
    finally:
        database.close()
    blob = (server.data_dir / FILE_NAME).read_bytes()
    built = opened_index(blob, root.kept_index_key(), model, lambda: fingerprint)
    assert built is not None
    return {record_id for scope in built[0].values() for record_id in scope.record_ids}


async def test_a_clean_stop_keeps_the_index_and_the_next_start_answers_the_same(
    tmp_path: Path,
) -> None:
    with real_server("stdio", tmp_path) as server:
        kept, _ = await _stored(server)
        assert _kept_ids(server) == set(kept)  # the forgotten record is not in it
        before = await _answers(server)  # this start took the kept index
        assert {rid for answer in before for rid, _ in answer} <= set(kept)

        async with server.host() as host:
            value(
                await host.call(SEARCH, {"query": "courier", "purpose_ref": "purpose:support-case"})
            )
            assert not (server.data_dir / FILE_NAME).exists()  # taken while serving
        assert await _answers(server) == before


async def test_a_damaged_kept_index_changes_no_answer(tmp_path: Path) -> None:
    with real_server("stdio", tmp_path) as server:
        await _stored(server)
        before = await _answers(server)
        kept = server.data_dir / FILE_NAME
        damaged = bytearray(kept.read_bytes())
        damaged[len(damaged) // 2] ^= 0x01
        kept.write_bytes(bytes(damaged))

        assert await _answers(server) == before
        assert _kept_ids(server)  # the stop after it kept a sound one again


async def test_after_a_sigkill_the_start_reads_the_store_and_answers_the_same(
    tmp_path: Path,
) -> None:
    with real_server("stdio", tmp_path) as server:
        await _stored(server)
        before = await _answers(server)
        killed = StdioServer(server.env)
        try:
            killed.initialize()
            arguments = {"query": "courier", "purpose_ref": ALICE.purpose_ref}
            killed.call(1, SEARCH, arguments, invocation_meta(server.signer))
            assert "result" in killed.answer(1)  # served: the start took the kept index
            assert not (server.data_dir / FILE_NAME).exists()
        finally:
            killed.process.kill()
            killed.process.wait(timeout=30)
        assert not (server.data_dir / FILE_NAME).exists()  # nothing kept without a clean stop

        assert await _answers(server) == before


async def test_an_import_leaves_no_kept_index_and_the_next_start_finds_its_records(
    tmp_path: Path,
) -> None:
    with real_server("stdio", tmp_path) as server:
        await _stored(server)
        assert (server.data_dir / FILE_NAME).exists()
        corpus = tmp_path / "corpus.jsonl"
        line = demo_capture_arguments(
            "Imported zebra note: the courier lost parcel 4242.", "kept-import-line-0001"
        )
        corpus.write_text(json.dumps(line) + "\n", encoding="utf-8")
        words = ["--tenant", "acme", "--workspace", "support", "--principal", "user:alice"]
        imported = run_cli(
            server.env,
            "import",
            *words,
            "--purpose",
            ALICE.purpose_ref,
            "--operator",
            "human:dana",
            str(corpus),
        )
        assert imported.returncode == 0, imported.stderr
        assert json.loads(imported.stdout)["value"] == {"lines": 1, "accepted": 1}
        # Its writes never reached an index: none may be kept, nor the one from before.
        assert not (server.data_dir / FILE_NAME).exists()

        async with server.host() as host:
            query = {"query": "zebra", "purpose_ref": ALICE.purpose_ref}
            found = value(await host.call(SEARCH, query))["records"]
        assert len(found) == 1
        assert "zebra" in json.dumps(found[0]["record"])
