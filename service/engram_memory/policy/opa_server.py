"""Production engine: a real OPA server queried over its REST Data API.

Each query is `POST /v1/data/<path>?provenance=true`; the provenance block names the bundle
revision OPA itself has activated, which the decider compares with the expected one. The
client is opa-python-client's `OpaClient`: `query_rule` returns the whole response body
(result AND provenance), so nothing needs extending. Its requests-based exceptions all
derive from `OSError` (`requests.RequestException` subclasses `IOError`) or `ValueError`
(bad JSON), which is how they are mapped here without importing untyped `requests`.

`start_opa_server` spawns `opa run --server` on 127.0.0.1 for tests and `serve --policy
opa-spawn`.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from opa_client import OpaClient

from engram_memory.contract.exceptions import (
    ConfigurationError,
    OpaServerStartError,
    PolicyUnavailable,
)
from engram_memory.policy.engine import EngineAnswer
from engram_memory.policy.opa_binary import require_opa_binary

ENGINE_ID = "opa-server"


class OpaServerEngine:
    """`PolicyEngine` backed by an OPA server at `url` (e.g. `http://127.0.0.1:8181`)."""

    engine_id = ENGINE_ID

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 2.0,
        token: str | None = None,
        bundle_name: str | None = None,
    ) -> None:
        """`bundle_name` selects the bundle whose revision counts when OPA serves several;
        with None, OPA must report exactly one bundle.

        Raises:
            ConfigurationError: `url` is not http(s)://host:port.
        """
        parts = urlsplit(url)
        well_formed = parts.scheme in {"http", "https"} and bool(parts.hostname)
        if not well_formed or parts.path not in {"", "/"}:
            raise ConfigurationError("OPA url must be http(s)://host[:port]")
        port = parts.port or (443 if parts.scheme == "https" else 8181)
        # retries=0: a retry policy belongs to the caller (POLICY_UNAVAILABLE is retriable),
        # and urllib3 back-off would silently stretch the per-decision timeout.
        self._client_options: dict[str, Any] = {
            "host": parts.hostname,
            "port": port,
            "ssl": parts.scheme == "https",
            "token": token,
            "retries": 0,
            "timeout": timeout_seconds,
        }
        # One client (one requests session) per worker thread: sessions are not documented
        # as thread-safe, and tool calls run on several worker threads.
        self._local = threading.local()
        self._clients: list[Any] = []
        self._clients_lock = threading.Lock()
        self._bundle_name = bundle_name
        self._engine_version = "opa/unknown"
        self.url = url

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = OpaClient(**self._client_options)
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    @property
    def engine_version(self) -> str:
        """`opa/<version>` as reported by the last provenance block."""
        return self._engine_version

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        """Query `data/<path>` with provenance.

        Raises:
            PolicyUnavailable: unreachable, timeout, non-200, undefined result, or no
                bundle revision in the provenance.
        """
        try:
            body = self._client().query_rule(
                input_data=dict(policy_input),
                package_path=path,
                query_params={"provenance": "true"},
            )
        except (OSError, ValueError) as exc:
            raise PolicyUnavailable(f"opa server: {type(exc).__name__}") from exc
        if not isinstance(body, dict):
            raise PolicyUnavailable("opa server: response is not an object")
        if "result" not in body:
            raise PolicyUnavailable(f"opa server: undefined result for {path}")
        provenance = body.get("provenance")
        revision = self._revision(provenance)
        if isinstance(provenance, dict) and isinstance(provenance.get("version"), str):
            self._engine_version = f"opa/{provenance['version']}"
        return EngineAnswer(result=body["result"], revision=revision)

    def _revision(self, provenance: object) -> str:
        bundles = provenance.get("bundles") if isinstance(provenance, dict) else None
        if not isinstance(bundles, dict) or not bundles:
            raise PolicyUnavailable("opa server: provenance names no bundle")
        if self._bundle_name is not None:
            entry = bundles.get(self._bundle_name)
        elif len(bundles) == 1:
            entry = next(iter(bundles.values()))
        else:
            raise PolicyUnavailable("opa server: several bundles and none selected")
        revision = entry.get("revision") if isinstance(entry, dict) else None
        if not isinstance(revision, str) or not revision:
            raise PolicyUnavailable("opa server: bundle has no revision")
        return revision

    def served_modules(self) -> dict[str, str]:
        """`{id: raw source}` of every module OPA holds (`GET /v1/policies`).

        Raises:
            PolicyUnavailable: unreachable, or not the documented answer.
        """
        body = self._get("policies")
        modules = body.get("result")
        if not isinstance(modules, list):
            raise PolicyUnavailable("opa server: policies answer is not a list")
        served: dict[str, str] = {}
        for module in modules:
            if not isinstance(module, dict):
                raise PolicyUnavailable("opa server: policies answer is malformed")
            module_id, raw = module.get("id"), module.get("raw")
            if not isinstance(module_id, str) or not isinstance(raw, str):
                raise PolicyUnavailable("opa server: policies answer is malformed")
            served[module_id] = raw
        return served

    def served_data(self, path: str) -> object:
        """The document at `data/<path>` (`GET /v1/data/<path>`), None when undefined.

        Raises:
            PolicyUnavailable: unreachable, or not the documented answer.
        """
        return self._get(f"data/{path}").get("result")

    def _get(self, path: str) -> dict[str, Any]:
        client = self._client()
        try:
            # The client's own session (its token and TLS settings); it has no generic GET.
            response = client._session.get(f"{client.root_url}/{path}", timeout=client.timeout)
            body = response.json() if response.status_code == 200 else None
        except (OSError, ValueError) as exc:
            raise PolicyUnavailable(f"opa server: {type(exc).__name__}") from exc
        if not isinstance(body, dict):
            raise PolicyUnavailable(f"opa server: GET {path.split('/')[0]} failed")
        return body

    def answers_health(self) -> bool:
        """Whether OPA answers `/health?bundles` now (a startup diagnostic, not a gate:
        decisions fail closed on their own when it does not)."""
        try:
            return _healthy(self._client())
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close_connection()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _healthy(client: Any) -> bool:
    # /health?bundles is 200 only once every configured bundle is activated.
    return bool(client.check_health(query={"bundles": "true"}))


def _wait_until_healthy(
    process: subprocess.Popen[bytes], client: Any, deadline: float, log: IO[bytes]
) -> None:
    delay = 0.005
    while True:
        if _healthy(client):
            return
        # Waiting on the process (not sleeping) returns at once if OPA dies meanwhile.
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=delay)
        if process.poll() is not None:
            log.seek(0)
            tail = log.read()[-2000:].decode("utf-8", "replace")
            raise OpaServerStartError(f"opa run exited with {process.returncode}: {tail}")
        if time.monotonic() >= deadline:
            raise OpaServerStartError("opa server did not become healthy in time")
        delay = min(delay * 2, 0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@contextlib.contextmanager
def start_opa_server(
    bundle_path: Path | str,
    opa_bin: Path | str | None = None,
    *,
    ready_timeout_seconds: float = 20.0,
    verification_key: tuple[Path, str] | None = None,
    decision_log: Path | None = None,
) -> Iterator[str]:
    """Run `opa run --server --bundle <bundle_path>` on 127.0.0.1 (free port), wait until
    `/health?bundles` is healthy, yield its base URL (`http://127.0.0.1:<port>`), and
    terminate it on exit. Decision logs to the
    console are off; OPA's own log (errors only) is kept for the start error message.
    `decision_log` turns them on, OPA's whole console output appended to that file (what
    an operator's log pipeline would receive: tests read it for leaks).
    `verification_key` (public key PEM path, key id) makes OPA itself refuse a bundle not
    signed with that key (RS256, OPA's default algorithm).

    Raises:
        OpaBinaryNotFound: no OPA binary.
        OpaServerStartError: OPA exited or stayed unhealthy.
    """
    opa = require_opa_binary(opa_bin)
    with contextlib.ExitStack() as stack, tempfile.TemporaryFile() as log:
        port = _free_port()
        argv = [
            str(opa),
            "run",
            "--server",
            "--addr",
            f"127.0.0.1:{port}",
            "--bundle",
            str(bundle_path),
            "--log-level",
            "error" if decision_log is None else "info",
            "--set",
            f"decision_logs.console={'false' if decision_log is None else 'true'}",
            "--skip-version-check",
            "--shutdown-grace-period",
            "1",
        ]
        if verification_key is not None:
            key_path, key_id = verification_key
            argv += ["--verification-key", str(key_path), "--verification-key-id", key_id]
        console = log if decision_log is None else stack.enter_context(decision_log.open("ab"))
        process = subprocess.Popen(  # noqa: S603 - fixed argv, binary chosen by the operator
            argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT
        )
        client = OpaClient(host="127.0.0.1", port=port, retries=0, timeout=1.0)
        try:
            _wait_until_healthy(process, client, time.monotonic() + ready_timeout_seconds, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            client.close_connection()
            _stop(process)
