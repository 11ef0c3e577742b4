"""scripts/mkdocs_hooks.py: the generated reference pages say what the code says.

`scripts/test` builds the whole site with `mkdocs build --strict`; here, each generated page
against its source, and a recorded bench result's image handling.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from engram_memory.cli.main import COMMANDS
from engram_memory.contract.agent_manual import instructions
from engram_memory.contract.errors import ErrorCode, ProtocolCode

ROOT = Path(__file__).resolve().parents[2]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _hooks()


def test_the_cli_page_has_every_command_and_subcommand_help() -> None:
    page = HOOKS.cli_reference()
    for command in COMMANDS:
        assert f"## `engram-memory {command}`" in page
    assert "### `engram-memory policy grant`" in page
    assert "--principal PRINCIPAL" in page


def test_the_error_codes_page_has_every_code_with_its_retriable_flag_and_action() -> None:
    page = HOOKS.error_codes_reference()
    for code in ErrorCode:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{code.name}` |"))
        assert f"| {'yes' if code.retriable else 'no'} | {code.message} |" in row
    for protocol in ProtocolCode:
        assert f"| `{protocol.rpc_code}` | {protocol.message} |" in page


def test_the_agent_manual_page_is_the_text_the_servers_send_in_both_languages() -> None:
    page = HOOKS.agent_manual_reference()
    assert instructions("en") in page
    assert instructions("fr") in page


def test_a_result_page_shows_its_plot_and_drops_an_image_link_that_would_break(
    tmp_path: Path,
) -> None:
    (tmp_path / "run.md").write_text(
        "# A run\n\n![old](elsewhere/old.png)\n| a | b |\n", encoding="utf-8"
    )
    (tmp_path / "run.png").write_bytes(b"\x89PNG")
    page = HOOKS.result_page(tmp_path / "run.md", {"run.png"})
    assert page.startswith("# A run\n\n![run](run.png)\n")
    assert "old.png" not in page
    assert "| a | b |" in page


def test_the_commands_page_links_each_result_page() -> None:
    page = HOOKS.commands_page()
    assert "[tools_stdio](tools_stdio.md)" in page
    assert "`results/tools_stdio." not in page
