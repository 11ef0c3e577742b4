"""`engram-memory policy diff A B`: what changes, and which decisions change, from A to B.

A and B are each a bundle directory (`bundle.lock.json`, `bundle.tar.gz`, `policy.wasm`;
verified against its lock) or a source tree (a directory holding `rego/` and `policies/`,
built into a temporary bundle with the pinned OPA, Rego tests not run). The report has three
parts: the data changes in YAML terms (`data_diff.py`), the Rego modules added, removed or
changed (a unified diff each), and the decisions that differ on a corpus of calls generated
from both data documents (`decision_corpus.py`), each call evaluated by the embedded Wasm
engine against each bundle. Only a changed decision is a behaviour change: a reformatted
module or a data change no call can observe is listed but does not count.
"""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from engram_memory.contract.exceptions import BundleError, PolicyUnavailable
from engram_memory.policy.authoring.build import build_bundle
from engram_memory.policy.authoring.data_diff import DataChange, diff_data
from engram_memory.policy.authoring.decision_corpus import Call, generate_calls
from engram_memory.policy.authoring.diff_locations import SourceLocator
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    DATA_FILE,
    LOCK_FILE,
    read_tarball,
    verify_bundle,
)
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import BundleIdentity

Progress = Callable[[str], None]
SideKind = Literal["bundle", "source tree"]
_PROGRESS_EVERY = 1000


@dataclass(frozen=True, slots=True)
class PolicySide:
    """One side of the diff, loaded: where it came from, its Rego modules and data, and a
    verified bundle directory holding its Wasm."""

    given: str
    kind: SideKind
    identity: BundleIdentity
    modules: dict[str, bytes]
    data: dict[str, Any]
    bundle_dir: Path
    # A source tree's YAML, so data changes can point at their lines; None for a bundle.
    policies_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class RegoChange:
    module: str
    change: Literal["added", "removed", "changed"]
    unified_diff: str


@dataclass(frozen=True, slots=True)
class DecisionChange:
    call: Call
    before: object
    after: object

    def summary(self) -> str:
        return describe_result_change(self.before, self.after)


@dataclass(frozen=True, slots=True)
class PolicyDiff:
    a: PolicySide
    b: PolicySide
    data_changes: list[DataChange]
    # `file:line` of each data change in a source tree's YAML (None: bundles only).
    data_locations: list[str | None]
    rego_changes: list[RegoChange]
    calls: int
    decision_changes: list[DecisionChange]

    @property
    def behaviour_changed(self) -> bool:
        return bool(self.decision_changes)


def load_side(
    given: str, workdir: Path, *, opa_bin: Path | str | None, progress: Progress
) -> PolicySide:
    """Load one side: verify a bundle directory, or build a source tree into `workdir`.

    Raises:
        BundleError: neither a bundle directory nor a source tree; a bundle that does not
            match its lock; a build that fails.
        PolicyDataError: a source tree's policy data is invalid.
        OpaBinaryNotFound: a source tree needs the pinned OPA and there is none.
    """
    path = Path(given)
    kind: SideKind
    if (path / LOCK_FILE).is_file():
        kind, bundle_dir = "bundle", path
        progress(f"verifying bundle {given}")
    elif (path / "rego").is_dir() and (path / "policies").is_dir():
        kind, bundle_dir = "source tree", workdir
        progress(f"building source tree {given} (Wasm by the pinned OPA; Rego tests not run)")
        build_bundle(
            path / "rego",
            path / "policies",
            bundle_dir,
            label="policy-diff",
            opa_bin=opa_bin,
            run_tests=False,
            progress=lambda line: progress(f"  {line}"),
        )
    else:
        raise BundleError(
            f"{given}: neither a bundle directory ({LOCK_FILE}) "
            "nor a source tree (rego/ and policies/)"
        )
    identity = verify_bundle(bundle_dir)
    files = read_tarball(bundle_dir / BUNDLE_FILE)
    try:
        data = json.loads(files[DATA_FILE])
    except (KeyError, ValueError) as exc:
        raise BundleError(f"{given}: bundle has no readable {DATA_FILE}") from exc
    if not isinstance(data, dict):
        raise BundleError(f"{given}: {DATA_FILE} is not a JSON object")
    modules = {name: body for name, body in files.items() if name.endswith(".rego")}
    policies = path / "policies" if kind == "source tree" else None
    return PolicySide(given, kind, identity, modules, data, bundle_dir, policies)


