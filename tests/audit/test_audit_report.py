"""`audit report` and `audit pack` on the real store of test_audit_query's scenario.

The scenario (a real server driven over MCP under two bundle revisions, holds, a forget and
a withdraw with confirmations) is built again for this module. The report is opened in a
real headless Chromium: its DOM must carry the same figures `audit query` answers for the
same period, and every image it names must load. The pack must verify with the public key
alone, and a flipped byte in any of its files must fail that check naming the file.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from engram_memory.admin import report_plots
from engram_memory.admin.audit_pack import write_policy_texts
from engram_memory.admin.identities import load_identities
from engram_memory.cli.main import main
from engram_memory.contract.digests import principal_ref
from engram_memory.contract.exceptions import ConfigurationError, QueryUsageError
from engram_memory.policy.authoring.default_bundle import default_bundle_dir
from engram_memory.policy.bundle import load_bundle_identity
from tests.audit.test_audit_query import Scenario, scenario
from tests.cli_runner import run_cli

pytestmark = pytest.mark.e2e
__all__ = ["scenario"]  # the module-scoped fixture, built again for this module

PERIOD = ("2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z")
SECTIONS = (
    "calls_per_day",
    "refusals_by_reason",
    "revisions_in_force",
    "decisions_per_revision",
    "admissions_held",
    "who_approved_destructive_calls",
)
# A page beside report.html that opens it in a frame and, once it has loaded, writes the
# report's body and each image's load result into its own DOM for --dump-dom to print.
PROBE = """<!DOCTYPE html><html><body><iframe id="r" src="report.html"></iframe><script>
document.getElementById('r').addEventListener('load', () => {
  const doc = document.getElementById('r').contentDocument;
  const out = document.createElement('div'); out.id = 'probe';
  for (const img of doc.images) {
    const p = document.createElement('p'); p.className = 'image';
    p.textContent = img.getAttribute('src') + ' ' +
      (img.complete && img.naturalWidth > 0 ? 'loaded' : 'broken');
    out.appendChild(p);
  }
  const copy = document.createElement('div'); copy.id = 'report';
  copy.innerHTML = doc.body.innerHTML; out.appendChild(copy);
  document.body.appendChild(out);
});
</script></body></html>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium not installed (scripts/test installs it: ensure_chromium)")
    return found


