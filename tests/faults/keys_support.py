"""Support for the key-lifecycle crash faults: a real server that SIGKILLs itself at an armed
point, the CLI's `audit verify` (in this process), and what the stopped store's files can
still open.

Nothing here patches the service: crashes come from the `Unsafe` kill failpoints armed through
`ENGRAM_UNSAFE_FAILPOINTS` when the server process starts; evidence comes from the process
(exit status, its log), the key directory and the DuckDB file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import duckdb

from engram_memory.client.reference_host import Binding, ReferenceHost, connect
from engram_memory.contract.digests import candidate_id_for, one_way_ref
from engram_memory.contract.exceptions import SealBroken
from engram_memory.core.failpoints import ENV_VAR
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.crypto.sealing import open_sealed
from engram_memory.host.keys import HostSigningKey
from engram_memory.store.connection import DATABASE_FILE
from tests.cli_runner import run_cli
from tests.servers import http_server, server_env

ALICE = Binding(
    tenant="acme", workspace="support", principal="user:alice", purpose_ref="purpose:support-case"
)
SCOPE = "tenant:acme/workspace:support"
CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
GET = "engram_memory_get"
DEATH_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Secrets:
    root_key: Path
    signing_key: Path
    public_keys: Path

    @property
    def signer(self) -> HostSigningKey:
        return HostSigningKey.from_pem_file(self.signing_key)


@dataclass
class Life:
    """One run of the server process: its host connection and how it ended."""

    host: ReferenceHost
    process: subprocess.Popen[bytes]
    url: str
    signer: HostSigningKey
    log: list[bytes] = field(default_factory=list)

    async def call(
        self, tool: str, arguments: Mapping[str, Any], target: str | None = None
    ) -> dict[str, Any]:
        """One call; confirmed by a human when `target` names what it destroys."""
        token = None
        if target is not None:
            token = self.host.confirmation_for(tool, arguments, target, "human:tester")
        outcome = await self.host.call(tool, arguments, confirmation=token)
        return outcome.envelope

    async def call_until_killed(
        self, tool: str, arguments: Mapping[str, Any], target: str | None = None
    ) -> int:
        """Make a call the armed failpoint turns into a crash; the exit status of the server.

        The doomed call runs on a connection of its own, in a thread with its own event loop:
        when the server dies under it, the SDK's transport tears down its task groups, and
        that must not cancel this loop (it did, now and then, on the shared connection). The
        binding, hence the session a confirmation names, is the same.
        """
        token = None
        if target is not None:
            token = self.host.confirmation_for(tool, arguments, target, "human:tester")
        answered: list[dict[str, Any]] = []

        async def doomed_call() -> None:
            async with connect(self.url, self.signer, ALICE) as host:
                outcome = await host.call(tool, arguments, confirmation=token)
                answered.append(outcome.envelope)

        def in_its_own_loop() -> None:
            # The transport may break or hang when the server dies; either is expected.
            with suppress(Exception):
                anyio.run(doomed_call)

        threading.Thread(target=in_its_own_loop, daemon=True).start()
        status = await anyio.to_thread.run_sync(self._wait_for_death)
        assert answered == [], "the server answered a call it was meant to die in"
        return status

    def _wait_for_death(self) -> int:
        return self.process.wait(timeout=DEATH_TIMEOUT_S)


def _drain(stream: Any, sink: list[bytes]) -> None:
    for line in stream:
        sink.append(line)


@asynccontextmanager
async def server_life(
    data_dir: Path, secrets: Secrets, failpoint: str | None = None
) -> AsyncIterator[Life]:
    """Start `serve --transport http` (armed with `failpoint`, e.g. `kill_after_commit:<tool>`)
    and connect the reference host; the server's stderr lines are collected in `Life.log`."""
    extra = {} if failpoint is None else {ENV_VAR: failpoint}
    env = server_env(data_dir, secrets.root_key, secrets.public_keys, **extra)
    with http_server(env, stderr=subprocess.PIPE) as (process, url):
        life_log: list[bytes] = []
        drain = threading.Thread(target=_drain, args=(process.stderr, life_log), daemon=True)
        drain.start()
        connection = AsyncExitStack()
        try:
            host = await connection.enter_async_context(connect(url, secrets.signer, ALICE))
            yield Life(host, process, url, secrets.signer, life_log)
        finally:
            # Closing the session of a server that died may fail; that proves nothing here.
            with suppress(Exception):
                await connection.aclose()
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=DEATH_TIMEOUT_S)
            drain.join(timeout=DEATH_TIMEOUT_S)


def audit_verify(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """`engram-memory audit verify` on a stopped store, run through `main(argv)` in this
    process (tests/cli_runner.py): only its exit code and output are checked here, and an
    interpreter per verdict cost ~2 s of CPU each (issue 19)."""
    return run_cli(dict(os.environ), "audit", "verify", "--data-dir", str(data_dir))


def audit_verify_of_a_copy(data_dir: Path, copy: Path) -> subprocess.CompletedProcess[str]:
    """`audit verify` on a copy of the stopped store, so that whatever the verification
    touches (it opens the DuckDB file) the next server run starts on the original as the
    crash left it."""
    shutil.copytree(data_dir, copy)
    return audit_verify(copy)


def candidate_id(idempotency_key: str) -> str:
    """The id capture gives ALICE's candidate of this key (SPEC §9.4)."""
    source = one_way_ref("capture-source", f"{SCOPE}\0{ALICE.principal}")
    return candidate_id_for(source, idempotency_key)


def key_path(data_dir: Path, item_id: str) -> Path:
    name = KeyStore.file_name(SCOPE, item_id)
    return data_dir / KEYS_DIRECTORY / name[:2] / name


@dataclass(frozen=True)
class StoredItem:
    kind: str  # "candidate" | "record"
    item_id: str
    state: str
    sealed_body: bytes | None


def stored_items(data_dir: Path) -> list[StoredItem]:
    """Every candidate and record in the stopped store's DuckDB file."""
    connection = duckdb.connect(str(data_dir / DATABASE_FILE), read_only=True)
    try:
        rows = connection.execute(
            "SELECT 'candidate', candidate_id, state, sealed_body FROM candidates "
            "UNION ALL SELECT 'record', record_id, state, sealed_body FROM records"
        ).fetchall()
    finally:
        connection.close()
    return [
        StoredItem(str(kind), str(item), str(state), None if body is None else bytes(body))
        for kind, item, state, body in rows
    ]


def openable(data_dir: Path, root_key: Path, item: StoredItem, body: bytes) -> bool:
    """Whether `body` opens with the root key and whatever key file `item` still has."""
    keys = KeyStore(data_dir / KEYS_DIRECTORY)
    data_key = keys.load_item_key(RootKey.load(root_key), SCOPE, item.item_id)
    if data_key is None:
        return False
    try:
        json.loads(open_sealed(data_key, body, SCOPE, item.item_id))
    except SealBroken:
        return False
    return True
