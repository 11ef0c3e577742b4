"""The memory servers people use today, loaded with the same corpus and searched over stdio.

- The MCP reference memory server (`@modelcontextprotocol/server-memory`, npm), pinned and
  installed by `scripts/lib.sh`'s `ensure_reference_memory_server` (never by the bench).
  Loaded by writing its JSONL memory file directly (its README documents `MEMORY_FILE_PATH`
  as its storage, one `{"type": "entity", ...}` object a line; every tool call re-reads that
  file), one entity per record: name = the capture's idempotency key, type `decision`,
  observations = the component texts and the citations' `source_ref`s. Searched with its own
  `search_nodes` tool: a case-insensitive substring match of the whole query over names,
  types and observations, returning every match.
- Basic Memory (`basic-memory`, PyPI), in its own virtualenv under Python >= 3.12. Loaded by
  its documented `basic-memory import memory-json` (the same JSONL file: one Markdown note a
  record) and `basic-memory reindex --search` (its full-text index; no embeddings: they
  would download a model). Searched with its own `search_notes` MCP tool, `search_type`
  `text` (SQLite FTS5), 10 results a page like ours.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp.client.client import Client

from bench.corpus import record_texts
from bench.stdio_probe import (
    call_tool,
    directory_bytes,
    progress,
    quiet_server,
    server_pid,
    timed_calls,
    tree_rss_bytes,
)

CACHE = Path(os.environ.get("ENGRAM_BENCH_CACHE", Path.home() / ".cache/engram-memory/bench"))
REFERENCE_PACKAGE = "@modelcontextprotocol/server-memory"
REFERENCE_ENV = "ENGRAM_REFERENCE_MEMORY_SERVER"
_ROOT = Path(__file__).resolve().parents[1]
BASIC_MEMORY_VERSION = "0.24.1"
_PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
_PYTHONS = (
    str(_PYENV / "3.12.1" / "bin" / "python"),
    str(_PYENV / "3.13.0" / "bin" / "python"),
    "python3.12",
    "python3.13",
)


class Unavailable(Exception):
    """A baseline cannot be installed or run here; the message is the printed reason."""


def reference_version() -> str:
    """The reference server version `scripts/lib.sh` pins (one pin for installer and bench)."""
    match = re.search(
        r"^REFERENCE_MEMORY_VERSION=(\S+)", (_ROOT / "scripts/lib.sh").read_text(), re.M
    )
    if match is None:
        raise Unavailable("scripts/lib.sh no longer pins REFERENCE_MEMORY_VERSION")
    return match.group(1)


def reference_server_entry() -> Path:
    """Where `ensure_reference_memory_server` puts the pinned server's entry point."""
    tools = Path(os.environ.get("ENGRAM_TOOL_CACHE", Path.home() / ".cache/engram-memory/tools"))
    package = tools / f"server-memory-{reference_version()}" / "node_modules" / REFERENCE_PACKAGE
    return package / "dist" / "index.js"


def _run(
    command: Sequence[str], seconds: float, log: Path, env: dict[str, str] | None = None
) -> None:
    """Run `command` with its output appended to `log`, a heartbeat on stderr every 30 s,
    stopped (SIGKILL, this child only) once it has run `seconds`.

    Raises:
        Unavailable: it could not start, exited non-zero, or ran out of time.
    """
    name = f"{Path(command[0]).name} {command[1]}"
    start = time.perf_counter()
    # The cache may not exist yet (an empty HOME): nothing else creates the log's folder.
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as output:
        try:
            child = subprocess.Popen(list(command), stdout=output, stderr=output, env=env)
        except OSError as exc:
            raise Unavailable(f"{name} cannot start ({type(exc).__name__})") from exc
        while True:
            left = seconds - (time.perf_counter() - start)
            try:
                code = child.wait(timeout=max(0.1, min(30.0, left)))
                break
            except subprocess.TimeoutExpired:
                if time.perf_counter() - start >= seconds:
                    child.kill()
                    child.wait()
                    raise Unavailable(f"{name} not done after {seconds:.0f} s: stopped") from None
                progress(f"      {name}: running for {time.perf_counter() - start:.0f} s")
    if code != 0:
        raise Unavailable(f"{name} exited {code} (its output: {log})")