def _dump_dom(page: Path) -> str:
    done = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--virtual-time-budget=10000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class _Tables(HTMLParser):
    """Cells of each `data-query` table, element ids' text, and the probe's image lines."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.ids: dict[str, str] = {}
        self.images: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._id: str | None = None
        self._image = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "table" and named.get("data-query"):
            self._table = str(named["data-query"])
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        if named.get("id"):
            self._id = str(named["id"])
            self.ids[self._id] = ""
        self._image = tag == "p" and named.get("class") == "image"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None
        self._id = None
        self._image = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._id is not None:
            self.ids[self._id] += data
        if self._image:
            self.images.append(data)


def _query_csv(
    capsys: pytest.CaptureFixture[str], scenario: Scenario, name: str
) -> list[list[str]]:
    capsys.readouterr()
    argv = ["audit", "query", name, "--export", str(scenario.export), "--format=csv"]
    argv += [f"--param=from={PERIOD[0]}", f"--param=to={PERIOD[1]}"]
    assert main(argv) == 0
    return list(csv.reader(io.StringIO(capsys.readouterr().out)))


def _report(scenario: Scenario, out: Path, *extra: str) -> None:
    argv = ["audit", "report", "--data-dir", str(scenario.data_dir), "--out", str(out)]
    assert main([*argv, "--from", PERIOD[0], "--to", PERIOD[1], *extra]) == 0


def test_the_report_renders_in_chromium_with_the_figures_audit_query_gives(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "report"
    _report(scenario, out)
    (out / "probe.html").write_text(PROBE, encoding="utf-8")
    dom = _Tables()
    dom.feed(_dump_dom(out / "probe.html"))
    expected_images = {f"{name}.png" for name in SECTIONS if (out / f"{name}.png").exists()}
    assert {"calls_per_day.png", "refusals_by_reason.png", "revisions_in_force.png"} <= (
        expected_images
    )
    assert sorted(dom.images) == sorted(f"{name} loaded" for name in expected_images)
    answers = {name: _query_csv(capsys, scenario, name) for name in SECTIONS}
    for name in SECTIONS:  # every row of every section, cell for cell
        assert answers[name][1:], name  # the scenario gives each section rows
        assert dom.tables[name] == answers[name], name
    calls = answers["calls_per_day"]
    assert int(dom.ids["total-calls"]) == sum(int(row[1]) for row in calls[1:])
    refusals = sum(int(row[1]) for row in answers["refusals_by_reason"][1:])
    assert int(dom.ids["total-refusals"]) == refusals > 0
    assert refusals == sum(int(row[2]) for row in calls[1:])
    decisions = answers["decisions_per_revision"]
    assert int(dom.ids["total-decisions"]) == sum(int(row[5]) for row in decisions[1:])
    assert int(dom.ids["total-revisions"]) == 2
    assert int(dom.ids["total-held"]) == 3
    assert int(dom.ids["held-pending"]) == 1
    assert int(dom.ids["total-destructive"]) == 2
    assert dom.ids["verification-result"] == "verified"


def test_a_narrower_period_narrows_every_figure(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    since = scenario.boundary.isoformat() + "Z"
    out = tmp_path / "later"
    argv = ["audit", "report", "--export", str(scenario.export), "--out", str(out)]
    assert main([*argv, "--from", since]) == 0
    dom = _Tables()
    dom.feed((out / "report.html").read_text(encoding="utf-8"))
    assert int(dom.ids["total-held"]) == 2  # the pending and the withdrawn one
    assert int(dom.ids["total-destructive"]) == 1  # the withdraw
    # the shipped revision was still in force at the boundary (the restart came after it)
    assert [row[0] for row in dom.tables["revisions_in_force"][1:]] == list(scenario.revisions)


def test_without_matplotlib_the_report_keeps_every_figure_as_a_table(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_plots, "available", lambda: False)
    out = tmp_path / "tables"
    _report(scenario, out)
    dom = _Tables()
    html = (out / "report.html").read_text(encoding="utf-8")
    dom.feed(html)
    assert "<img" not in html
    assert not list(out.glob("*.png"))
    assert dom.ids["plot-note"] == report_plots.MISSING_LINE
    assert set(SECTIONS) <= set(dom.tables)


def _identities(path: Path) -> Path:
    path.write_text(
        "principal_id,display_name,groups\n"
        "user:alice,Alice Example,support;agents\n"
        "human:dana,Dana Records,records-officers\n",
        encoding="utf-8",
    )
    return path


def test_identities_show_names_in_audit_query_and_the_report(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    directory = _identities(tmp_path / "people.csv")
    capsys.readouterr()
    argv = ["audit", "query", "admissions_held", "--export", str(scenario.export)]
    assert main([*argv, "--format=json", "--identities", str(directory)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["requested_by"] for r in rows} == {"Alice Example [support, agents]"}
    assert [r["resolved_by"] for r in rows] == [
        "Dana Records [records-officers]",
        None,
        "Alice Example [support, agents]",
    ]
    out = tmp_path / "named"
    _report(scenario, out, "--identities", str(directory))
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Dana Records [records-officers]" in html
    assert principal_ref("acme", "human:dana") not in html


def test_an_identity_file_without_its_columns_exits_2(scenario: Scenario, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("id,name\nuser:alice,Alice\n", encoding="utf-8")
    with pytest.raises(QueryUsageError):
        load_identities(bad)
    argv = ["audit", "query", "admissions_held", "--export", str(scenario.export)]
    assert main([*argv, "--identities", str(bad)]) == 2
    assert (
        main(
            [
                "audit",
                "report",
                "--export",
                str(scenario.export),
                "--out",
                str(tmp_path / "r"),
                "--identities",
                str(bad),
            ]
        )
        == 2
    )
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def pack(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pack") / "pack"
    # A checkpoint on request, kept in the store (it opens the stopped store as the service,
    # so it runs after this module's report tests, which hold the store against the export).
    who = ["--tenant", "acme", "--workspace", "support", "--operator", "human:dana"]
    kept = out.parent / "requested.json"
    done = run_cli(scenario.env, "audit", "checkpoint", "--out", str(kept), *who)
    assert done.returncode == 0, done.stderr
    secrets = scenario.data_dir.parent / "secrets"
    argv = ["audit", "pack", "--data-dir", str(scenario.data_dir), "--out", str(out)]
    argv += ["--checkpoint-key", str(secrets / "checkpoint.pem")]
    argv += ["--bundle", str(scenario.data_dir.parent / "bundle-v2")]
    assert main([*argv, "--from", PERIOD[0], "--to", PERIOD[1]]) == 0
    return out


def _verify(pack: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    key = pack.parent / "kept-public.pem"
    if not key.exists():
        shutil.copy(pack / "checkpoint-public.pem", key)
    code = main(["audit", "pack", "--verify", str(pack), "--checkpoint-public-key", str(key)])
    return code, capsys.readouterr().out


def test_the_pack_holds_every_part_and_verifies(
    pack: Path, scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _verify(pack, capsys)
    assert code == 0, out
    manifest = json.loads((pack / "manifest.json").read_text(encoding="utf-8"))
    listed = {f["path"] for f in manifest["files"]}
    assert {
        "export/manifest.json",
        "export/audit_entries.parquet",
        "export/checkpoint.json",
        "report/report.html",
        "verification.txt",
        "checkpoint-public.pem",
    } <= listed
    shipped = load_bundle_identity(default_bundle_dir())
    texts = {r["revision"]: r for r in manifest["revisions"]}
    assert set(texts) == set(scenario.revisions)
    assert texts[shipped.revision]["source"] == "shipped"
    for revision in texts.values():
        assert any(p.startswith(revision["text"] + "/") and p.endswith(".rego") for p in listed)
    kept = sorted(f"checkpoints/{p.name}" for p in (pack / "checkpoints").iterdir())
    assert kept  # at least the one requested in the fixture
    assert set(kept) <= listed
    transcript = (pack / "verification.txt").read_text(encoding="utf-8")
    assert "exit 0" in transcript
    assert "extends checkpoint" in transcript


def test_a_flipped_byte_in_any_pack_file_fails_naming_it(
    pack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = sorted(p for p in pack.rglob("*") if p.is_file())
    assert len(files) > 10
    for path in files:
        name = path.relative_to(pack).as_posix()
        original = path.read_bytes()
        flipped = bytearray(original)
        flipped[len(flipped) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
        try:
            code, out = _verify(pack, capsys)
        finally:
            path.write_bytes(original)
        assert code == (5 if name == "manifest.json" else 1), name
        assert name in out, (name, out)
    assert _verify(pack, capsys)[0] == 0


def test_a_file_added_to_the_pack_fails_verification(
    pack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = pack / "report" / "note.txt"
    extra.write_text("added later\n", encoding="utf-8")
    try:
        code, out = _verify(pack, capsys)
    finally:
        extra.unlink()
    assert code == 1
    assert "report/note.txt" in out


def test_a_revision_whose_bundle_is_not_at_hand_is_listed_without_text(tmp_path: Path) -> None:
    shipped = load_bundle_identity(default_bundle_dir())
    unknown = ("v9+sha256:" + "0" * 64, "sha256:" + "0" * 64)
    texts = write_policy_texts(
        [(shipped.revision, shipped.digest), unknown], {"shipped": default_bundle_dir()}, tmp_path
    )
    by_revision = {t.revision: t for t in texts}
    assert by_revision[unknown[0]].directory is None
    found = by_revision[shipped.revision].directory
    assert found is not None
    assert list((tmp_path / found).rglob("*.rego"))


def test_a_bundle_directory_that_does_not_verify_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(default_bundle_dir(), bundle)
    tarball = bundle / "bundle.tar.gz"
    tarball.write_bytes(tarball.read_bytes() + b"\0")
    with pytest.raises(ConfigurationError):
        write_policy_texts([], {"edited": bundle}, tmp_path / "out")


def test_a_pack_into_an_existing_directory_or_without_a_key_exits_2(
    scenario: Scenario, tmp_path: Path
) -> None:
    argv = ["audit", "pack", "--data-dir", str(scenario.data_dir)]
    key = scenario.data_dir.parent / "secrets" / "checkpoint.pem"
    assert main([*argv, "--out", str(tmp_path), "--checkpoint-key", str(key)]) == 2  # exists
    assert main([*argv, "--out", str(tmp_path / "new"), "--checkpoint-key", ""]) == 2
    assert not (tmp_path / "new").exists()
