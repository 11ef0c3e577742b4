"""`engram-memory policy test | explain | effective`: the compliance author's own checks.

Exit codes: 0 ok; 1 a test failed; 2 bad input (one line on stderr, via ConfigurationError).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR

if TYPE_CHECKING:
    from engram_memory.policy.authoring.source_map import SourceMap

COMMANDS = ("test", "explain", "effective")


def _binding_flags(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--tenant", required=required, help="the bound tenant")
    parser.add_argument("--workspace", required=required, help="the bound workspace")
    parser.add_argument("--principal", required=required, help="the bound principal (user:...)")
    parser.add_argument("--purpose", help="the bound purpose (purpose:...)")
    parser.add_argument(
        "--group", action="append", default=[], help="a group:<name> of the caller (repeatable)"
    )
    parser.add_argument("--bundle", default=str(DEFAULT_BUNDLE_DIR), help="bundle directory")
    parser.add_argument("--opa", help="evaluate on this OPA server URL instead of embedded Wasm")
    parser.add_argument(
        "--policies", help="YAML sources of the bundle, for file:line (default ./policies)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_parsers(policy_sub: Any) -> None:
    """Register `test`, `explain` and `effective` under `engram-memory policy`."""
    test = policy_sub.add_parser("test", help="run Rego and tenant tests on the compiled data")
    test.add_argument("--rego", default="rego", help="Rego source directory")
    test.add_argument("--policies", default="policies", help="policy YAML directory")
    test.add_argument("--tests", help="tenant tests directory (default <policies>/tests)")
    test.add_argument("--coverage", action="store_true", help="report Rego coverage per module")
    test.add_argument("--json", action="store_true", help="machine-readable output")
    test.add_argument("--opa", help="OPA binary (default $ENGRAM_OPA_BIN, PATH, tool cache)")

    explain = policy_sub.add_parser("explain", help="explain the decisions of one call")
    _binding_flags(explain, required=False)
    explain.add_argument("--agent", help="the bound agent id")
    explain.add_argument("--call", help="JSON file {binding: {...}, call: {...}}")
    explain.add_argument("--tool", help="the tool called (a memory tool's name)")
    explain.add_argument("--now", help="instant of the call (default 2026-01-01T00:00:00.000Z)")
    explain.add_argument("--host-memory-disabled", action="store_true")
    explain.add_argument("--derivative-rule", help="capture: retain | make-ineligible")
    explain.add_argument("--expires-at", help="capture: requested expiry (instant)")
    explain.add_argument("--family", action="append", help="capture: a family_ref (repeatable)")
    explain.add_argument("--evidence-ref", help="request_admission: the evidence_ref")
    explain.add_argument("--component-kind", action="append", help="request_admission")
    explain.add_argument("--citations", type=int, help="request_admission: citation count")
    explain.add_argument("--source-ref", action="append", help="request_admission")
    explain.add_argument("--attested", action="store_true", help="request_admission")
    explain.add_argument(
        "--text", help="capture / request_admission: sample content for the content classifiers"
    )
    explain.add_argument("--approver", help="a confirmed call: the approving human (human:...)")
    explain.add_argument(
        "--approver-group", action="append", help="a group the host asserts for the approver"
    )
    explain.add_argument("--operator", help="maintenance: the host operator (human:...)")
    explain.add_argument("--authority", help="maintenance: read | maintain")
    explain.add_argument("--operation", help="maintenance: the operation name")

    effective = policy_sub.add_parser("effective", help="list what one binding may do")
    _binding_flags(effective, required=True)
    effective.add_argument("--operator", help="also show this host operator's authority")


def _given(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value not in (None, [], False)}


def _explain_document(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    binding: dict[str, Any] = {}
    call: dict[str, Any] = {}
    if args.call is not None:
        try:
            document = json.loads(Path(args.call).read_text("utf-8"))
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigurationError(f"{args.call}: cannot be read ({reason})") from None
        except ValueError:
            raise ConfigurationError(f"{args.call}: not a JSON document") from None
        shape = f"{args.call}: expected {{binding: {{...}}, call: {{...}}}}"
        if not isinstance(document, dict) or set(document) - {"binding", "call"}:
            raise ConfigurationError(shape)
        given_binding, given_call = document.get("binding") or {}, document.get("call") or {}
        if not isinstance(given_binding, dict) or not isinstance(given_call, dict):
            raise ConfigurationError(shape)
        binding, call = dict(given_binding), dict(given_call)
    binding |= _given(
        tenant=args.tenant,
        workspace=args.workspace,
        principal=args.principal,
        purpose=args.purpose,
        groups=args.group,
        agent=args.agent,
    )
    candidate = _given(
        evidence_ref=args.evidence_ref,
        component_kinds=args.component_kind,
        citation_count=args.citations,
        source_refs=args.source_ref,
        has_attestation=args.attested,
    )
    call |= _given(
        tool=args.tool,
        now=args.now,
        derivative_rule=args.derivative_rule,
        expires_at=args.expires_at,
        family_refs=args.family,
        operator=args.operator,
        authority=args.authority,
        operation=args.operation,
        approver=args.approver,
        approver_groups=args.approver_group,
        text=args.text,
    )
    if args.host_memory_disabled:
        call["host_memory_enabled"] = False
    if candidate:
        call["candidate"] = {**dict(call.get("candidate") or {}), **candidate}
    if "tool" not in call:
        raise ConfigurationError("name the tool called (--tool or call.tool in --call)")
    return binding, call


def _source_map(args: argparse.Namespace, data: bytes) -> SourceMap | None:
    """The source map of the bundle's YAML, or None (with a note) when the sources at hand
    are not what the bundle was built from (line numbers would point at other text)."""
    from engram_memory.contract.canonical import canonical_json
    from engram_memory.policy.authoring.data_compiler import compile_policies
    from engram_memory.policy.authoring.default_bundle import default_sources
    from engram_memory.policy.authoring.source_map import build_source_map

    if args.policies is not None:
        policies = Path(args.policies)
    elif Path("policies").is_dir():
        policies = Path("policies")  # an author runs this where their sources are
    else:
        try:
            policies = default_sources()[1]
        except ConfigurationError:
            print(
                "note: no policies/ sources at hand: entries shown without file:line",
                file=sys.stderr,
            )
            return None
    if canonical_json(compile_policies(policies)) != data:
        print(
            f"note: {policies} is not what the bundle was built from: file:line omitted",
            file=sys.stderr,
        )
        return None
    return build_source_map(policies)


def _print_explanation(explanation: dict[str, Any]) -> None:
    binding, call = explanation["binding"], explanation["call"]
    print(f"bundle {explanation['bundle_revision']} (engine {explanation['engine']})")
    who = binding.get("principal") or call.get("operator")
    print(f"call {call['tool']} by {who} in {binding['tenant']}/{binding['workspace']}")
    print(f"verdict: {explanation['verdict']}")
    for item in explanation["domains"]:
        # Reasons last: the verdict fields first, then why.
        summary = {k: v for k, v in item["summary"].items() if v is not None and k != "reasons"}
        summary["reasons"] = item["summary"].get("reasons", [])
        print(f"\n{item['domain']} ({item['entrypoint']})")
        print("  decision: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in summary.items()))
        for source in item["sources"]:
            print(f"  because: {source['why']}  [{source['source']}]")
        print("  input: " + json.dumps(item["input"], sort_keys=True))


def _print_effective(report: dict[str, Any]) -> None:
    binding = report["binding"]
    print(f"bundle {report['bundle_revision']}")
    print(
        f"{binding['principal']} in {binding['tenant']}/{binding['workspace']} "
        f"for {binding.get('purpose')} groups {binding.get('groups', [])}"
    )
    for tool, row in report["tools"].items():
        state = "allowed" if row["allowed"] else "denied"
        listed = "listed" if row["listed"] else "not listed"
        print(f"\n{tool}: {state}, {listed} ({', '.join(row['reasons'])})")
        confirmation = row.get("confirmation")
        if confirmation is not None:
            needed = "required" if confirmation["required"] else "not required"
            print(f"  confirmation: {needed} (TTL {confirmation['ttl_seconds']} s)")
        if "redaction" in row:
            redaction = row["redaction"]
            print(
                f"  redaction: rule {redaction.get('rule')}, fields "
                f"{redaction.get('allowed_fields')}, "
                f"packets <= {redaction.get('max_packet_bytes')} B"
            )
        for name, matched in row.get("redaction_when_matched", {}).items():
            print(
                f"  redaction of a record classifier {name} matched: rule {matched.get('rule')}, "
                f"fields {matched.get('allowed_fields')}"
            )
        for source in row["because"]:
            print(f"  because: {source['why']}  [{source['source']}]")
    semantic = report.get("semantic_search")
    if semantic is not None:
        channel = "semantic_v1 permitted" if semantic["allowed"] else "offline_lexical_v1 only"
        print(f"\nsearch ranking: {channel} {semantic['reasons']}")
    capture = report.get("capture")
    if capture is not None:
        print(f"\ncapture retention: default expiry {_duration(capture['default_expiry_ms'])}")
        print(f"  latest expiry accepted (ceiling): {_duration(capture['ceiling_ms'])}")
        print(f"  retain derivatives: {'allowed' if capture['retain_allowed'] else 'denied'}")
        distant = capture["expiry_in_100_years"]
        print(
            f"  expiry 100 years out: {'allowed' if distant['allowed'] else 'denied'} "
            f"{distant['reasons']}"
        )
        print(f"  consented families: {capture['consented_families']}")
    for limit in report["rate_limits"]:
        print(f"rate limit {limit['name']}: {limit['calls']} calls per {limit['per_ms']} ms")
    for classifier in report.get("classifiers", []):
        print(
            f"content classifier {classifier['name']}: {classifier['sort']} on "
            f"{', '.join(classifier['kinds'])}"
        )
    if "maintenance" in report:
        m = report["maintenance"]
        print(
            f"maintenance ({m['operator']}): read {m['read']['allow']}, "
            f"maintain {m['maintain']['allow']}"
        )


def _duration(ms: object) -> str:
    """`7776000000` -> `90d after capture` (the YAML's units); None -> `none`."""
    if not isinstance(ms, int):
        return "none"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit} after capture"
    return f"{ms}ms after capture"


