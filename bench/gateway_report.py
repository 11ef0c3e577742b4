"""The arithmetic and Markdown of bench/gateway.py: what the gateway adds, per call."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from bench.report import percentile

TARGET_MS = 1.0
TOOLS = ("capture", "request_admission", "search", "get", "forget")
Samples = dict[str, list[float]]


def _round_p50_differences(direct: list[Samples], gateway: list[Samples], tool: str) -> list[float]:
    return [
        statistics.median(g[tool]) - statistics.median(d[tool])
        for d, g in zip(direct, gateway, strict=True)
    ]


def merged(rounds: list[Samples]) -> Samples:
    merged: Samples = defaultdict(list)
    for samples in rounds:
        for label, values in samples.items():
            merged[label] += values
    return merged


def added_costs(measured: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per tool (and the floor): p50 through the gateway minus p50 direct, all samples, and
    the same difference per round (min / median / max)."""
    direct, gateway = merged(measured["direct"]), merged(measured["gateway"])
    floor = merged(measured["floor"])
    rows: dict[str, dict[str, float]] = {}
    floor_rounds = [
        statistics.median(f["through the gateway"]) - statistics.median(f["direct"])
        for f in measured["floor"]
    ]
    pairs = [("floor_echo", floor["direct"], floor["through the gateway"], floor_rounds)]
    for tool in TOOLS:
        per_round = _round_p50_differences(measured["direct"], measured["gateway"], tool)
        pairs.append((tool, direct[tool], gateway[tool], per_round))
    for label, d, g, per_round in pairs:
        rows[label] = {
            "direct p50": round(percentile(d, 0.5), 3),
            "gateway p50": round(percentile(g, 0.5), 3),
            "added p50": round(percentile(g, 0.5) - percentile(d, 0.5), 3),
            "added p50 per round min": round(min(per_round), 3),
            "added p50 per round median": round(statistics.median(per_round), 3),
            "added p50 per round max": round(max(per_round), 3),
        }
    return rows


def verdict_markdown(rows: dict[str, dict[str, float]], command: str) -> str:
    lines = [
        "",
        f"## Added by the gateway (target: <= {TARGET_MS:g} ms p50 per call)",
        "",
        "| call | direct p50 ms | through the gateway p50 ms | added p50 ms | added per round "
        "(min / median / max) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for label, row in rows.items():
        verdict = "met" if row["added p50"] <= TARGET_MS else "missed"
        spread = (
            f"{row['added p50 per round min']} / {row['added p50 per round median']} / "
            f"{row['added p50 per round max']}"
        )
        lines.append(
            f"| {label} | {row['direct p50']} | {row['gateway p50']} | {row['added p50']} | "
            f"{spread} | {verdict} |"
        )
    lines += [
        "",
        "floor_echo: the do-nothing tool direct vs through the gateway (the hop alone). "
        "forget through the gateway includes the elicitation round trip to the client and "
        "the gateway's fsynced audit entry of the human's answer; directly, the host mints "
        "the confirmation itself.",
        "",
        f"Reproduce: `.venv/bin/{command}` from the repository root.",
    ]
    return "\n".join(lines) + "\n"