def entity_lines(corpus: Path) -> list[str]:
    """The reference server's memory-file lines for the corpus, one entity a record."""
    lines = []
    with corpus.open(encoding="utf-8") as records:
        for line in records:
            if line.strip():
                arguments = json.loads(line)
                entity = {
                    "type": "entity",
                    "name": arguments["idempotency_key"],
                    "entityType": "decision",
                    "observations": record_texts(arguments),
                }
                lines.append(json.dumps(entity, ensure_ascii=False))
    return lines


@dataclass
class ReferenceServer:
    """`@modelcontextprotocol/server-memory` with its memory file in `workdir`."""

    workdir: Path
    entry: Path = Path()

    def install(self) -> None:
        """Find the server `scripts/lib.sh`'s `ensure_reference_memory_server` installed
        ($ENGRAM_REFERENCE_MEMORY_SERVER, else the pinned version in the tool cache). The
        benchmark installs nothing itself: one pinned, locked install, made before any run.

        Raises:
            Unavailable: it is not installed, or node is missing.
        """
        configured = os.environ.get(REFERENCE_ENV)
        self.entry = Path(configured) if configured else reference_server_entry()
        if not self.entry.is_file():
            raise Unavailable(
                f"{REFERENCE_PACKAGE} not installed at {self.entry}: run `source scripts/lib.sh"
                f" && ensure_reference_memory_server` (scripts/test does) or set {REFERENCE_ENV}"
            )
        if shutil.which("node") is None:
            raise Unavailable("node not installed")

    @property
    def memory_file(self) -> Path:
        return self.workdir / "memory.jsonl"

    def load(self, corpus: Path) -> dict[str, Any]:
        """Write its memory file (its own storage format) for the corpus."""
        start = time.perf_counter()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.memory_file.write_text("\n".join(entity_lines(corpus)), encoding="utf-8")
        return {
            "path": "memory file written directly (MEMORY_FILE_PATH, JSONL)",
            "seconds": round(time.perf_counter() - start, 1),
        }

    async def _measure(self, queries: Sequence[str]) -> dict[str, Any]:
        env = {"PATH": os.environ.get("PATH", ""), "MEMORY_FILE_PATH": str(self.memory_file)}
        node = shutil.which("node") or "node"
        params = quiet_server(node, [str(self.entry)], env, self.workdir / "server.log")
        async with Client(params, cache=None) as client:

            async def search(query: str) -> int:
                result = await call_tool(client, "search_nodes", {"query": query})
                return len((result.structured_content or {}).get("entities", []))

            latencies, hits = await timed_calls(search, queries, "reference server search")
            rss = tree_rss_bytes(server_pid(str(self.entry)))
        return {
            "search": latencies,
            "hits": hits,
            "rss bytes": rss,
            "data bytes": self.memory_file.stat().st_size,
        }

    def measure(self, queries: Sequence[str]) -> dict[str, Any]:
        """search_nodes over stdio for each query; the server's RSS after them."""
        result: dict[str, Any] = anyio.run(self._measure, queries)
        return result


def _python_312() -> str:
    """The first candidate that really runs as Python >= 3.12 (pyenv shims on PATH may
    exist for versions that are not selected, and fail).

    Raises:
        Unavailable: no Python >= 3.12 on this machine.
    """
    check = "import sys; sys.exit(sys.version_info < (3, 12))"
    for candidate in _PYTHONS:
        found = shutil.which(candidate)
        if found and subprocess.run([found, "-c", check], capture_output=True).returncode == 0:
            return found
    raise Unavailable("Basic Memory needs Python >= 3.12, none found")


