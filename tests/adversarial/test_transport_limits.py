"""Streamable HTTP under a hostile client: session floods, sessions that never bind,
slowloris connections, oversized bodies, dropped connections, and an exposed bind address.

Each test drives the real `serve --transport http` process on loopback with small limits
(set by their ENGRAM_ variables), bounded in count and time, and checks that a legitimate
host (the reference host) is still served. The audit trace of the refusals (session limits,
sessions that never bound, oversized bodies) is read as an auditor would, once the server has
stopped: host-stream entries with reason, transport and peer, counted exactly.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.reference_host import Binding, ReferenceHost, connect
from engram_memory.host.context import INVOCATION_META_KEY, mint_invocation
from engram_memory.host.keys import HostSigningKey
from tests.adversarial.refusal_support import host_entries, refused_count
from tests.servers import bound_port, server_env

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")

ALICE = Binding(
    tenant="acme", workspace="support", principal="user:alice", purpose_ref="purpose:support"
)
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
SESSION_LIMIT_CODE = -32000
TOO_LARGE_CODE = -32600


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return init_host_dir(tmp_path_factory.mktemp("secrets"))


@pytest.fixture(scope="module")
def signer(secrets: tuple[Path, Path, Path]) -> HostSigningKey:
    return HostSigningKey.from_pem_file(secrets[1])


@contextmanager
def _server(
    tmp_path: Path,
    secrets: tuple[Path, Path, Path],
    *args: str,
    scheme: str = "http",
    **limits: str,
) -> Iterator[tuple[str, Path]]:
    """The real server with `limits` (ENGRAM_ variables) and extra `serve` args; yields its
    URL and the file its stderr goes to."""
    root_key, _, public_keys = secrets
    workdir = Path(tempfile.mkdtemp(prefix="server-", dir=tmp_path))
    env = server_env(workdir / "data", root_key, public_keys, **limits)
    log_path, port_file = workdir / "server.log", workdir / "port"
    command = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "http"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "--port", "0", "--port-file", str(port_file), *args],
            env=env,
            stderr=log,
            stdout=subprocess.DEVNULL,
        )
    try:
        url = f"{scheme}://127.0.0.1:{bound_port(port_file, process)}/mcp"
        _DATA_DIRS[url] = workdir / "data"
        _wait_for(
            lambda: "streamable HTTP on" in log_path.read_text() or process.poll() is not None
        )
        assert process.poll() is None, log_path.read_text()
        yield url, log_path
    finally:
        process.terminate()
        process.wait(timeout=20)


# The store of each server `_server` started, by its URL (its port is known only once bound).
_DATA_DIRS: dict[str, Path] = {}


def _data_dir(tmp_path: Path, url: str) -> Path:
    """The store of the server `_server(tmp_path, ...)` serves at `url`."""
    data_dir = _DATA_DIRS[url]
    assert data_dir.is_relative_to(tmp_path)
    return data_dir


def _refusals(tmp_path: Path, url: str, reason: str, peer: str) -> int:
    """How many `reason` refusals of `peer` over HTTP the stopped server's trail records."""
    entries = host_entries(_data_dir(tmp_path, url))
    return refused_count(entries, reason=reason, peer=peer, transport="http")


def _wait_for(condition: Callable[[], bool], within_s: float = 30.0) -> float:
    """Poll `condition` until it holds; returns the seconds it took.

    Raises:
        AssertionError: it did not hold within `within_s`.
    """
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > within_s:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)
    return time.monotonic() - start


def _initialize(signer: HostSigningKey | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    }
    if signer is not None:
        params["_meta"] = {INVOCATION_META_KEY: _token(signer)}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


def _token(signer: HostSigningKey) -> str:
    return mint_invocation(
        signer,
        host_id="host-1",
        tenant=ALICE.tenant,
        workspace=ALICE.workspace,
        principal=ALICE.principal,
        agent_id="agent-1",
        session="s-1",
        purpose_ref=ALICE.purpose_ref,
        audit_id=str(uuid.uuid4()),
    )


