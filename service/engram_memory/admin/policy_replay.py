"""`policy replay`: what a candidate bundle would have decided about the recorded decisions.

Every receipt decided in the window whose input was kept (store/decision_inputs.py) is decided
again by the candidate bundle, on the embedded Wasm engine or a private OPA server, and its
new result compared with the recorded one. A receipt whose input was pruned (or never kept)
is counted as missing, never guessed. The store is opened read-only and nothing is written
anywhere: a replay is what an author runs before a rollout.

A change is named by the decision's verdict where the domain has one (`allow`, `approved`,
`required`, admission's `decision`): `allow→deny`, `accept→reject`; with the same verdict and
other fields changed (obligations: redaction, visible tools, rate limits, reasons) it is
`changed: <fields>`; a result the candidate cannot give at all is `→unavailable` (the service
would refuse the call: POLICY_UNAVAILABLE).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_memory.contract.canonical import JsonValue, canonical_text, normalize
from engram_memory.contract.exceptions import (
    ConfigurationError,
    PolicyStale,
    PolicyUnavailable,
    StoreOpenFailed,
)
from engram_memory.policy.bundle import BUNDLE_FILE, LOCK_FILE, WASM_FILE
from engram_memory.policy.embedded import EmbeddedWasmEngine
from engram_memory.policy.engine import PolicyEngine
from engram_memory.store import decision_inputs
from engram_memory.store.database import Database
from engram_memory.store.decision_inputs import RecordedDecision

EMBEDDED = "embedded"
OPA = "opa"
# The fields that carry a domain's verdict, in the order they are looked for.
_VERDICTS = ("allow", "approved", "decision", "required")
UNAVAILABLE = "unavailable"
PROGRESS_EVERY = 1000


@dataclass
class GroupReplay:
    """The replay of one tenant's decisions of one domain."""

    replayed: int = 0
    unchanged: int = 0
    missing: int = 0  # receipts whose input was pruned or never kept
    flips: Counter[str] = field(default_factory=Counter)
    sample: list[dict[str, str]] = field(default_factory=list)

    @property
    def flipped(self) -> int:
        return sum(self.flips.values())

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "replayed": self.replayed,
            "unchanged": self.unchanged,
            "flipped": self.flipped,
            "missing": self.missing,
            "flips": [{"change": c, "count": n} for c, n in sorted(self.flips.items())],
            "sample": list(self.sample),
        }


@dataclass
class ReplayReport:
    bundle_revision: str
    engine: str
    from_ms: int
    to_ms: int
    groups: dict[tuple[str, str], GroupReplay] = field(default_factory=dict)

    def group(self, tenant: str, domain: str) -> GroupReplay:
        return self.groups.setdefault((tenant, domain), GroupReplay())

    @property
    def flipped(self) -> int:
        return sum(g.flipped for g in self.groups.values())

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "bundle_revision": self.bundle_revision,
            "engine": self.engine,
            "from_ms": self.from_ms,
            "to_ms": self.to_ms,
            "replayed": sum(g.replayed for g in self.groups.values()),
            "flipped": self.flipped,
            "missing": sum(g.missing for g in self.groups.values()),
            "groups": [
                {"tenant": tenant, "domain": domain, **group.as_json()}
                for (tenant, domain), group in sorted(self.groups.items())
            ],
        }


def verdict_of(result: Mapping[str, Any]) -> str | None:
    """A result's verdict as a word (`allow`/`deny`, `confirm`/`no-confirm`, admission's
    own), None for a domain without one (discovery)."""
    for key in _VERDICTS:
        if key in result:
            value = result[key]
            if key == "required":
                return "confirm" if value is True else "no-confirm"
            if isinstance(value, bool):
                return "allow" if value else "deny"
            return str(value)
    return None


