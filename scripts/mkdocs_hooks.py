"""MkDocs hooks: the pages that are generated rather than copied, so they cannot drift.

- `reference/cli.md`: every `engram-memory` command's `--help`, from the argparse parsers.
- `reference/error-codes.md`: SPEC §5's envelope codes and the JSON-RPC refusals, from the
  contract module, each with what the agent's manual tells the agent to do.
- `reference/agent-manual.md`: the `instructions` text both servers send, in both languages.
- `benchmarks/<name>.md` (+ `.png`): each recorded result of `bench/results/`, with its plot;
  `benchmarks/commands.md`: `bench/README.md`, how to run them.

Loaded by `mkdocs.yml` (`hooks:`); `scripts/test` builds the site with `--strict`.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
# bench/README.md names its result files relative to bench/; on the site they are pages.
_RESULT_PATH = re.compile(r"`results/([a-z0-9_]+)\.\{[a-z,]+\}`")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices
            return choices
    return {}


def _command_sections(parser: argparse.ArgumentParser, path: list[str], depth: int) -> list[str]:
    """The help of `parser` and, below it, of each of its subcommands."""
    heading = "#" * min(depth, 4)
    lines = [f"{heading} `{' '.join(path)}`", "", "```text", parser.format_help().rstrip(), "```"]
    for name, child in _subcommands(parser).items():
        lines += ["", *_command_sections(child, [*path, name], depth + 1)]
    return lines


def cli_reference() -> str:
    # Imported here: the hooks module must load even where only mkdocs is installed.
    from engram_memory.cli.main import COMMANDS, build_parser

    lines = [
        "# Command line",
        "",
        "Generated from the argparse parsers of `engram-memory` (`scripts/mkdocs_hooks.py`):",
        "this is exactly what `--help` prints.",
        "",
        "```text",
        build_parser().format_help().rstrip(),
        "```",
    ]
    for command in COMMANDS:
        parser = _subcommands(build_parser(command))[command]
        lines += ["", *_command_sections(parser, ["engram-memory", command], 2)]
    return "\n".join(lines) + "\n"


def error_codes_reference() -> str:
    from engram_memory.contract.agent_manual import ACTIONS
    from engram_memory.contract.errors import ErrorCode, ProtocolCode

    lines = [
        "# Error codes",
        "",
        "Generated from `contract/errors.py` and `contract/agent_manual.py`. A tool error",
        "travels in the result envelope (`ok: false`, `error.code`, `error.retriable`); its",
        "message is constant and never carries input. The last column is what the agent's",
        "manual tells the agent to do.",
        "",
        "| code | retriable | message | the agent should |",
        "|---|---|---|---|",
    ]
    for code in ErrorCode:
        retriable = "yes" if code.retriable else "no"
        lines.append(f"| `{code.name}` | {retriable} | {code.message} | {ACTIONS[code][0]} |")
    lines += [
        "",
        "## JSON-RPC refusals",
        "",
        "Refusals before a call is judged are JSON-RPC errors with a constant message and no",
        "`data`, never an envelope.",
        "",
        "| JSON-RPC code | message | meaning |",
        "|---|---|---|",
    ]
    meaning = {
        "UNKNOWN_TOOL": "a tool the binding may not see (or that does not exist)",
        "CONTEXT_UNAVAILABLE": "the signed invocation context is missing, invalid, expired, "
        "replayed, or the call's purpose is not the bound one",
        "POLICY_UNAVAILABLE": "`tools/list` during a policy outage: retry later",
    }
    for protocol in ProtocolCode:
        lines.append(f"| `{protocol.rpc_code}` | {protocol.message} | {meaning[protocol.name]} |")
    return "\n".join(lines) + "\n"


def agent_manual_reference() -> str:
    from engram_memory.contract.agent_manual import LANGUAGE_VARIABLE, instructions

    lines = [
        "# The agent's manual",
        "",
        "`engram-memory serve` and the gateway send this text as `instructions` in their",
        "`initialize` result, so the model learns when memory is worth using and what each",
        f"error code asks of it. English by default; `{LANGUAGE_VARIABLE}=fr` sends French.",
        "Generated from `contract/agent_manual.py`.",
    ]
    for language, title in (("en", "English"), ("fr", "Français")):
        lines += ["", f"## {title}", "", "```text", instructions(language), "```"]
    return "\n".join(lines) + "\n"


def result_page(markdown: Path, available: set[str]) -> str:
    """A recorded result as a page: its own image links dropped when they would not resolve
    on the site, and its plot (the `.png` of the same name) shown after its title."""

    def keep_or_drop(match: re.Match[str]) -> str:
        return match.group(0) if Path(match.group(1)).name in available else ""

    text = _IMAGE_LINK.sub(keep_or_drop, markdown.read_text(encoding="utf-8"))
    plot = markdown.with_suffix(".png")
    if plot.exists() and f"]({plot.name})" not in text:
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n![{markdown.stem}]({plot.name})\n{rest}"
    return text


def commands_page() -> str:
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    return _RESULT_PATH.sub(lambda m: f"[{m.group(1)}]({m.group(1)}.md)", text)


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    # argparse wraps help to the terminal's width: the page must not depend on who built it.
    os.environ["COLUMNS"] = "100"
    generated = {
        "reference/cli.md": cli_reference(),
        "reference/error-codes.md": error_codes_reference(),
        "reference/agent-manual.md": agent_manual_reference(),
        "benchmarks/commands.md": commands_page(),
    }
    plots = {png.name for png in RESULTS.glob("*.png")}
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{png.name}", abs_src_path=str(png)))
    for src_uri, content in generated.items():
        files.append(File.generated(config, src_uri, content=content))
    # A result recorded after mkdocs.yml's nav was written is built and reachable by its
    # address rather than failing the strict build as a page left out of the nav.
    for markdown in sorted(RESULTS.glob("*.md")):
        page = result_page(markdown, plots)
        files.append(
            File.generated(
                config,
                f"benchmarks/{markdown.name}",
                content=page,
                inclusion=InclusionLevel.NOT_IN_NAV,
            )
        )
    return files
