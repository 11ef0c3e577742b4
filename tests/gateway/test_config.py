"""The gateway configuration file: schema, file:line problems, ${VAR}, relative paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import GatewayConfigError
from engram_memory.gateway.config import load_gateway_config

STDIO = """\
mode: stdio
host_id: host:gateway-desktop
signing_key: secrets/host-signing.pem
audit_log: gateway-audit.jsonl
upstream:
  command: [bin/engram-memory, serve, --transport, stdio]
  env: {ENGRAM_DATA_DIR: /var/engram}
stdio:
  tenant: acme
  workspace: support
  principal: user:alice
  purposes: [purpose:support-case]
  os_user: alice
"""

HTTP = """\
mode: http
host_id: host:gateway-team
signing_key: /etc/engram/host-signing.pem
audit_log: /var/log/engram/gateway-audit.jsonl
upstream:
  url: http://127.0.0.1:8765/mcp
http:
  resource: http://127.0.0.1:8787/mcp
  issuer: https://idp.example.com
  jwks_url: https://idp.example.com/.well-known/jwks.json
  scopes:
    - {tenant: acme, workspace: support, purposes: [purpose:support-case]}
"""

_PROBLEM = re.compile(r"^(?P<file>.+):(?P<line>\d+): (?P<field>\S+): .+$")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _problems(path: Path, env: dict[str, str] | None = None) -> list[tuple[int, str]]:
    with pytest.raises(GatewayConfigError) as caught:
        load_gateway_config(path, env={} if env is None else env)
    located = []
    for problem in caught.value.problems:
        match = _PROBLEM.match(problem)
        assert match is not None, problem
        assert match["file"] == str(path)
        located.append((int(match["line"]), match["field"]))
    return located


def test_a_stdio_configuration_loads_with_paths_resolved_against_its_directory(
    tmp_path: Path,
) -> None:
    config = load_gateway_config(_write(tmp_path, STDIO), env={})
    assert config.mode == "stdio"
    assert config.signing_key == tmp_path / "secrets" / "host-signing.pem"
    assert config.audit_log == tmp_path / "gateway-audit.jsonl"
    assert config.upstream.command is not None
    assert config.upstream.command[0] == str(tmp_path / "bin" / "engram-memory")
    assert config.stdio is not None
    assert config.stdio.effective_approver == "human:alice"
    assert config.confirmed_tools == {"engram_memory_withdraw", "engram_memory_forget"}


def test_an_http_configuration_loads_with_the_audience_defaulting_to_the_resource(
    tmp_path: Path,
) -> None:
    config = load_gateway_config(_write(tmp_path, HTTP), env={})
    assert config.http is not None
    assert config.http.effective_audience == "http://127.0.0.1:8787/mcp"
    assert config.http.algorithms == ("RS256", "ES256")


def test_variables_expand_from_the_environment_and_an_unset_one_is_a_located_problem(
    tmp_path: Path,
) -> None:
    text = STDIO.replace("ENGRAM_DATA_DIR: /var/engram", "ENGRAM_DATA_DIR: '${DATA}'")
    config = load_gateway_config(_write(tmp_path, text), env={"DATA": "/srv/data"})
    assert config.upstream.env == {"ENGRAM_DATA_DIR": "/srv/data"}
    assert _problems(_write(tmp_path, text)) == [(7, "upstream.env.ENGRAM_DATA_DIR")]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("  os_user: alice\n", "  os_user: alice\n  colour: blue\n"), [(14, "stdio.colour")]),
        (("mode: stdio", "mode: both"), [(1, "mode")]),
        (("  tenant: acme", "  tenant: '*'"), [(9, "stdio.tenant")]),
        (("  purposes: [purpose:support-case]", "  purposes: []"), [(12, "stdio.purposes")]),
        (("  os_user: alice", "  os_user: alice\n  approver: robot:x"), [(14, "stdio.approver")]),
        (("  env: {ENGRAM_DATA_DIR: /var/engram}", "  url: http://x/mcp"), [(5, "upstream")]),
        (("upstream:\n", "upstream:\n  timeout_s: 0\n"), [(6, "upstream.timeout_s")]),
        (("  os_user: alice", "  os_user: ' alice'"), [(8, "stdio")]),
        (("  tenant: acme", '  tenant: "acme\\n"'), [(9, "stdio.tenant")]),
        (
            ("  principal: user:alice", '  principal: "user:alice\\e[31m"'),
            [(11, "stdio.principal")],
        ),
    ],
    ids=[
        "unknown_key",
        "unknown_mode",
        "wildcard_tenant",
        "no_purpose",
        "approver_not_human",
        "command_and_url",
        "timeout_out_of_bounds",
        "os_user_unfit_for_the_default_approver",
        "tenant_with_a_trailing_newline",
        "principal_with_an_ansi_escape",
    ],
)
def test_each_stdio_problem_is_reported_at_its_line_and_field(
    tmp_path: Path, change: tuple[str, str], expected: list[tuple[int, str]]
) -> None:
    text = STDIO.replace(*change)
    assert text != STDIO
    assert _problems(_write(tmp_path, text)) == expected


@pytest.mark.parametrize(
    ("extra", "asserted"),
    [
        ("  groups: [group:b, group:a, group:a]\n", ("group:a", "group:b")),  # the OS user
        ("  groups: [group:a]\n  approver: human:olga\n", None),  # someone else: unknown
        (
            "  groups: [group:a]\n  approver: human:olga\n"
            "  approver_groups: [group:records-officers]\n",
            ("group:records-officers",),
        ),
    ],
    ids=["os_user_approves", "named_approver", "named_approver_with_groups"],
)
def test_the_approvers_groups_are_the_ones_the_configuration_knows(
    tmp_path: Path, extra: str, asserted: tuple[str, ...] | None
) -> None:
    config = load_gateway_config(_write(tmp_path, STDIO + extra), env={})
    assert config.stdio is not None
    assert config.stdio.effective_approver_groups == asserted


def test_a_malformed_approver_group_is_a_located_problem(tmp_path: Path) -> None:
    path = _write(tmp_path, STDIO + "  approver_groups: [records-officers]\n")
    assert _problems(path) == [(14, "stdio.approver_groups")]


def test_confirmation_tools_accept_only_the_two_optional_tools(tmp_path: Path) -> None:
    good = STDIO + "confirmation:\n  tools: [engram_memory_capture]\n  timeout_s: 240\n"
    config = load_gateway_config(_write(tmp_path, good), env={})
    assert "engram_memory_capture" in config.confirmed_tools
    bad = STDIO + "confirmation:\n  tools: [engram_memory_search]\n  timeout_s: 241\n"
    assert _problems(_write(tmp_path, bad)) == [
        (15, "confirmation.tools[0]"),
        (16, "confirmation.timeout_s"),
    ]


@pytest.mark.parametrize("algorithm", ["none", "HS256", "HS512", "rs256"])
def test_algorithms_none_and_hmac_are_refused_at_load(tmp_path: Path, algorithm: str) -> None:
    text = HTTP.replace("  scopes:", f"  algorithms: [RS256, {algorithm}]\n  scopes:")
    assert _problems(_write(tmp_path, text)) == [(11, "http.algorithms")]


def test_the_mode_decides_which_section_is_required(tmp_path: Path) -> None:
    without_stdio = STDIO.split("stdio:\n")[0]
    assert _problems(_write(tmp_path, without_stdio)) == [(1, "<document>")]
    as_http = STDIO.replace("mode: stdio", "mode: http")
    assert _problems(_write(tmp_path, as_http)) == [(1, "<document>")]


def test_yaml_that_does_not_parse_or_repeats_a_key_is_a_located_problem(tmp_path: Path) -> None:
    assert _problems(_write(tmp_path, STDIO + "stdio: [\n")) != []
    repeated = STDIO.replace("  os_user: alice", "  os_user: alice\n  os_user: bob")
    assert _problems(_write(tmp_path, repeated)) == [(14, "stdio.os_user")]
    assert _problems(_write(tmp_path, "- just\n- a list\n")) == [(1, "<document>")]


# The shipped examples: tests/gateway/test_preflight.py runs `--check` on every one.
