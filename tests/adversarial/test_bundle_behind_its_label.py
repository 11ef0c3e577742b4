"""A bundle edited behind its revision label, served by a real OPA (issue 23, finding 6).

`engram-memory serve` with `ENGRAM_POLICY` naming an OPA server that runs the shipped bundle's
`.manifest` (so the shipped revision) over an edited `data.json` refuses to start: exit 2 and
one line on stderr, no decision taken, no receipt naming a bundle OPA does not run. The same
deployment against an honest OPA serves. (Per decision, tests/policy/test_served_content.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.policy.bundle import BUNDLE_FILE, DEFAULT_BUNDLE_DIR
from engram_memory.policy.opa_server import start_opa_server
from tests.adversarial.wire import make_secrets, raw_stdio, search_call
from tests.policy.conftest import opa_binary_or_skip
from tests.policy.test_served_content import edited_behind_its_label

pytestmark = pytest.mark.opa
SERVE = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "stdio"]


@pytest.fixture
def opa() -> Path:
    """The OPA binary; skipped locally when absent, a failure in CI (as tests/policy's)."""
    return opa_binary_or_skip()


def test_serve_refuses_to_start_on_an_opa_serving_edited_data_behind_the_shipped_label(
    tmp_path: Path, opa: Path
) -> None:
    tarball = edited_behind_its_label(tmp_path / BUNDLE_FILE)
    with start_opa_server(tarball, opa) as url:
        secrets = make_secrets(tmp_path, ENGRAM_POLICY=url)
        started = subprocess.run(
            SERVE, env=secrets.env, input=b"", capture_output=True, timeout=60, check=False
        )
    assert started.returncode == 2
    assert len(started.stderr.decode().strip().splitlines()) == 1
    assert started.stdout == b""


def test_serve_decides_with_an_honest_opa_server(tmp_path: Path, opa: Path) -> None:
    with start_opa_server(DEFAULT_BUNDLE_DIR / BUNDLE_FILE, opa) as url:
        secrets = make_secrets(tmp_path, ENGRAM_POLICY=url)
        with raw_stdio(secrets.env) as serve:
            answer = serve.exchange(search_call(1, secrets.token()))
    assert answer["result"]["structuredContent"]["ok"] is True
