"""One decision corpus through both engines: the embedded Wasm and a real OPA server must
return identical results for every input (and the corpus must exercise every rule)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server
from tests.policy.corpus import REASONS, generate_corpus

pytestmark = pytest.mark.opa


@pytest.fixture(scope="module")
def engines(test_bundle_dir: Path) -> Iterator[tuple[EmbeddedWasmEngine, OpaServerEngine]]:
    embedded = EmbeddedWasmEngine(test_bundle_dir)
    with start_opa_server(test_bundle_dir / "bundle.tar.gz") as url:
        server = OpaServerEngine(url)
        yield embedded, server
        server.close()
    embedded.close()


def test_the_corpus_is_deterministic_and_large_enough() -> None:
    corpus = generate_corpus()
    assert corpus == generate_corpus()
    assert len(corpus) >= 200


def test_both_engines_decide_the_whole_corpus_identically(
    engines: tuple[EmbeddedWasmEngine, OpaServerEngine],
) -> None:
    embedded, server = engines
    seen: dict[str, set[str]] = {domain: set() for domain in REASONS}
    mismatches = []
    for domain, policy_input in generate_corpus():
        path = f"engram/{domain}/decision"
        wasm, rest = embedded.evaluate(path, policy_input), server.evaluate(path, policy_input)
        assert wasm.revision == rest.revision
        if wasm.result != rest.result:
            mismatches.append((domain, policy_input, wasm.result, rest.result))
        assert isinstance(wasm.result, dict)
        seen[domain].update(wasm.result["reasons"])
    assert mismatches == []
    assert {domain: REASONS[domain] - seen[domain] for domain in REASONS} == {
        domain: set() for domain in REASONS
    }
