"""The never-store detector (SPEC §11): secret shapes are refused before anything is stored.

A match is reported as a bare boolean so that no caller can echo, log or store it.

What is scanned (for a capture, see `capture_holds_secret`): every stored string, joined
one after the other, and a "seam" view of the component texts and citation locators
concatenated with nothing between them, so that a key split across two fields is seen whole.

How each view is scanned:
1. it is folded (secret_folding.py: format characters and marks removed, compatibility forms
   decomposed, TR39 look-alikes from other scripts mapped to the ASCII they imitate);
2. one Aho-Corasick pass over the lower-cased fold finds every keyword: the literals that
   gate each shape (secret_rules.py), the credential words of the proximity rule
   (secret_proximity.py), and rot13 or reversed keywords;
3. each shape whose keyword occurred runs on windows around the occurrences only;
   each credential word has the value beside it judged;
4. base64, hex, URL- and HTML-encoded runs are decoded (secret_decoding.py, bounded depth and
   a per-capture budget) and each decoding is scanned from step 1; a rot13 or reversed
   keyword makes the rot13 or reversed view scanned too.

Performance: each step is linear in the text (a shape runs at most once over any character
of a window, windows are bounded, decoders charge a budget of a few times the input size),
and ordinary prose skips nearly every shape. bench/secret_detector.py measures it.

Policy data's `extra_patterns` run on the whole fold, on the text as received, and on two
views where separator runs between letters or digits become a hyphen or a space (so a
tenant's `ACME-[0-9]{6}` still sees `ACME 123456`); their authors own their performance.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

import ahocorasick

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.contract.secret_decoding import (
    MAX_DEPTH,
    DecodeBudget,
    decodings,
    reversed_text,
    rot13,
)
from engram_memory.contract.secret_folding import fold_for_detection
from engram_memory.contract.secret_proximity import PROJECT_CREDENTIAL_NAMES, credential_near
from engram_memory.contract.secret_rules import Rule, built_in_rules, data_credential_names

# Head and tail of each field kept in the seam view (the middle of a long field is whole in
# the field itself).
_SEAM_EDGE = 256
# Between stored strings: more line breaks than the proximity rule spans (two), so a
# credential word ending one string is not read with the next one (`…/reset-token` and a
# `sha256:…` digest); a secret split across strings is the seam view's to find.
_FIELD_JOINER = "\n\n\n"
# Inside a long field of the seam view: longer than any run of whitespace or separators a
# project or proximity rule spans (`\s{0,8}`).
_SEAM_BREAK = "\n" * 16
_BUDGET_FACTOR = 4
_BUDGET_FLOOR = 4096

# Keywords that, seen rot13-encoded or written backwards, make that view worth scanning.
_TRIGGER_WORDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "private key",
    "akia",
    "ghp_",
    "sk_live_",
    "xoxb-",
    "authorization",
    "bearer",
)
_ROT13, _REVERSED = "rot13", "reversed"
_SEPARATOR_RUN = re.compile(r"(?<=[A-Za-z0-9])[ \t_.\-]{1,3}(?=[A-Za-z0-9])")


@dataclass(frozen=True)
class _Keyword:
    index: int
    length: int
    rule_indexes: tuple[int, ...]
    credential: bool
    trigger: str | None


def _fold_keyword(keyword: str) -> str:
    return fold_for_detection(keyword).lower()


@functools.cache
def _automaton() -> tuple[ahocorasick.Automaton, tuple[Rule, ...], tuple[int, ...]]:
    """The keyword automaton over the built-in rules, the rules, and the keyword-less ones."""
    rules = built_in_rules()
    by_keyword: dict[str, list[int]] = {}
    always: list[int] = []
    for index, rule in enumerate(rules):
        if not rule.keywords:
            always.append(index)
        for keyword in rule.keywords:
            by_keyword.setdefault(_fold_keyword(keyword), []).append(index)
    credentials = {_fold_keyword(k) for k in (*PROJECT_CREDENTIAL_NAMES, *data_credential_names())}
    triggers = {rot13(w): _ROT13 for w in _TRIGGER_WORDS}
    triggers.update({reversed_text(w): _REVERSED for w in _TRIGGER_WORDS})
    automaton = ahocorasick.Automaton()
    for index, keyword in enumerate(sorted(set(by_keyword) | credentials | set(triggers))):
        automaton.add_word(
            keyword,
            _Keyword(
                index=index,
                length=len(keyword),
                rule_indexes=tuple(by_keyword.get(keyword, ())),
                credential=keyword in credentials,
                trigger=triggers.get(keyword),
            ),
        )
    automaton.make_automaton()
    return automaton, rules, tuple(always)


def _windows(rule: Rule, starts: list[int], length: int) -> Iterable[tuple[int, int]]:
    """Merged windows around keyword `starts` (ascending): each character at most once."""
    low, high = -1, -1
    for start in starts:
        begin, end = max(0, start - rule.before), min(length, start + rule.after)
        if begin <= high:
            high = max(high, end)
            continue
        if high > low:
            yield low, high
        low, high = begin, end
    if high > low:
        yield low, high


def _starts_per_rule(
    occurrences: Iterable[tuple[_Keyword, list[int]]],
) -> dict[int, list[int]]:
    """Rule index → the sorted start positions of all its keywords' occurrences."""
    per_rule: dict[int, list[list[int]]] = {}
    for keyword, starts in occurrences:
        for index in keyword.rule_indexes:
            per_rule.setdefault(index, []).append(starts)
    return {
        index: lists[0] if len(lists) == 1 else sorted(chain.from_iterable(lists))
        for index, lists in per_rule.items()
    }


