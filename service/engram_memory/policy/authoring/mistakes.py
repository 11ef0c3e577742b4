"""Three mistakes that valid policy data can hold, found by `policy validate` (issue 22):

- `undeclared-group`: a grant or approval rule names a group the tenant does not declare
  under `groups:` (a typo in a group name grants nobody and fails every approval);
- `shadowed-redaction-rule`: an earlier redaction rule selects everyone a later one does
  (first match wins, so the later rule never applies; a catch-all placed first shadows all);
- `pattern-matches-ordinary-text`: a never-store pattern matches a generated corpus of
  ordinary prose, so it would refuse ordinary captures.

`policy try-pattern NAME TEXT` shows an author what one pattern matches.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Sequence

from engram_memory._internal.yaml_source import Path_
from engram_memory.contract.secret_folding import fold_for_detection
from engram_memory.policy.authoring.data import (
    NeverStorePattern,
    RedactionRule,
    TenantPolicy,
    Workspace,
)
from engram_memory.policy.authoring.ordinary_text import ordinary_corpus

Warn = Callable[[str, Path_, str], None]


def pattern_matches(regex: str, text: str) -> list[tuple[int, int, str]]:
    """(start, end, matched) of every match in `text`, or in its folded form when the text
    itself has none (the service scans both: contract/secrets.py)."""
    compiled = re.compile(regex)
    found = [(m.start(), m.end(), m.group(0)) for m in compiled.finditer(text)]
    folded = fold_for_detection(text)
    if not found and folded != text:
        found = [(m.start(), m.end(), m.group(0)) for m in compiled.finditer(folded)]
    return found


def ordinary_hits(regex: str) -> list[str]:
    """The sentences of the ordinary corpus `regex` matches."""
    compiled = re.compile(regex)
    return [sentence for sentence in ordinary_corpus() if compiled.search(sentence)]


def check_patterns(warn: Warn, policy: TenantPolicy) -> None:
    """`pattern-matches-ordinary-text`, for tenant and workspace never-store patterns."""
    places: list[tuple[Path_, Sequence[NeverStorePattern]]] = []
    if policy.never_store is not None:
        places.append((("never_store", "patterns"), policy.never_store.patterns))
    for name, ws in policy.workspaces.items():
        if ws.never_store is not None:
            places.append(
                (("workspaces", name, "never_store", "patterns"), ws.never_store.patterns)
            )
    corpus = len(ordinary_corpus())
    for loc, patterns in places:
        for index, pattern in enumerate(patterns):
            pattern_name = pattern.name
            hits = ordinary_hits(pattern.regex)
            if hits:
                warn(
                    "pattern-matches-ordinary-text",
                    (*loc, index, "regex"),
                    f"never-store pattern {pattern_name!r} matches {len(hits)} of {corpus} "
                    f"sentences of ordinary text (e.g. {hits[0]!r}): it would refuse ordinary "
                    "captures; anchor it on what only the secret has "
                    f"(try: engram-memory policy try-pattern {pattern_name} TEXT)",
                )


def _group_uses(policy: TenantPolicy) -> Iterator[tuple[Path_, str]]:
    for ws_name, ws in policy.workspaces.items():
        base: Path_ = ("workspaces", ws_name)
        for position, grant in enumerate(ws.grants):
            if grant.group is not None:
                yield (*base, "grants", position, "group"), grant.group
        rules = ws.confirmation.approval if ws.confirmation is not None else []
        for position, rule in enumerate(rules):
            for index, group in enumerate(rule.groups):
                yield (*base, "confirmation", "approval", position, "groups", index), group


def check_groups(warn: Warn, policy: TenantPolicy) -> None:
    """`undeclared-group`: every group a rule names must be declared under `groups:`."""
    declared = list(policy.groups or ())
    for loc, group in _group_uses(policy):
        if group in declared:
            continue
        if policy.groups is None:
            hint = "declare the groups your host asserts under the tenant's `groups:`"
        else:
            close = difflib.get_close_matches(group, declared, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "add it to `groups:` if meant"
        warn(
            "undeclared-group",
            loc,
            f"group {group!r} is not declared: a misspelt group matches nobody; {hint}",
        )


def _covers(earlier: RedactionRule, later: RedactionRule) -> bool:
    """Does `earlier` select every caller `later` selects (so `later` never applies)?"""
    if earlier.purposes is not None and (
        later.purposes is None or not set(later.purposes) <= set(earlier.purposes)
    ):
        return False
    # A rule naming classifiers applies only to records one of them matched: it covers a
    # later rule only if every record the later one applies to matched one of them too.
    if earlier.classifiers is not None and (
        later.classifiers is None or not set(later.classifiers) <= set(earlier.classifiers)
    ):
        return False
    if not earlier.principals and not earlier.roles:
        return True  # selects everyone (for its purposes)
    if not later.principals and not later.roles:
        return False
    return set(later.principals or ()) <= set(earlier.principals or ()) and set(
        later.roles or ()
    ) <= set(earlier.roles or ())


def check_shadowing(warn: Warn, ws: Workspace, base: Path_) -> None:
    """`shadowed-redaction-rule`: first match wins, so a covered later rule never applies."""
    for position, rule in enumerate(ws.redaction):
        shadow = next((e for e in ws.redaction[:position] if _covers(e, rule)), None)
        if shadow is not None:
            warn(
                "shadowed-redaction-rule",
                (*base, "redaction", position, "name"),
                f"redaction rule {rule.name!r} never applies: the earlier rule "
                f"{shadow.name!r} selects everyone it does (first match wins); move it "
                "above, or narrow the earlier rule",
            )


def run_try_pattern(policies_dir: str, name: str, text: str) -> int:
    """`policy try-pattern NAME TEXT`: what the never-store pattern or content classifier
    NAME matches in TEXT, wherever the tenant files define it, and how much ordinary text it
    matches. Exit 0 when it matches TEXT, 1 when it does not.

    Raises:
        PolicyDataError: the data is invalid.
        ConfigurationError: no tenant defines a pattern or classifier named NAME.
    """
    from engram_memory.contract.exceptions import ConfigurationError
    from engram_memory.policy.authoring.classifier_checks import try_classifier
    from engram_memory.policy.authoring.data import load_policies

    found = []
    for tenant, policy in sorted(load_policies(policies_dir).items()):
        owners = [(f"{tenant} (tenant-wide)", policy.never_store)]
        owners += [
            (f"{tenant}/{ws_name}", ws.never_store) for ws_name, ws in policy.workspaces.items()
        ]
        for where, never_store in owners:
            for pattern in never_store.patterns if never_store is not None else []:
                if pattern.name == name:
                    found.append((where, pattern.regex))
    classifier_found, matched = try_classifier(policies_dir, name, text)
    if not found and not classifier_found:
        raise ConfigurationError(
            f"no never-store pattern or classifier named {name!r} in {policies_dir}"
        )
    for where, regex in found:
        matches = pattern_matches(regex, text)
        matched = matched or bool(matches)
        print(f"{where}: {name} = {regex}")
        for start, end, value in matches:
            print(f"  match [{start}:{end}] {value!r}")
        if not matches:
            print("  no match: a capture holding this text would be stored")
        hits = ordinary_hits(regex)
        print(f"  ordinary text: matches {len(hits)} of {len(ordinary_corpus())} sentences")
        for sentence in hits[:3]:
            print(f"    {sentence!r}")
    return 0 if matched else 1