def diff_rego(old: Mapping[str, bytes], new: Mapping[str, bytes]) -> list[RegoChange]:
    """Modules added, removed or changed (byte for byte), each with a unified diff."""
    changes: list[RegoChange] = []
    for module in sorted(set(old) | set(new)):
        before, after = old.get(module), new.get(module)
        if before == after:
            continue
        change: Literal["added", "removed", "changed"] = (
            "added" if before is None else "removed" if after is None else "changed"
        )
        lines = difflib.unified_diff(
            (before or b"").decode("utf-8", "replace").splitlines(keepends=True),
            (after or b"").decode("utf-8", "replace").splitlines(keepends=True),
            fromfile=f"a/{module}" if before is not None else "/dev/null",
            tofile=f"b/{module}" if after is not None else "/dev/null",
        )
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        changes.append(RegoChange(module, change, text))
    return changes


def _answer(engine: EmbeddedWasmEngine, call: Call) -> object:
    try:
        return engine.evaluate(call.path, call.policy_input).result
    except PolicyUnavailable as exc:
        # A bundle without this entrypoint, or one that traps, fails closed in service
        # (POLICY_UNAVAILABLE): that is a decision too, and it can change.
        return {"policy_unavailable": exc.detail}


def compare_decisions(
    a: PolicySide, b: PolicySide, calls: list[Call], progress: Progress
) -> list[DecisionChange]:
    """Evaluate every call against both bundles; the calls whose answers differ.

    Raises:
        BundleError: a bundle's Wasm cannot be loaded.
    """
    engines: list[EmbeddedWasmEngine] = []
    changes: list[DecisionChange] = []
    try:
        for side in (a, b):
            engines.append(EmbeddedWasmEngine(side.bundle_dir, memo_entries=0))
        for done, call in enumerate(calls, start=1):
            before, after = (_answer(engine, call) for engine in engines)
            if before != after:
                changes.append(DecisionChange(call, before, after))
            if done % _PROGRESS_EVERY == 0 or done == len(calls):
                progress(f"evaluated {done}/{len(calls)} calls, {len(changes)} changed")
    finally:
        for engine in engines:
            engine.close()
    return changes


def policy_diff(
    given_a: str, given_b: str, *, opa_bin: Path | str | None, progress: Progress
) -> PolicyDiff:
    """Load both sides and compare data, Rego and decisions.

    Raises:
        BundleError, PolicyDataError, OpaBinaryNotFound: see `load_side`.
    """
    with tempfile.TemporaryDirectory(prefix="engram-policy-diff-") as tmp:
        a = load_side(given_a, Path(tmp) / "a", opa_bin=opa_bin, progress=progress)
        b = load_side(given_b, Path(tmp) / "b", opa_bin=opa_bin, progress=progress)
        calls = generate_calls(a.data, b.data)
        progress(f"evaluating {len(calls)} calls against both bundles")
        changes = compare_decisions(a, b, calls, progress)
        data_changes = diff_data(a.data, b.data)
        return PolicyDiff(
            a=a,
            b=b,
            data_changes=data_changes,
            data_locations=_locations(a, b, data_changes),
            rego_changes=diff_rego(a.modules, b.modules),
            calls=len(calls),
            decision_changes=changes,
        )


def _locations(a: PolicySide, b: PolicySide, changes: list[DataChange]) -> list[str | None]:
    """Each change's line in B's YAML (in A's when it is a removal), where a side is a
    source tree."""
    old, new = (SourceLocator(s.policies_dir) if s.policies_dir else None for s in (a, b))
    located: list[str | None] = []
    for change in changes:
        removal = change.change.endswith(" removed") or " lost " in change.change
        first, second = (old, new) if removal else (new, old)
        where = first.locate(change) if first is not None else None
        if where is None and second is not None:
            where = second.locate(change)
        located.append(where)
    return located