def _rule_matches(rule: Rule, text: str, starts: list[int] | None) -> bool:
    """`rule` searched around `starts`, or over all of `text` when the windows would cover
    most of it anyway (or positions do not map: `starts` is None)."""
    if starts is None or len(starts) * (rule.before + rule.after) >= len(text):
        return rule.pattern.search(text) is not None
    return any(
        rule.pattern.search(text, begin, end) is not None
        for begin, end in _windows(rule, starts, len(text))
    )


def _seam_view(fields: Sequence[str]) -> str:
    """The fields concatenated with nothing between them; a long field keeps only its head
    and tail (cut at a space), joined by a break no shape spans."""
    parts = []
    for field in fields:
        if len(field) > 2 * _SEAM_EDGE:
            head_end = field.rfind(" ", 0, _SEAM_EDGE)
            tail_start = field.find(" ", len(field) - _SEAM_EDGE)
            head = field[: head_end if head_end > 0 else _SEAM_EDGE]
            tail = field[tail_start + 1 if tail_start >= 0 else len(field) - _SEAM_EDGE :]
            field = head + _SEAM_BREAK + tail
        parts.append(field)
    return "".join(parts)


# A policy-data shape travels in the bundle as `(?#never-store:<name>)<regex>`: a regular
# expression comment, so the pattern matches exactly as written, and the name rides along
# to the audit (`arguments:never_store:<name>`) without another field in the decision.
_NAME_OPEN = "(?#never-store:"
UNNAMED_SHAPE = "unnamed"


def named_pattern(name: str, regex: str) -> str:
    """`regex` carrying its policy-data `name` (a `Name`: no `)` in it)."""
    return f"{_NAME_OPEN}{name}){regex}"


def pattern_name(pattern: str) -> str:
    """The name a policy-data pattern carries, or `unnamed` (a bundle built without)."""
    if pattern.startswith(_NAME_OPEN):
        name, closed, _ = pattern[len(_NAME_OPEN) :].partition(")")
        if closed and name:
            return name
    return UNNAMED_SHAPE


def _extra_views(received: str) -> set[str]:
    """What policy-data patterns see of a text: as received, folded, and folded with
    separator runs between letters or digits made a hyphen or a space."""
    folded = fold_for_detection(received)
    return {received, folded, _SEPARATOR_RUN.sub("-", folded), _SEPARATOR_RUN.sub(" ", folded)}


