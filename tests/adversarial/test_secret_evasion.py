"""A hostile agent hides secrets behind Unicode disguises; the real server refuses them.

Over stdio against `python -m engram_memory.cli serve`: each disguised secret is refused
INVALID_SCHEMA (nothing written, SPEC §11), and the same client's legitimate
multilingual capture (joiners, emoji ZWJ sequences, full-width digits) is still accepted.
The refusals are in the audit trail as bound INVALID_SCHEMA entries, the first `BURST` one
by one and the rest in one counted summary, adding up to exactly the number of attacks.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

from engram_memory.admin.host_setup import init_host_dir
from engram_memory.client.demo import BINDING, demo_capture_arguments
from engram_memory.client.reference_host import CallOutcome, connect
from engram_memory.host.keys import HostSigningKey
from tests.adversarial.refusal_support import bound_refusals
from tests.contract.secret_evasions import EVASIONS, LEGITIMATE
from tests.servers import server_env

pytestmark = pytest.mark.e2e
BURST = 3

# A few evasions of each kind; the full corpus runs in-process (tests/contract).
ATTACKS = (
    "zwj_in_password",
    "zwsp_throughout_github_token",
    "bom_in_akia",
    "zwsp_around_jwt_dots",
    "soft_hyphen_in_pem_header",
    "full_width_aws_key",
    "combining_in_token_body",
    "isolate_inside_password",
    "ideographic_space_bearer",
)


def _key() -> str:
    return f"evasion-{uuid.uuid4().hex}"


def _code(outcome: CallOutcome) -> str:
    assert outcome.envelope["ok"] is False, outcome.envelope
    assert outcome.is_error is True
    code: str = outcome.envelope["error"]["code"]
    return code


async def test_disguised_secrets_are_refused_over_stdio_and_legitimate_text_still_served(
    tmp_path: Path,
) -> None:
    root_key, signing_key, public_keys = init_host_dir(tmp_path / "secrets")
    data_dir = tmp_path / "data"
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engram_memory.cli", "serve", "--transport", "stdio"],
        env=server_env(data_dir, root_key, public_keys, ENGRAM_REFUSAL_BURST=str(BURST)),
    )
    evasions = dict(EVASIONS)
    legitimate = dict(LEGITIMATE)
    signer = HostSigningKey.from_pem_file(signing_key)
    async with connect(server, signer, BINDING) as host:
        for name in ATTACKS:
            args = demo_capture_arguments(evasions[name], _key())
            assert _code(await host.call("engram_memory_capture", args)) == "INVALID_SCHEMA", name
        for name in ("family_emoji_zwj", "arabic_with_joiners", "japanese_full_width"):
            args = demo_capture_arguments(legitimate[name], _key())
            outcome = await host.call("engram_memory_capture", args)
            assert outcome.envelope["ok"] is True, (name, outcome.envelope)
            value: dict[str, Any] = outcome.envelope["output"]["value"]
            assert value["status"] == "committed_pending"
    # The server exited with its client; its summary was written at the latest at shutdown.
    entries, refusals = bound_refusals(data_dir, "INVALID_SCHEMA", "engram_memory_capture")
    assert (entries, refusals) == (BURST + 1, len(ATTACKS))