def _families(data: bytes, tenant: str, workspace: str) -> list[str]:
    config = json.loads(data)["engram"]["config"]["tenants"]
    ws = config.get(tenant, {}).get("workspaces", {}).get(workspace, {})
    return sorted(ws.get("reconciliation", {}).get("consented_families", {}))


def run(args: argparse.Namespace) -> int:
    """Run `policy test`, `explain` or `effective`.

    Raises:
        ConfigurationError: bad input, invalid data or tables, no OPA, unusable bundle.
    """
    # Imported here, not at the top: building the parser must stay cheap (cli/main.py).
    from engram_memory.contract.exceptions import CallError
    from engram_memory.policy.authoring.calls import parse_binding, parse_call
    from engram_memory.policy.authoring.effective import effective_permissions
    from engram_memory.policy.authoring.explain import Attribution, explain_call
    from engram_memory.policy.authoring.tenant_tests import describe_report, run_policy_tests
    from engram_memory.policy.bundle import bundle_data
    from engram_memory.policy.factory import EMBEDDED, open_policy_engine

    if args.policy_command == "test":
        report = run_policy_tests(
            args.rego,
            args.policies,
            args.tests,
            opa_bin=args.opa,
            coverage=args.coverage,
            progress=lambda line: print(line, file=sys.stderr),
        )
        if args.json:
            print(json.dumps(report.as_json(), indent=2))
        else:
            print("\n".join(describe_report(report)))
        return 1 if report.failed else 0
    try:
        data = bundle_data(args.bundle)
        sources = _source_map(args, data)
        attribution = Attribution(json.loads(data), sources)
        printer: Callable[[dict[str, Any]], None]
        with open_policy_engine(args.opa or EMBEDDED, args.bundle) as (engine, identity):
            if args.policy_command == "explain":
                raw_binding, raw_call = _explain_document(args)
                binding, call = parse_binding(raw_binding), parse_call(raw_call)
                output = explain_call(engine, identity, attribution, binding, call)
                printer = _print_explanation
            else:
                binding = parse_binding(
                    _given(
                        tenant=args.tenant,
                        workspace=args.workspace,
                        principal=args.principal,
                        purpose=args.purpose,
                        groups=args.group,
                    )
                )
                if binding.purpose is None:
                    binding = binding.model_copy(update={"purpose": "purpose:unspecified"})
                output = effective_permissions(
                    engine,
                    identity,
                    attribution,
                    binding,
                    operator=args.operator,
                    candidate_families=_families(data, binding.tenant, binding.workspace),
                )
                printer = _print_effective
    except CallError as exc:
        raise ConfigurationError(str(exc)) from None
    if args.json:
        print(json.dumps(output, indent=2, sort_keys=True))
    else:
        printer(output)
    return 0