class SecretDetector:
    """Recognizes secret shapes in text (SPEC §11).

    `extra_patterns` are Python regular expressions from policy data. Matching is a boolean
    on purpose: the match is never handed out.
    """

    __slots__ = ("_extra", "_names")

    def __init__(self, extra_patterns: Sequence[str] = ()) -> None:
        """Compile `extra_patterns`. The built-in rules, the keyword automaton and the
        folding tables are built once per process, at the first scan (about 0.2 s of CPU
        that a server's start-up need not wait for).

        Raises:
            ConfigurationError: an extra pattern is not a valid regular expression.
        """
        compiled = []
        for pattern in extra_patterns:
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ConfigurationError("invalid never-store pattern in policy data") from exc
        self._extra: tuple[re.Pattern[str], ...] = tuple(compiled)
        self._names = tuple(pattern_name(pattern) for pattern in extra_patterns)

    def contains_secret(self, text: str) -> bool:
        """True if `text`, any fold or decoding of it, holds a secret shape."""
        return self.capture_holds_secret([text], ())

    def any_secret(self, texts: Iterable[str]) -> bool:
        """True if any of `texts` holds a secret shape (each is scanned as a whole)."""
        return self.capture_holds_secret(list(texts), ())

    def capture_holds_secret(self, strings: Sequence[str], seam_fields: Sequence[str]) -> bool:
        """True if a secret is in any of `strings`, or across the concatenated `seam_fields`
        (a capture's component texts, then its citation locators, in order)."""
        size = sum(len(s) for s in strings) + sum(len(s) for s in seam_fields)
        budget = DecodeBudget(_BUDGET_FACTOR * size + _BUDGET_FLOOR)
        if self._holds(_FIELD_JOINER.join(strings), budget):
            return True
        return len(seam_fields) > 1 and self._holds(_seam_view(seam_fields), budget)

    def _holds(self, text: str, budget: DecodeBudget) -> bool:
        if self._extra and self._extra_matches(text):
            return True
        return self._scan(fold_for_detection(text), 0, budget, triggers_allowed=True)

    def _extra_matches(self, received: str) -> bool:
        views = _extra_views(received)
        return any(p.search(view) is not None for p in self._extra for view in views)

    def policy_shape(self, strings: Sequence[str], seam_fields: Sequence[str]) -> str | None:
        """For the audit of a refusal: the name of the first policy-data pattern the text
        shows as received or folded (the views `capture_holds_secret` scans first); None
        when a built-in shape, or a pattern seen only through a decoding, refused it. The
        pattern's name, never what it matched."""
        texts = [_FIELD_JOINER.join(strings)]
        if len(seam_fields) > 1:
            texts.append(_seam_view(seam_fields))
        views = set().union(*(_extra_views(text) for text in texts))
        for pattern, name in zip(self._extra, self._names, strict=True):
            if any(pattern.search(view) is not None for view in views):
                return name
        return None

    def _scan(
        self, folded: str, depth: int, budget: DecodeBudget, *, triggers_allowed: bool
    ) -> bool:
        automaton, rules, always = _automaton()
        lowered = folded.lower()
        # Occurrences per keyword (one append per occurrence, whatever the number of rules).
        occurrences: dict[int, tuple[_Keyword, list[int]]] = {}
        triggers: set[str] = set()
        for last, keyword in automaton.iter(lowered):
            start = last - keyword.length + 1
            if keyword.credential and credential_near(lowered, start, last + 1):
                return True
            if keyword.rule_indexes:
                entry = occurrences.get(keyword.index)
                if entry is None:
                    occurrences[keyword.index] = (keyword, [start])
                else:
                    entry[1].append(start)
            if keyword.trigger is not None:
                triggers.add(keyword.trigger)
        for index in always:
            if rules[index].pattern.search(folded) is not None:
                return True
        aligned = len(lowered) == len(folded)
        for index, starts in _starts_per_rule(occurrences.values()).items():
            rule = rules[index]
            if rule.requires and not all(part in lowered for part in rule.requires):
                continue
            if _rule_matches(rule, folded, starts if aligned else None):
                return True
        if depth < MAX_DEPTH:
            for decoded in decodings(folded, budget):
                if self._holds_decoded(decoded, depth + 1, budget):
                    return True
        if triggers_allowed:
            for trigger in sorted(triggers):
                view = rot13(folded) if trigger == _ROT13 else reversed_text(folded)
                if budget.charge(len(view)) and self._scan(
                    view, MAX_DEPTH, budget, triggers_allowed=False
                ):
                    return True
        return False

    def _holds_decoded(self, decoded: str, depth: int, budget: DecodeBudget) -> bool:
        if self._extra and self._extra_matches(decoded):
            return True
        return self._scan(fold_for_detection(decoded), depth, budget, triggers_allowed=True)


DEFAULT_DETECTOR = SecretDetector()


@functools.lru_cache(maxsize=64)
def detector_for(extra_patterns: tuple[str, ...]) -> SecretDetector:
    """The detector for a scope's policy-data shapes (compiled once per distinct set).

    Raises:
        ConfigurationError: a pattern is not a valid regular expression.
    """
    return SecretDetector(extra_patterns) if extra_patterns else DEFAULT_DETECTOR


def contains_secret(text: str) -> bool:
    """`DEFAULT_DETECTOR.contains_secret(text)`."""
    return DEFAULT_DETECTOR.contains_secret(text)