@dataclass
class BasicMemory:
    """Basic Memory with its config, notes and SQLite index isolated in `workdir`."""

    workdir: Path
    venv: Path = CACHE / f"basic-memory-{BASIC_MEMORY_VERSION}"

    def install(self) -> None:
        """Raises: Unavailable: no Python >= 3.12, or pip cannot install it."""
        if (self.venv / "bin" / "basic-memory").is_file():
            return
        progress(f"  installing basic-memory=={BASIC_MEMORY_VERSION} into {self.venv}")
        log = CACHE / f"basic-memory-{BASIC_MEMORY_VERSION}-install.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        _run([_python_312(), "-m", "venv", str(self.venv)], 120, log)
        _run(
            [
                str(self.venv / "bin" / "pip"),
                "install",
                "--quiet",
                f"basic-memory=={BASIC_MEMORY_VERSION}",
            ],
            900,
            log,
        )

    @property
    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.workdir),
            "BASIC_MEMORY_CONFIG_DIR": str(self.workdir / "config"),
            "BASIC_MEMORY_HOME": str(self.workdir / "notes"),
            "BASIC_MEMORY_AUTO_UPDATE": "false",
            # No model can be fetched here: fail fast instead of retrying a download.
            "HF_HUB_OFFLINE": "1",
        }

    @property
    def server_env(self) -> dict[str, str]:
        # Indexed before the server starts: no start-up rescan running under the queries.
        # (Not while loading: with it set, the first command creates no default project.)
        return {**self.env, "BASIC_MEMORY_SKIP_INITIALIZATION_SYNC": "true"}

    def load(self, corpus: Path, budget_seconds: float) -> dict[str, Any]:
        """Import the corpus as notes, then build the full-text index, within the budget.

        Raises:
            Unavailable: either step failed or the budget ran out (the size is not reached).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        memory_file = self.workdir / "memory.jsonl"
        memory_file.write_text("\n".join(entity_lines(corpus)), encoding="utf-8")
        tool = str(self.venv / "bin" / "basic-memory")
        start = time.perf_counter()
        log = self.workdir / "loading.log"
        # Its first command creates the config and the default project `main` (the notes
        # directory); `project list` is the cheapest such command.
        _run([tool, "project", "list"], budget_seconds, log, self.env)
        progress("    basic-memory import memory-json")
        left = budget_seconds - (time.perf_counter() - start)
        _run([tool, "import", "memory-json", str(memory_file)], left, log, self.env)
        imported = time.perf_counter() - start
        progress("    basic-memory reindex --search (its full-text index)")
        _run([tool, "reindex", "--search"], budget_seconds - imported, log, self.env)
        return {
            "path": "basic-memory import memory-json + reindex --search",
            "seconds": round(time.perf_counter() - start, 1),
            "import seconds": round(imported, 1),
        }

    async def _measure(self, queries: Sequence[str]) -> dict[str, Any]:
        tool = str(self.venv / "bin" / "basic-memory")
        params = quiet_server(
            tool, ["mcp", "--transport", "stdio"], self.server_env, self.workdir / "server.log"
        )
        async with Client(params, cache=None) as client:

            async def search(query: str) -> int:
                arguments = {
                    "query": query,
                    "search_type": "text",
                    "page_size": 10,
                    "output_format": "json",
                }
                result = await call_tool(client, "search_notes", arguments)
                return _basic_memory_hits(result.structured_content, result.content)

            latencies, hits = await timed_calls(search, queries, "basic memory search")
            rss = tree_rss_bytes(server_pid(tool))
        return {
            "search": latencies,
            "hits": hits,
            "rss bytes": rss,
            "data bytes": directory_bytes(self.workdir / "config")
            + directory_bytes(self.workdir / "notes"),
        }

    def measure(self, queries: Sequence[str]) -> dict[str, Any]:
        """search_notes (text) over stdio for each query; the server's RSS after them."""
        result: dict[str, Any] = anyio.run(self._measure, queries)
        return result


def _basic_memory_hits(structured: dict[str, Any] | None, content: Sequence[Any]) -> int:
    """Results on the page, from its JSON output (structured, or the first text block)."""
    document: Any = structured
    if not document and content:
        try:
            document = json.loads(getattr(content[0], "text", "") or "{}")
        except json.JSONDecodeError:
            return -1
    if isinstance(document, dict):
        results = document.get("results", document.get("result", {}))
        if isinstance(results, dict):
            results = results.get("results", [])
        return len(results) if isinstance(results, list) else -1
    return -1


def log_unavailable(name: str, reason: Unavailable) -> str:
    line = f"  {name} skipped: {reason}"
    print(line, file=sys.stderr, flush=True)
    return str(reason)