def change_between(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> str | None:
    """How `new` differs from `old` (None: it does not); `new` None: no result."""
    before = verdict_of(old) or "result"
    if new is None:
        return f"{before}→{UNAVAILABLE}"
    after = verdict_of(new) or "result"
    if before != after:
        return f"{before}→{after}"
    fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return None if not fields else "changed: " + ", ".join(fields)


def tenant_of(recorded: RecordedDecision, policy_input: Mapping[str, Any] | None) -> str:
    """The decision's tenant: its input's, else its scope's (`tenant:<t>/workspace:<w>`)."""
    if policy_input is not None and isinstance(policy_input.get("tenant"), str):
        return str(policy_input["tenant"])
    head = recorded.scope_ref.partition("/")[0]
    return head.removeprefix("tenant:") if head.startswith("tenant:") else recorded.scope_ref


def domain_of(policy_path: str) -> str:
    """`engram/authz/decision` -> `authz`."""
    parts = policy_path.split("/")
    return parts[1] if len(parts) == 3 else policy_path


def _decide(
    report: ReplayReport, engine: PolicyEngine, path: str, policy_input: Mapping[str, Any]
) -> Any:
    """The candidate's normalized result, None when it gives none (fail closed)."""
    try:
        answer = engine.evaluate(path, policy_input)
    except (PolicyUnavailable, PolicyStale):
        return None
    if not isinstance(answer.result, Mapping):
        return None
    report.bundle_revision = answer.revision  # what the engine itself says it decided with
    return json.loads(canonical_text(normalize(dict(answer.result))))


def replay(
    data_dir: Path,
    engine: PolicyEngine,
    bundle_revision: str,
    window: tuple[int, int],
    *,
    tenant: str | None = None,
    sample_size: int = 20,
    progress: Callable[[str], None] = lambda _: None,
) -> ReplayReport:
    """Re-decide the decisions of `data_dir` made in `window` ([from, to) epoch ms) with
    `engine`, opening the store read-only.

    Raises:
        ConfigurationError: the store cannot be opened (a server holds it, or it is missing).
        StoreUnavailable: a read failed.
    """
    from_ms, to_ms = window
    report = ReplayReport(bundle_revision, engine.engine_id, from_ms, to_ms)
    try:
        database = Database.open(data_dir, read_only=True)
    except StoreOpenFailed as exc:
        raise ConfigurationError(
            f"cannot open the store in {data_dir} read-only: a running server holds it "
            "(replay a backup copy, or stop it) or there is none"
        ) from exc
    try:
        with database.transaction() as tx:
            total = decision_inputs.count_recorded(tx, from_ms, to_ms)
            progress(f"replay: {total} recorded decisions in the window")
            for done, recorded in enumerate(decision_inputs.recorded(tx, from_ms, to_ms), 1):
                _replay_one(report, engine, recorded, tenant, sample_size)
                if done % PROGRESS_EVERY == 0:
                    progress(f"replay: {done}/{total}")
    finally:
        database.close()
    progress(f"replay: done, {report.flipped} decisions would change")
    return report


def _replay_one(
    report: ReplayReport,
    engine: PolicyEngine,
    recorded: RecordedDecision,
    tenant: str | None,
    sample_size: int,
) -> None:
    policy_input = None if recorded.input_json is None else json.loads(recorded.input_json)
    who = tenant_of(recorded, policy_input)
    if tenant is not None and who != tenant:
        return
    group = report.group(who, domain_of(recorded.policy_path))
    if policy_input is None or recorded.result_json is None:
        group.missing += 1
        return
    group.replayed += 1
    change = change_between(
        json.loads(recorded.result_json),
        _decide(report, engine, recorded.policy_path, policy_input),
    )
    if change is None:
        group.unchanged += 1
        return
    group.flips[change] += 1
    if len(group.sample) < sample_size:
        group.sample.append(
            {"decision_id": recorded.decision_id, "audit_id": recorded.audit_id, "change": change}
        )


@contextmanager
def candidate_engine(
    bundle: Path, engine: str, opa_bin: str | None = None
) -> Iterator[tuple[PolicyEngine, str]]:
    """The engine deciding with the candidate `bundle` (a bundle directory, or the
    bundle.tar.gz in one; a lone tarball with `opa` only) and its revision.

    Raises:
        ConfigurationError: the bundle is not usable with that engine (BundleError and the
            OPA start errors are ConfigurationErrors too).
    """
    directory = bundle if bundle.is_dir() else bundle.parent
    has_directory = (directory / LOCK_FILE).is_file() and (
        bundle.is_dir() or bundle.name == BUNDLE_FILE
    )
    if engine == EMBEDDED:
        if not has_directory or not (directory / WASM_FILE).is_file():
            raise ConfigurationError(
                "the embedded engine needs the bundle directory (bundle.lock.json, "
                "policy.wasm); name it, or use --engine opa with the tarball"
            )
        embedded = EmbeddedWasmEngine(directory)
        try:
            yield embedded, embedded.identity.revision
        finally:
            embedded.close()
        return
    if engine != OPA:
        raise ConfigurationError(f"--engine must be {EMBEDDED} or {OPA}")
    from engram_memory.policy.bundle import verify_bundle
    from engram_memory.policy.opa_server import OpaServerEngine, start_opa_server

    tarball = directory / BUNDLE_FILE if bundle.is_dir() else bundle
    if not tarball.is_file():
        raise ConfigurationError(f"no bundle at {bundle}")
    revision = verify_bundle(directory).revision if has_directory else "(as OPA reports it)"
    with start_opa_server(tarball, opa_bin) as url:
        server = OpaServerEngine(url, timeout_seconds=10.0)
        try:
            yield server, revision
        finally:
            server.close()
