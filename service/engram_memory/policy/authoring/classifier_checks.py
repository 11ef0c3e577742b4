"""Content classifiers for the author: the `policy validate` warning and `policy try-pattern`.

- `classifier-matches-most-text`: a classifier matching more than a quarter of the generated
  corpus of ordinary prose (the never-store check's corpus, authoring/mistakes.py) would
  mark nearly every capture, so a rule using its name would hold or refuse almost
  everything. A classifier for customers rightly matches the corpus's sentences about a
  customer (one template in ten); `the` or `[a-z]+` would match them all.
- `policy try-pattern NAME TEXT` with a classifier's NAME shows which classifiers of that
  name match TEXT, and where. Offsets are fine here: this is the author's own terminal, and
  nothing of it reaches the service, OPA or any log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from engram_memory._internal.yaml_source import Path_
from engram_memory.contract.classifiers import COMPONENT_KINDS, ClassifierSet
from engram_memory.policy.authoring.classifier_data import ClassifierDefinition
from engram_memory.policy.authoring.data import TenantPolicy, load_policies
from engram_memory.policy.authoring.ordinary_text import ordinary_corpus

Warn = Callable[[str, Path_, str], None]

# More than this share of ordinary sentences matched: the classifier marks nearly everything.
MOST_TEXT_SHARE = 0.25


def _declared(policy: TenantPolicy) -> Iterator[tuple[str, Path_, ClassifierDefinition]]:
    """(where, YAML path, definition) of every classifier a tenant file declares."""
    for index, definition in enumerate(policy.classifiers):
        yield f"{policy.tenant} (tenant-wide)", ("classifiers", index), definition
    for ws_name, ws in policy.workspaces.items():
        for index, definition in enumerate(ws.classifiers):
            loc: Path_ = ("workspaces", ws_name, "classifiers", index)
            yield f"{policy.tenant}/{ws_name}", loc, definition


def ordinary_hits(definition: ClassifierDefinition) -> list[str]:
    """The sentences of the ordinary corpus the classifier matches (as text of every kind)."""
    classifiers = ClassifierSet([definition.compiled()])
    return [
        sentence
        for sentence in ordinary_corpus()
        if classifiers.classify(dict.fromkeys(COMPONENT_KINDS, sentence))
    ]


def check_classifiers(warn: Warn, policy: TenantPolicy) -> None:
    """`classifier-matches-most-text` for every classifier the tenant file declares."""
    corpus = len(ordinary_corpus())
    for _, loc, definition in _declared(policy):
        hits = ordinary_hits(definition)
        if len(hits) > MOST_TEXT_SHARE * corpus:
            warn(
                "classifier-matches-most-text",
                (*loc, "name"),
                f"classifier {definition.name!r} matches {len(hits)} of {corpus} sentences of "
                f"ordinary text (e.g. {hits[0]!r}): a rule naming it would apply to nearly "
                "every capture; narrow its terms or pattern "
                f"(try: engram-memory policy try-pattern {definition.name} TEXT)",
            )


def try_classifier(policies_dir: str, name: str, text: str) -> tuple[bool, bool]:
    """Print what the classifiers named `name` match in `text`; (found any, matched).

    Raises:
        PolicyDataError: the data is invalid.
    """
    found = matched = False
    for _, policy in sorted(load_policies(policies_dir).items()):
        for where, _, definition in _declared(policy):
            if definition.name != name:
                continue
            found = True
            compiled: dict[str, Any] = definition.compiled()
            shown = {k: v for k, v in compiled.items() if k != "name"}
            print(f"{where}: classifier {name} = {shown}")
            located = ClassifierSet([compiled]).locate(text)
            matched = matched or bool(located)
            for _, start, end, value in located:
                print(f"  match [{start}:{end}] {value!r}")
            if not located:
                print("  no match: policy would not see this name for this text")
            kinds = compiled.get("kinds", list(COMPONENT_KINDS))
            print(f"  applies to component kinds: {', '.join(kinds)}")
            hits = ordinary_hits(definition)
            print(f"  ordinary text: matches {len(hits)} of {len(ordinary_corpus())} sentences")
            for sentence in hits[:3]:
                print(f"    {sentence!r}")
    return found, matched
