"""What the semantic channel costs beyond ranking: memory, install size, and a real server.

Used by bench/semantic_recall.py (`--rss-size`, `--stdio-sizes`); runnable alone for one
figure:

    .venv/bin/python -m bench.semantic_costs rss --records 100000
    .venv/bin/python -m bench.semantic_costs installed

- **Extra RSS**: a child process builds the lexical index of N corpus records in process
  (bench/semantic_recall.py `Corpus`, as the service indexes them) and reads its RSS, then
  loads the shipped model, embeds every record in batches and holds the vector and adjacency
  projections, and reads its RSS again: the difference is what the channel adds.
- **Installed size**: the files the `[semantic]` extra installs (its packages' RECORD
  entries) and the model files shipped inside engram-memory.
- **Over stdio**: a store of N corpus records loaded with `engram-memory import`, then a real
  `serve` process driven by the real MCP SDK client (bench/search_engram.py), twice on the
  same store: with the semantic channel (a policy bundle that permits it for the bench's
  binding, searches with `minimum_channels: lexical_and_semantic`) and without it (the
  server started with the `tokenizers` package hidden, as without the extra). Search p50/p99
  and the server's RSS after the searches, each way; and the transport's floor, a do-nothing
  tool over stdio (bench/floor_server.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.corpus import write_corpus
from bench.report import percentile
from bench.search_engram import BINDING, EngramSetup, load_corpus
from bench.stdio_probe import progress, quiet_server, server_pid, timed_calls, tree_rss_bytes
from bench.tools_stdio import stdio_floor
from engram_memory.client.reference_host import connect
from engram_memory.host.keys import HostSigningKey
from engram_memory.search.embedding import MODEL_DIR

EXTRA_PACKAGES = ("tokenizers",)
_MIB = 2**20
_SERVE = ("-m", "engram_memory.cli", "serve", "--transport", "stdio")
# The same server with the [semantic] extra's package unimportable (no semantic channel).
_SERVE_WITHOUT_EXTRA = (
    "-c",
    "import sys; sys.modules['tokenizers'] = None; "
    "sys.argv = ['engram-memory', 'serve', '--transport', 'stdio']; "
    "from engram_memory.cli.main import main; sys.exit(main())",
    "engram_memory.cli",  # the marker server_pid looks for
)


def extra_rss(records: int) -> dict[str, Any]:
    """The in-process RSS the semantic channel adds at `records` (measured in a child)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.semantic_rss", "--records", str(records)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _closure(names: Sequence[str]) -> set[str]:
    """The distributions `names` install, with their requirements (markers evaluated for
    this interpreter, no extras), as normalized names."""
    seen: set[str] = set()
    pending = [canonicalize_name(name) for name in names]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(canonicalize_name(requirement.name))
    return seen


def installed_size() -> dict[str, Any]:
    """Bytes installed by the distributions only the extra brings (its packages and their
    requirements, minus what engram-memory installs anyway), and the model in the package."""
    only_extra = sorted(_closure(EXTRA_PACKAGES) - _closure(["engram-memory"]))
    packages: dict[str, int] = {}
    for name in only_extra:
        dist = metadata.distribution(name)
        packages[f"{name} {dist.version}"] = sum(
            path.stat().st_size
            for path in (Path(str(dist.locate_file(f))) for f in dist.files or [])
            if path.is_file()
        )
    model = sum(path.stat().st_size for path in MODEL_DIR.iterdir() if path.is_file())
    return {
        "packages_mib": {name: round(size / _MIB, 1) for name, size in packages.items()},
        "extra_total_mib": round(sum(packages.values()) / _MIB, 1),
        "model_files_in_engram_memory_mib": round(model / _MIB, 1),
    }


def _semantic_bundle(workdir: Path) -> Path:
    """The shipped policies with the bench binding's purpose permitted to use the channel,
    built into a bundle (tests skipped: only the data differs from the shipped bundle)."""
    policies = workdir / "policies"
    shutil.copytree(Path("policies"), policies, ignore=shutil.ignore_patterns("tests"))
    path = policies / f"{BINDING.tenant}.yaml"
    text = path.read_text(encoding="utf-8").replace(
        "memory_enabled: true\n", "memory_enabled: true\nsemantic_search: true\n", 1
    )
    text = text.replace(
        f"  {BINDING.workspace}:\n    memory_enabled: true\n",
        f"  {BINDING.workspace}:\n    memory_enabled: true\n    semantic_search:\n"
        f'      purposes: ["{BINDING.purpose_ref}"]\n',
        1,
    )
    path.write_text(text, encoding="utf-8")
    bundle = workdir / "bundle"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "engram_memory.cli",
            "policy",
            "build",
            "--policies",
            str(policies),
            "--out",
            str(bundle),
            "--skip-tests",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return bundle


async def _searches(
    setup: EngramSetup, serve: Sequence[str], env: dict[str, str], queries: Sequence[str]
) -> dict[str, Any]:
    params = quiet_server(sys.executable, serve, env, setup.data_dir.parent / "server.log")
    signer = HostSigningKey.from_pem_file(setup.signing_key)
    semantic = "ENGRAM_BUNDLE" in env
    channels = "lexical_and_semantic" if semantic else "lexical"
    profiles: set[str] = set()
    async with connect(params, signer, BINDING, mode="legacy") as host:

        async def search(query: str) -> int:
            outcome = await host.call(
                "engram_memory_search",
                {
                    "query": query,
                    "purpose_ref": BINDING.purpose_ref,
                    "capability_policy": {"minimum_channels": channels, "network": "forbid"},
                },
            )
            if not outcome.envelope.get("ok"):
                raise RuntimeError(f"search failed: {outcome.envelope['error']['code']}")
            value = outcome.envelope["output"]["value"]
            profiles.add(str(value["rank_receipt"]["profile"]))
            return len(value["records"])

        await timed_calls(search, list(queries[:5]), "stdio warm-up")
        latencies, _ = await timed_calls(search, queries, f"stdio search ({channels})")
        rss = tree_rss_bytes(server_pid("engram_memory.cli"))
    return {
        "profiles": sorted(profiles),
        "p50_ms": round(percentile(latencies, 0.5), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "n": len(latencies),
        "rss_mib": round(rss / _MIB, 1),
    }


def over_stdio(records: int, queries: Sequence[str]) -> dict[str, Any]:
    """Search latency and server RSS over stdio on one store, with and without the channel."""
    with tempfile.TemporaryDirectory(prefix="engram-semantic-") as tmp:
        workdir = Path(tmp)
        setup = EngramSetup.create(workdir)
        corpus = workdir / "corpus.jsonl"
        write_corpus(corpus, records, 8)
        progress(f"semantic stdio: importing {records} records")
        loading = load_corpus(setup, corpus)
        bundle = _semantic_bundle(workdir)
        on_env = {**setup.env, "ENGRAM_BUNDLE": str(bundle)}
        with_channel = anyio.run(_searches, setup, _SERVE, on_env, queries)
        without = anyio.run(_searches, setup, _SERVE_WITHOUT_EXTRA, setup.env, queries)
    floor = anyio.run(stdio_floor, len(queries))
    return {
        "records": records,
        "loading": loading,
        "semantic_v1": with_channel,
        "without_the_extra": without,
        "extra_rss_mib": round(with_channel["rss_mib"] - without["rss_mib"], 1),
        "stdio_floor": {
            "p50_ms": round(percentile(floor, 0.5), 2),
            "p99_ms": round(percentile(floor, 0.99), 2),
            "n": len(floor),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("rss", "installed"))
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = extra_rss(args.records) if args.what == "rss" else installed_size()
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
