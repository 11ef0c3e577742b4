"""`gateway --check`: every shipped example passes it, and every problem of a configuration
(in the file or on the machine) is reported at once, each at its key's `file:line`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from engram_memory.cli.main import main
from engram_memory.contract.exceptions import GatewayConfigError
from engram_memory.gateway.audit_log import GatewayAudit
from engram_memory.gateway.config import resolve_program
from engram_memory.gateway.os_user import effective_os_user
from engram_memory.gateway.preflight import preflight

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_PROBLEM = re.compile(r"^(?P<file>.+):(?P<line>\d+): (?P<field>\S+): .+$")


def _gateway_examples() -> list[Path]:
    """Every YAML file under examples/ that is a gateway configuration (it has `upstream`)."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(document, dict) and "upstream" in document:
            found.append(path)
    return found


def test_the_examples_include_both_modes() -> None:
    names = {path.name for path in _gateway_examples()}
    assert {"desktop.yaml", "team.yaml"} <= names


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A newcomer's HOME after the one documented set-up step, `host init`."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", effective_os_user())
    # desktop-shared.yaml: the name each client's entry gives its gateway.
    monkeypatch.setenv("ENGRAM_GATEWAY_CLIENT", "claude-desktop")
    assert main(["host", "init", "--dir", str(home / ".engram-secrets")]) == 0
    return home


@pytest.mark.parametrize("example", _gateway_examples(), ids=lambda path: path.name)
def test_every_shipped_example_passes_its_own_check(
    example: Path, fresh_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The set-up its own header names (`host init --dir ~/...`), as a newcomer follows it.
    header = example.read_text(encoding="utf-8")
    for directory in re.findall(r"^#\s+engram-memory host init --dir ~/(\S+)", header, re.M):
        assert main(["host", "init", "--dir", str(fresh_home / directory)]) == 0
    code = main(["gateway", "--config", str(example), "--check"])
    assert code == 0, capsys.readouterr().err
    # The check created nothing: the audit log's directory is made when the gateway starts.
    assert not (fresh_home / ".engram").exists()


def test_clients_sharing_one_file_each_get_their_own_audit_log(fresh_home: Path) -> None:
    shared = EXAMPLES / "gateway" / "desktop-shared.yaml"
    running = preflight(shared)  # the first client's gateway...
    (fresh_home / ".engram").mkdir()
    with GatewayAudit.open(running.audit_log, running.host_id):  # ...holds its log
        env = {"HOME": str(fresh_home), "USER": effective_os_user()}
        with pytest.raises(GatewayConfigError) as caught:  # the same name: refused, located
            preflight(shared, env={**env, "ENGRAM_GATEWAY_CLIENT": "claude-desktop"})
        assert [field for _, field in _located(caught.value.problems, shared)] == ["audit_log"]
        other = preflight(shared, env={**env, "ENGRAM_GATEWAY_CLIENT": "cursor"})
    assert other.audit_log != running.audit_log


BROKEN = """\
mode: stdio
host_id: host:gateway-desktop
signing_key: secrets/absent.pem
audit_log: held.jsonl
upstream:
  command: [no-such-program-here, serve]
  env:
    ENGRAM_ROOT_KEY: secrets/absent-root.key
  timeout_s: 900
stdio:
  tenant: acme
  workspace: support
  principal: user:alice
  purposes: [purpose:support-case]
  os_user: someone-else
  colour: blue
"""


def _located(problems: list[str], path: Path) -> list[tuple[int, str]]:
    located = []
    for problem in problems:
        match = _PROBLEM.match(problem)
        assert match is not None, problem
        assert match["file"] == str(path)
        located.append((int(match["line"]), match["field"]))
    return located


def test_every_problem_is_reported_at_once_at_its_keys_line(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(BROKEN, encoding="utf-8")
    held = GatewayAudit.open(tmp_path / "held.jsonl", "host:other")  # another client's gateway
    with held, pytest.raises(GatewayConfigError) as caught:
        preflight(path, env={})
    assert _located(caught.value.problems, path) == [
        (3, "signing_key"),
        (4, "audit_log"),
        (6, "upstream.command[0]"),
        (8, "upstream.env.ENGRAM_ROOT_KEY"),
        (9, "upstream.timeout_s"),
        (15, "stdio.os_user"),
        (16, "stdio.colour"),
    ]


def test_the_cli_prints_every_problem_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(BROKEN, encoding="utf-8")
    assert main(["gateway", "--config", str(path), "--check"]) == 2
    located = [line for line in capsys.readouterr().err.splitlines() if _PROBLEM.match(line)]
    assert len(located) == 6  # the held audit log is the one problem absent here


def test_an_unset_variable_is_one_problem_not_a_cascade(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        BROKEN.replace("signing_key: secrets/absent.pem", 'signing_key: "${NO_SUCH_DIR}/k.pem"'),
        encoding="utf-8",
    )
    with pytest.raises(GatewayConfigError) as caught:
        preflight(path, env={})
    fields = [field for _, field in _located(caught.value.problems, path)]
    assert fields.count("signing_key") == 1


def test_listening_off_loopback_without_allowed_hosts_is_located(tmp_path: Path) -> None:
    team = (EXAMPLES / "gateway" / "team.yaml").read_text(encoding="utf-8")
    exposed = team.replace("listen: {host: 127.0.0.1, port: 8787}", "listen: {host: 192.0.2.10}")
    assert exposed != team
    path = tmp_path / "team.yaml"
    path.write_text(exposed, encoding="utf-8")
    with pytest.raises(GatewayConfigError) as caught:
        preflight(path, env={"HOME": str(tmp_path)})
    assert ("http.listen.host") in [field for _, field in _located(caught.value.problems, path)]


def test_a_bare_program_is_found_beside_the_gateways_python_when_not_on_path() -> None:
    beside = Path(sys.executable).parent / "engram-memory"
    assert beside.is_file()  # the venv's console script
    assert resolve_program("engram-memory", {"PATH": "/nonexistent"}) == str(beside)
    assert resolve_program("./engram-memory", {"PATH": "/nonexistent"}) is None


def test_the_operator_page_exists_and_names_only_files_that_exist() -> None:
    from engram_memory.gateway.preflight import GUIDE

    root = EXAMPLES.parent
    page = (root / GUIDE).read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:tests|examples|service)/[\w./-]+\.(?:py|yaml))`", page))
    assert named
    assert [path for path in sorted(named) if not (root / path).is_file()] == []