def _open(
    url: str, peer: str = "127.0.0.1", signer: HostSigningKey | None = None
) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=peer)
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.post(url, json=_initialize(signer), headers=HEADERS)


def _ping(url: str, session_id: str) -> int:
    headers = {**HEADERS, "Mcp-Session-Id": session_id}
    body = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    return httpx.post(url, json=body, headers=headers, timeout=10).status_code


def _error_code(response: httpx.Response) -> int:
    return int(response.json()["error"]["code"])


def _legitimate_host_is_served(url: str, signer: HostSigningKey, mode: str = "auto") -> None:
    async def list_tools() -> list[str]:
        async with connect(url, signer, ALICE, mode=mode) as host:
            return [tool.name for tool in await host.list_tools()]

    assert "engram_memory_capture" in anyio.run(list_tools)


def test_an_initialize_flood_ends_its_own_oldest_sessions_and_is_refused_only_when_all_are_bound(
    tmp_path: Path, secrets: tuple[Path, Path, Path], signer: HostSigningKey
) -> None:
    limits = {
        "ENGRAM_HTTP_MAX_SESSIONS": "6",
        "ENGRAM_HTTP_MAX_SESSIONS_PER_PEER": "3",
        "ENGRAM_HTTP_UNBOUND_SESSION_SECONDS": "120",
    }
    with _server(tmp_path, secrets, **limits) as (url, _):
        flood = [_open(url, peer="127.0.0.2") for _ in range(8)]
        # Each opening over the address's 3 unbound places ends that address's oldest one.
        assert [r.status_code for r in flood] == [200] * 8
        assert [_ping(url, _session(r)) for r in flood] == [404] * 5 + [200] * 3
        # A handshake-era host binds its session with its first call: out of reach.
        _legitimate_host_is_served(url, signer, mode="legacy")
        others = [_open(url, peer=f"127.0.0.{n}") for n in (3, 4, 5, 6)]
        assert [r.status_code for r in others] == [200] * 4  # .6 ended .2's oldest left
        # Sessions bound at their opening take the unbound ones' places, oldest first ...
        bound = [_open(url, peer="127.0.0.7", signer=signer) for _ in range(6)]
        assert [r.status_code for r in bound] == [200] * 6
        # ... and once every session is bound, an opening is refused, retriable.
        refused = _open(url, peer="127.0.0.8")
        assert refused.status_code == 503
        assert _error_code(refused) == SESSION_LIMIT_CODE
        assert [_ping(url, _session(r)) for r in bound] == [200] * 6
        # A host of the sessionless protocol era is served whatever the session count.
        _legitimate_host_is_served(url, signer)
    entries = host_entries(_data_dir(tmp_path, url))
    # The five pings of ended sessions were refused by the SDK (unknown session), audited.
    pings = [e for e in entries if e["reason"] == "invalid_request"]
    assert [(e["peer"], e["occurrences"]) for e in pings] == [("127.0.0.1", 1)] * 5
    entries = [e for e in entries if e["reason"] != "invalid_request"]
    assert [(e["reason"], e["peer"]) for e in entries] == [
        ("session_limit", peer)
        for peer in ["127.0.0.2"] * 8
        + ["127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"]
        + ["127.0.0.8"]
    ]
    assert {(e["tool"], e["transport"], e["occurrences"]) for e in entries} == {
        ("initialize", "http", 1)
    }


def _session(response: httpx.Response) -> str:
    return response.headers["mcp-session-id"]


