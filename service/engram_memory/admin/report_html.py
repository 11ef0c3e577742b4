"""The audit report as one HTML file: inline CSS, no script, no remote resource.

Every value is escaped (a stored value can never add markup), and the only files it loads are
the PNG plots written beside it. Each section's table is the named query's answer, marked
with `data-query="NAME"` so a reader (or a test) can hold it against `audit query NAME`;
the headline totals carry ids (`total-calls`, `total-refusals`, ...).
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from statistics import median
from typing import Any

from engram_memory.admin.audit_output import instant_text, text_value
from engram_memory.admin.report_data import SECTIONS, QueryAnswer, ReportData, resolution_seconds

MAX_ROWS = 500  # per table; the query gives the rest

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:78em}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
td{overflow-wrap:anywhere}
th{background:#f3f3f3}td.num{text-align:right}
.note{color:#555;font-style:italic}.ok{color:#1a7f37}.failed{color:#b42318;font-weight:bold}
dl.totals{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}
dt{font-weight:bold}pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap}
code{font-size:.9em}img{max-width:100%;border:1px solid #eee}
"""


def _range_text(moment: datetime | None, unbounded: str) -> str:
    return unbounded if moment is None else instant_text(moment)


def _cell(value: Any) -> str:
    css = ' class="num"' if isinstance(value, int | float) and not isinstance(value, bool) else ""
    return f"<td{css}>{escape(text_value(value))}</td>"


def _table(answer: QueryAnswer) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in answer.columns)
    body = "".join(
        "<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in answer.rows[:MAX_ROWS]
    )
    more = (
        f'<p class="note">{len(answer.rows) - MAX_ROWS} more rows: run the query below.</p>'
        if len(answer.rows) > MAX_ROWS
        else ""
    )
    return (
        f'<table data-query="{escape(answer.name)}" data-rows="{len(answer.rows)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"
    )


def _query_line(name: str, data: ReportData) -> str:
    params = "".join(
        f" --param {key}={instant_text(moment)}"
        for key, moment in (("from", data.start), ("to", data.end))
        if moment is not None
    )
    command = f"engram-memory audit query {name}{params} --export DIR"
    return f"<p>Same rows: <code>{escape(command)}</code></p>"


def _held_summary(held: QueryAnswer) -> str:
    waits = resolution_seconds(held)
    pending = sum(1 for r in held.column("resolution") if r == "pending")
    middle = f"{median(waits):.1f}" if waits else "n/a"
    longest = f"{max(waits):.1f}" if waits else "n/a"
    return (
        '<dl class="totals">'
        f'<dt>held</dt><dd id="held-total">{len(held.rows)}</dd>'
        f'<dt>resolved</dt><dd id="held-resolved">{len(waits)}</dd>'
        f'<dt>still pending</dt><dd id="held-pending">{pending}</dd>'
        f"<dt>median seconds to resolution</dt><dd>{middle}</dd>"
        f"<dt>longest seconds to resolution</dt><dd>{longest}</dd></dl>"
    )


def _totals(data: ReportData) -> str:
    answers = data.answers
    revisions = {str(r) for r in answers["revisions_in_force"].column("bundle_revision")}
    decisions = sum(int(v) for v in answers["decisions_per_revision"].column("decisions"))
    destructive = len(answers["who_approved_destructive_calls"].rows)
    return (
        '<dl class="totals">'
        f'<dt>audited calls</dt><dd id="total-calls">{data.total_calls}</dd>'
        f'<dt>refusals</dt><dd id="total-refusals">{data.total_refusals}</dd>'
        f'<dt>policy decisions</dt><dd id="total-decisions">{decisions}</dd>'
        f'<dt>bundle revisions in force</dt><dd id="total-revisions">{len(revisions)}</dd>'
        f'<dt>admissions held</dt><dd id="total-held">{len(answers["admissions_held"].rows)}</dd>'
        f'<dt>destructive or confirmed calls</dt><dd id="total-destructive">{destructive}</dd>'
        "</dl>"
    )


def _verification(lines: list[str]) -> str:
    if not lines:
        return '<p class="note">No verification was run for this report.</p>'
    failed = any(line.startswith("FAILED") or ": FAILED" in line for line in lines)
    verdict = (
        '<p id="verification-result" class="failed">FAILED</p>'
        if failed
        else '<p id="verification-result" class="ok">verified</p>'
    )
    return verdict + "<pre>" + escape("\n".join(lines)) + "</pre>"


def render_report(
    data: ReportData, images: dict[str, str], plot_note: str | None, generated_at: datetime
) -> str:
    """The report's HTML text."""
    start = _range_text(data.start, "the first entry")
    end = _range_text(data.end, "the last entry")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>engram-memory audit report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>engram-memory audit report</h1>",
        f'<p>Period: <span id="period-from">{escape(start)}</span> (inclusive) to '
        f'<span id="period-to">{escape(end)}</span> (exclusive), UTC. Generated '
        f"{escape(instant_text(generated_at))}.</p>",
        _totals(data),
    ]
    if plot_note:
        parts.append(f'<p class="note" id="plot-note">{escape(plot_note)}</p>')
    parts.append("<h2>Chain and checkpoint verification</h2>")
    parts.append(_verification(data.verification))
    for name, title in SECTIONS:
        answer = data.answers[name]
        parts.append(f'<h2 id="section-{escape(name)}">{escape(title)}</h2>')
        if name in images:
            parts.append(f'<img src="{escape(images[name])}" alt="{escape(title)}">')
        if name == "admissions_held":
            parts.append(_held_summary(answer))
        parts.append(_table(answer) if answer.rows else '<p class="note">None in this period.</p>')
        parts.append(_query_line(name, data))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
