"""A legitimate host keeps being served while a flood comes from its own address.

Every local client of a loopback server is 127.0.0.1, so a per-address cap alone lets a
flooding process lock out the host beside it. The real `serve --transport http` process
is flooded from 127.0.0.1 in two ways, each in its own thread for the whole test — sessions
opened and never bound, and slow-loris connections that send half their headers and wait —
while the reference host (MCP SDK client) calls tools from the same address, in both
protocol eras: the handshake era, whose session must be opened during the flood and binds
with its first call, and the sessionless era. At least 95 % of the host's calls must be
answered with a contract envelope, and the server's file descriptors and memory must stay
bounded by its caps, whatever the number of flood attempts.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
import httpx
import pytest

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import Binding, connect
from engram_memory.host.keys import HostSigningKey
from tests.servers import http_server, server_env

# Wall time matters (a flood shares the cores with the host): the timing group runs alone.
pytestmark = pytest.mark.xdist_group("timing")

ALICE = Binding(
    tenant="acme", workspace="support", principal="user:alice", purpose_ref="purpose:support"
)
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LIMITS = {
    "ENGRAM_HTTP_MAX_CONNECTIONS": "48",
    "ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER": "24",
    "ENGRAM_HTTP_MAX_SESSIONS": "48",
    "ENGRAM_HTTP_MAX_SESSIONS_PER_PEER": "8",
}
CALLS_PER_SESSION = 20
FRESH_SESSIONS = 5
MIN_SUCCESS = 0.95
# The flood must really have pressed on the cap it aims at (each of its places taken
# several times over) for the result to mean anything.
MIN_FLOOD_ATTEMPTS = {
    "sessions": 4 * int(LIMITS["ENGRAM_HTTP_MAX_SESSIONS_PER_PEER"]),
    "slowloris": 4 * int(LIMITS["ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER"]),
}
# The slow-loris flood is paced at this many connections a second (the policy is what is
# tested here, far past the caps: 8 times the address's places each second). A flood faster
# than the server can accept connections is not a matter of policy: the kernel's accept
# queue is first come, first served, and a host's connection waits behind the flood's
# (docs/security/flood-fairness.md says what to put in front of the server for that).
SLOWLORIS_PER_SECOND = 200
# Descriptors the server may hold beyond its connection cap: the store, logs, the
# event loop's own, the SDK's session streams (pipes, not sockets).
FD_MARGIN = 64
RSS_GROWTH_MIB = 150


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return init_host_dir(tmp_path_factory.mktemp("secrets"))


class Flood:
    """`attack(stop)` repeated in a thread until the block ends; counts its attempts and
    sets `pressing` once it made `pressing_after` of them."""

    def __init__(self, attack: Callable[[threading.Event], bool], pressing_after: int) -> None:
        self.attempts = 0
        self.pressing = threading.Event()
        self._pressing_after = pressing_after
        self._attack = attack
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._attack(self._stop):
                self.attempts += 1
                if self.attempts >= self._pressing_after:
                    self.pressing.set()

    @contextmanager
    def running(self) -> Iterator[Flood]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=30)


def _session_flood(url: str) -> Callable[[threading.Event], bool]:
    """Open a session that is never bound (no invocation context), over and over."""
    client = httpx.Client(timeout=10)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "flood", "version": "1"},
        },
    }

    def attack(stop: threading.Event) -> bool:
        try:
            client.post(url, json=body, headers=HEADERS)
        except httpx.HTTPError:
            return False
        return True

    return attack


def _slowloris(port: int) -> Callable[[threading.Event], bool]:
    """Connect, send half the headers, keep the connection (at most 200 held at once)."""
    held: list[socket.socket] = []

    def attack(stop: threading.Event) -> bool:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        except OSError:
            return False
        held.append(sock)
        if len(held) > 200:
            held.pop(0).close()
        if stop.wait(1 / SLOWLORIS_PER_SECOND):  # pacing a load generator, not a wait on state
            for each in held:
                each.close()
        return True

    return attack


async def _host_calls(url: str, signer: HostSigningKey, mode: str) -> tuple[int, int]:
    """(answered, attempted): one session making CALLS_PER_SESSION calls, then
    FRESH_SESSIONS sessions opened during the flood, one call each."""
    answered = attempted = 0

    async def call(host_call: Callable[[], object]) -> None:
        nonlocal answered, attempted
        attempted += 1
        with suppress(Exception):  # a transport failure is what is counted, not raised
            await host_call()  # type: ignore[misc]
            answered += 1

    async with connect(url, signer, ALICE, mode=mode) as host:
        for n in range(CALLS_PER_SESSION):
            await call(
                lambda n=n: host.call(  # type: ignore[misc]
                    "engram_memory_search",
                    {"query": f"refund {n}", "purpose_ref": ALICE.purpose_ref},
                )
            )
    for _ in range(FRESH_SESSIONS):

        async def fresh() -> None:
            async with connect(url, signer, ALICE, mode=mode) as host:
                await host.list_tools()

        await call(fresh)
    return answered, attempted


def _fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("flood_kind", ["sessions", "slowloris"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_host_is_served_during_a_flood_from_its_own_address(
    tmp_path: Path, secrets: tuple[Path, Path, Path], flood_kind: str, mode: str
) -> None:
    root_key, private_key, public_keys = secrets
    signer = HostSigningKey.from_pem_file(private_key)
    env = server_env(tmp_path / f"data-{uuid.uuid4().hex}", root_key, public_keys, **LIMITS)
    with http_server(env) as (process, url):
        fds_before, rss_before = _fds(process.pid), _rss_mib(process.pid)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        attack = _session_flood(url) if flood_kind == "sessions" else _slowloris(port)
        with Flood(attack, MIN_FLOOD_ATTEMPTS[flood_kind]).running() as flood:
            # The host starts once the flood has taken every place it aims at several times.
            assert flood.pressing.wait(timeout=120)
            before_host = flood.attempts
            answered, attempted = anyio.run(_host_calls, url, signer, mode)
            fds_during, rss_during = _fds(process.pid), _rss_mib(process.pid)
            assert flood.attempts > before_host  # and it went on while the host called
        assert process.poll() is None
    assert answered >= MIN_SUCCESS * attempted, (answered, attempted, flood.attempts)
    assert fds_during <= fds_before + int(LIMITS["ENGRAM_HTTP_MAX_CONNECTIONS"]) + FD_MARGIN
    assert rss_during - rss_before <= RSS_GROWTH_MIB