def test_a_session_without_context_ends_within_seconds_and_a_bound_one_lives_until_idle(
    tmp_path: Path, secrets: tuple[Path, Path, Path], signer: HostSigningKey
) -> None:
    limits = {
        "ENGRAM_HTTP_UNBOUND_SESSION_SECONDS": "1",
        "ENGRAM_HTTP_SESSION_IDLE_MINUTES": "0.1",  # 6 s
        "ENGRAM_HTTP_MAX_SESSIONS_PER_PEER": "1",
        "ENGRAM_HTTP_MAX_SESSIONS": "1",
    }
    with _server(tmp_path, secrets, **limits) as (url, _):
        first = _session(_open(url, peer="127.0.0.2"))
        second = _session(_open(url, peer="127.0.0.2"))  # the peer's place: the first ends
        assert _ping(url, first) == 404
        # A request without a context does not keep a session: it ends within seconds.
        assert _wait_for(lambda: _ping(url, second) == 404, within_s=15) < 10

        bound = _session(_open(url, peer="127.0.0.3", signer=signer))
        idle_from = time.monotonic()
        # Watched through the server's only place, which a bound session keeps (a request
        # on it would keep it alive): an unbound opening is refused until it idled out.
        _wait_for(lambda: _open(url, peer="127.0.0.3").status_code == 200, within_s=30)
        assert time.monotonic() - idle_from >= 4  # lived past the unbound grace, to idle
        assert _ping(url, bound) == 404
        _legitimate_host_is_served(url, signer, mode="legacy")
    assert _refusals(tmp_path, url, "session_limit", "127.0.0.2") == 1
    # The first session of 127.0.0.2 and the one opened in its place never bound.
    assert _refusals(tmp_path, url, "session_without_context", "127.0.0.2") >= 1
    assert _refusals(tmp_path, url, "session_without_context", "127.0.0.1") == 0  # the host's


def test_a_session_bound_by_a_later_call_outlives_the_unbound_grace(
    tmp_path: Path, secrets: tuple[Path, Path, Path], signer: HostSigningKey
) -> None:
    limits = {"ENGRAM_HTTP_UNBOUND_SESSION_SECONDS": "1"}
    with _server(tmp_path, secrets, **limits) as (url, _):

        async def session() -> int:
            # A handshake-era host: `initialize` carries no context, its first call does.
            async with connect(url, signer, ALICE, mode="legacy") as host:
                first = len(await host.list_tools())
                unbound = (await anyio.to_thread.run_sync(_open, url)).headers["mcp-session-id"]
                await anyio.to_thread.run_sync(
                    lambda: _wait_for(lambda: _ping(url, unbound) == 404, within_s=15)
                )
                assert len(await host.list_tools()) == first  # same session, still served
                return first

        assert anyio.run(session) > 0