def _compact(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _named(item: object) -> str:
    return str(item.get("name")) if isinstance(item, Mapping) else _compact(item)


def describe_result_change(before: object, after: object, prefix: str = "") -> str:
    """`allow false -> true; reasons gained x; redaction.max_packet_bytes 65536 -> 131072`:
    the members of a result that differ, nested objects by dotted path."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return f"{prefix or 'result'} {_compact(before)} -> {_compact(after)}".strip()
    parts = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        name = f"{prefix}{key}"
        if old == new:
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            parts.append(describe_result_change(old, new, f"{name}."))
        elif key == "classifiers" and isinstance(old, list) and isinstance(new, list):
            # Definitions are policy text (the data changes show them): name the classifiers.
            changed = sorted(
                {_named(item) for item in new if item not in old}
                | {_named(item) for item in old if item not in new}
            )
            parts.append(f"{name} changed: {', '.join(changed)}")
        elif isinstance(old, list) and isinstance(new, list):
            gained = [_compact(item) for item in new if item not in old]
            lost = [_compact(item) for item in old if item not in new]
            detail = "; ".join(
                part
                for part in (
                    f"gained {', '.join(gained)}" if gained else "",
                    f"lost {', '.join(lost)}" if lost else "",
                )
                if part
            )
            parts.append(f"{name} {detail or 'reordered'}")
        else:
            shown_old = "(absent)" if key not in before else _compact(old)
            shown_new = "(absent)" if key not in after else _compact(new)
            parts.append(f"{name} {shown_old} -> {shown_new}")
    return "; ".join(parts)


def _side_json(side: PolicySide) -> dict[str, object]:
    return {"given": side.given, "kind": side.kind, "revision": side.identity.revision}


def diff_as_json(diff: PolicyDiff) -> dict[str, object]:
    """The whole report for machines (`--json`)."""
    return {
        "a": _side_json(diff.a),
        "b": _side_json(diff.b),
        "behaviour_changed": diff.behaviour_changed,
        "data_changes": [
            {"scope": c.scope, "change": c.change, "location": where}
            for c, where in zip(diff.data_changes, diff.data_locations, strict=True)
        ],
        "rego_changes": [
            {"module": c.module, "change": c.change, "unified_diff": c.unified_diff}
            for c in diff.rego_changes
        ],
        "calls_evaluated": diff.calls,
        "decision_changes": [
            {
                "domain": c.call.domain,
                "call": c.call.description,
                "input": c.call.policy_input,
                "a": c.before,
                "b": c.after,
                "summary": c.summary(),
            }
            for c in diff.decision_changes
        ],
    }


def diff_as_text(diff: PolicyDiff, *, limit: int) -> str:
    """The report for people; at most `limit` decision changes are listed one per line."""
    out = [
        f"A: {diff.a.given} ({diff.a.kind}, revision {diff.a.identity.revision})",
        f"B: {diff.b.given} ({diff.b.kind}, revision {diff.b.identity.revision})",
        "",
        f"Data changes: {len(diff.data_changes) or 'none'}",
        *(
            f"  {where}: {change}" if where else f"  {change}"
            for change, where in zip(diff.data_changes, diff.data_locations, strict=True)
        ),
        "",
        f"Rego changes: {len(diff.rego_changes) or 'none'}",
    ]
    for rego in diff.rego_changes:
        out.append(f"  {rego.change}: {rego.module}")
        out.extend(f"    {line}" for line in rego.unified_diff.splitlines())
    by_domain = Counter(change.call.domain for change in diff.decision_changes)
    domains = ", ".join(f"{domain} {count}" for domain, count in sorted(by_domain.items()))
    heading = f"Decision changes: {len(diff.decision_changes)} of {diff.calls} calls"
    out += ["", heading + (f" ({domains})" if domains else "")]
    for change in diff.decision_changes[:limit]:
        out.append(f"  {change.call.domain} {change.call.description}: {change.summary()}")
    if len(diff.decision_changes) > limit:
        out.append(f"  ... and {len(diff.decision_changes) - limit} more (--json lists all)")
    out += ["", "Behaviour changed: " + ("yes" if diff.behaviour_changed else "no")]
    return "\n".join(out)


def run_diff(given_a: str, given_b: str, *, as_json: bool, limit: int, opa_bin: str | None) -> int:
    """`policy diff`: print the report; 0 no decision changed, 1 behaviour changed.

    Raises:
        BundleError, PolicyDataError, OpaBinaryNotFound: bad input (the CLI exits 2).
    """
    diff = policy_diff(given_a, given_b, opa_bin=opa_bin, progress=_stderr)
    if as_json:
        print(json.dumps(diff_as_json(diff), indent=2, sort_keys=True))
    else:
        print(diff_as_text(diff, limit=max(limit, 0)))
    return 1 if diff.behaviour_changed else 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)