def _trickle(port: int, request: bytes, peer: str = "127.0.0.2") -> socket.socket:
    sock = _connect(port, peer)
    with contextlib.suppress(OSError):  # a connection over a cap may be closed already
        sock.sendall(request)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_half_sent_headers_and_bodies_are_closed_after_their_timeouts_while_a_host_is_served(
    tmp_path: Path, secrets: tuple[Path, Path, Path], signer: HostSigningKey
) -> None:
    limits = {
        "ENGRAM_HTTP_HEADER_TIMEOUT_SECONDS": "2",
        "ENGRAM_HTTP_BODY_TIMEOUT_SECONDS": "2",
        "ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER": "12",
    }
    with _server(tmp_path, secrets, **limits) as (url, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        half_headers = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"
        half_body = (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 500\r\n\r\n{"jsonrpc":'
        )
        held = [_trickle(port, half_headers) for _ in range(10)]
        held += [_trickle(port, half_body) for _ in range(10)]  # 8 over the peer's cap
        held.append(_connect(port, "127.0.0.3"))  # sends nothing
        start = time.monotonic()
        _legitimate_host_is_served(url, signer)
        assert all(_closed_by_server(sock) for sock in held)
        assert time.monotonic() - start < 15
        for sock in held:
            sock.close()
        _legitimate_host_is_served(url, signer)


def _connect(port: int, peer: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=20, source_address=(peer, 0))


def _closed_at_once(sock: socket.socket) -> bool:
    start = time.monotonic()
    return _closed_by_server(sock) and time.monotonic() - start < 2.5


def test_a_connection_over_the_caps_pushes_out_the_oldest_silent_one_at_once(
    tmp_path: Path, secrets: tuple[Path, Path, Path], signer: HostSigningKey
) -> None:
    limits = {
        "ENGRAM_HTTP_MAX_CONNECTIONS": "6",
        "ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER": "3",
        "ENGRAM_HTTP_HEADER_TIMEOUT_SECONDS": "4",
    }
    with _server(tmp_path, secrets, **limits) as (url, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        held = [_connect(port, "127.0.0.2") for _ in range(3)]  # silent: a slowloris
        held.append(_connect(port, "127.0.0.2"))  # over the address's cap
        assert _closed_at_once(held[0])  # its oldest, not the header timeout
        _legitimate_host_is_served(url, signer)  # from 127.0.0.1
        held += [_connect(port, "127.0.0.3") for _ in range(3)]  # the server's 6
        held.append(_connect(port, "127.0.0.4"))  # over the server's cap
        assert _closed_at_once(held[1])  # the oldest silent one of any address
        assert all(_closed_by_server(sock) for sock in held[2:])  # then the header timeout
        for sock in held:
            sock.close()
        _legitimate_host_is_served(url, signer)


def test_a_connection_that_sent_its_request_is_never_pushed_out(
    tmp_path: Path, secrets: tuple[Path, Path, Path]
) -> None:
    limits = {"ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER": "2"}
    with _server(tmp_path, secrets, **limits) as (url, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        serving = [_connect(port, "127.0.0.5") for _ in range(2)]
        for sock in serving:
            assert _health(sock) == 200  # keep-alive: the connection stays open, serving
        late = _connect(port, "127.0.0.5")
        assert _closed_at_once(late)  # nothing silent to push out: the new one is refused
        assert [_health(sock) for sock in serving] == [200, 200]
        for sock in [*serving, late]:
            sock.close()


def _health(sock: socket.socket) -> int:
    """Status of `GET /healthz` on the open connection `sock` (which stays open)."""
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1024)
        assert chunk, "the server closed the connection"
        head += chunk
    return int(head.split(b" ", 2)[1])


@pytest.fixture(scope="module")
def small_requests(
    tmp_path_factory: pytest.TempPathFactory, secrets: tuple[Path, Path, Path]
) -> Iterator[tuple[str, Path]]:
    """One server for the tests that need no particular limit but a small request cap; once
    it stopped, its trail holds exactly the oversized bodies the tests sent
    (`_OVERSIZED_SENT`)."""
    directory = tmp_path_factory.mktemp("small-requests")
    with _server(directory, secrets, ENGRAM_MAX_REQUEST_BYTES="65536") as served:
        yield served
    url, _ = served
    assert _refusals(directory, url, "request_too_large", "127.0.0.1") == len(_OVERSIZED_SENT)


_OVERSIZED_SENT: list[str] = []


def test_an_oversized_body_is_refused_with_413_and_a_json_rpc_error(
    small_requests: tuple[str, Path], signer: HostSigningKey
) -> None:
    url, _ = small_requests
    declared = httpx.post(url, content=b"x" * 70_000, headers=HEADERS, timeout=10)
    assert declared.status_code == 413
    assert _error_code(declared) == TOO_LARGE_CODE

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(10):
            yield b" " * 8192

    streamed = httpx.post(url, content=chunks(), headers=HEADERS, timeout=10)
    _OVERSIZED_SENT.extend(["declared", "streamed"])
    assert streamed.status_code == 413
    assert _error_code(streamed) == TOO_LARGE_CODE
    _legitimate_host_is_served(url, signer)


def test_a_dropped_connection_logs_exactly_one_line(
    small_requests: tuple[str, Path], signer: HostSigningKey
) -> None:
    url, log_path = small_requests
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    before = log_path.read_text().splitlines()
    sock = _trickle(
        port,
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"jsonrpc":',
    )
    _legitimate_host_is_served(url, signer)  # the half request has reached the server
    sock.close()
    _wait_for(lambda: len(log_path.read_text().splitlines()) > len(before))
    _legitimate_host_is_served(url, signer)  # and whatever it logged is logged by now
    added = log_path.read_text().splitlines()[len(before) :]
    assert len(added) == 1
    assert "dropped" in added[0]


@pytest.mark.parametrize(
    ("args", "variable"),
    [
        ((), "ENGRAM_HTTP_ALLOWED_HOSTS"),
        (("--http-allowed-hosts", "mem.example:*", "--http-allowed-origins", "none"), "--tls-cert"),
    ],
)
def test_a_non_loopback_bind_without_allowed_names_or_a_tls_choice_exits_2_writing_nothing(
    tmp_path: Path, secrets: tuple[Path, Path, Path], args: tuple[str, ...], variable: str
) -> None:
    root_key, _, public_keys = secrets
    env = server_env(tmp_path / "data", root_key, public_keys)
    command = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "http"]
    result = subprocess.run(
        [*command, "--host", "0.0.0.0", "--port", "0", *args],  # noqa: S104
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert variable in result.stderr
    assert not (tmp_path / "data").exists()


def test_an_exposed_plain_http_bind_warns_and_checks_host_headers_against_the_operator_list(
    tmp_path: Path, secrets: tuple[Path, Path, Path], signer: HostSigningKey
) -> None:
    args = (
        "--host",
        "0.0.0.0",  # noqa: S104 - the test only connects over loopback
        "--http-allowed-hosts",
        "127.0.0.1:*",
        "--http-allowed-origins",
        "none",
        "--insecure-no-tls",
    )
    with _server(tmp_path, secrets, *args) as (url, log_path):
        assert "warning: MCP over HTTP is exposed on 0.0.0.0" in log_path.read_text()
        url = url.replace("0.0.0.0", "127.0.0.1")  # noqa: S104
        foreign = {**HEADERS, "Host": "rebound.example"}
        assert httpx.post(url, json=_initialize(), headers=foreign).status_code == 421
        origin = {**HEADERS, "Origin": "http://127.0.0.1"}
        assert httpx.post(url, json=_initialize(), headers=origin).status_code == 403
        _legitimate_host_is_served(url, signer)
    # Both refused by the SDK's transport before any handler: audited by the gate.
    assert _refusals(tmp_path, url, "invalid_request", "127.0.0.1") == 2


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def test_tls_serves_the_sdk_client_that_trusts_the_certificate_and_nothing_else(
    tmp_path: Path, secrets: tuple[Path, Path, Path], signer: HostSigningKey
) -> None:
    cert, key = _self_signed(tmp_path)
    args = ("--tls-cert", str(cert), "--tls-key", str(key))
    limits = {"ENGRAM_HTTP_HEADER_TIMEOUT_SECONDS": "2"}
    with _server(tmp_path, secrets, *args, scheme="https", **limits) as (url, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        stalled = _connect(port, "127.0.0.2")  # never starts its TLS handshake
        start = time.monotonic()
        with pytest.raises(httpx.ConnectError):
            httpx.post(url, json=_initialize(), headers=HEADERS)  # not trusted by default
        with pytest.raises(httpx.TransportError):  # and plain HTTP is not answered
            httpx.post(url.replace("https", "http"), json=_initialize(), headers=HEADERS)

        async def list_tools() -> list[str]:
            http_client = httpx2.AsyncClient(verify=ssl.create_default_context(cafile=cert))
            async with (
                http_client,
                Client(streamable_http_client(url, http_client=http_client), cache=None) as client,
            ):
                tools = await ReferenceHost(client, signer, ALICE).list_tools()
                return [tool.name for tool in tools]

        assert "engram_memory_capture" in anyio.run(list_tools)
        assert _closed_by_server(stalled)
        assert time.monotonic() - start < 15  # the header timeout, not asyncio's 60 s
        stalled.close()
