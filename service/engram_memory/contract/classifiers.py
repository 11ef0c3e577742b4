"""Content classifiers (issue 22 item 1): named tests of what a memory is about, defined in
policy data, run on the plaintext in this process, and handed to policy as NAMES only.

Policy decides on ids and digests, never on text (so content never reaches OPA or its
decision logs). A classifier closes the gap without opening it: the service runs the
tenant's classifiers over each component kind's text and puts `{kind: [names that
matched]}` in the decision input. What matched, where, or any part of the text never leaves
this module except through `ClassifierSet.locate`, which only the author's own terminal
uses (`policy try-pattern`).

Three sorts, one per definition (`terms`, `regex` or `detector`):

- term lists: NFKC-folded (and case-folded unless `case_sensitive`), found in one
  Aho-Corasick pass per list; `whole_words` (the default) wants a non-word character or the
  text's edge on both sides, where word characters are Unicode letters, marks, digits and
  `_`, except wide (ideographic) characters, which stand on their own like words do in
  scripts written without spaces;
- regular expressions, checked by the same rules as never-store patterns
  (contract/policy_regex.py) and run on the NFKC form of the text;
- validated detectors: `iban` (ISO 13616 country format and mod-97 checksum, python-stdnum),
  `payment_card` (Luhn, python-stdnum, and a plausible issuer prefix and length), `email`,
  and `phone` (libphonenumber's metadata via `phonenumbers`: numbers written with `+` and a
  country code, or national numbers of the definition's `region`).

Texts per kind (SPEC §10.1 fields): `primary` is the primary component's text; `decision`,
`evidence` and `context` are the texts of all components of that kind; `citations` are
the citations' `source_ref`s and locator values.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ahocorasick
import phonenumbers
from stdnum import iban as stdnum_iban
from stdnum import luhn

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.contract.policy_regex import regex_problem

COMPONENT_KINDS = ("primary", "decision", "evidence", "context", "citations")
DETECTORS = ("iban", "payment_card", "email", "phone")

Span = tuple[int, int]


def fold(text: str, *, case_sensitive: bool = False) -> str:
    """NFKC, then (unless `case_sensitive`) Unicode case folding: `Kunde`, `ＫＵＮＤＥ`
    and `kunde` fold alike."""
    normalized = unicodedata.normalize("NFKC", text)
    return normalized if case_sensitive else normalized.casefold()


class TextViews:
    """One text and its NFKC and folded forms, each computed once however many classifiers
    read it (a 64 KiB text is copied once per form, not once per classifier)."""

    __slots__ = ("_forms", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._forms: dict[str, str] = {}

    @property
    def nfkc(self) -> str:
        if "nfkc" not in self._forms:
            self._forms["nfkc"] = unicodedata.normalize("NFKC", self.text)
        return self._forms["nfkc"]

    def folded(self, *, case_sensitive: bool) -> str:
        if case_sensitive:
            return self.nfkc
        if "folded" not in self._forms:
            self._forms["folded"] = self.nfkc.casefold()
        return self._forms["folded"]


# Middle dots join letters inside a word (Catalan `col·lega`; NFKC turns `Ŀ` into `l·`), as
# Unicode's word boundaries (UAX #29, MidLetter) treat them: `l·kunde` is not the word `kunde`.
_WORD_JOINERS = frozenset("_\u00b7\u0387\u2027")


def _is_word_char(char: str) -> bool:
    if char in _WORD_JOINERS:
        return True
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return False  # ideographs, kana, hangul syllables: no spaces between words
    return unicodedata.category(char)[0] in ("L", "M", "N")


def _bounded(text: str, start: int, end: int) -> bool:
    """Is text[start:end] a whole word (or words): no word character joins it on a side
    where its own edge is a word character?"""
    left = start == 0 or not _is_word_char(text[start]) or not _is_word_char(text[start - 1])
    right = end == len(text) or not _is_word_char(text[end - 1]) or not _is_word_char(text[end])
    return left and right


# --- detectors: candidate spans found by bounded patterns, then validated ---------------

_IBAN_CANDIDATE = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?"
)
_CARD_CANDIDATE = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){11,18}(?![0-9])")
_EMAIL_CANDIDATE = re.compile(
    r"(?<![\w.+-])[\w+-](?:[\w.+-]{0,62}[\w+-])?@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}"
)
# Issuer prefixes (ISO/IEC 7812 ranges of the major networks) and the lengths they issue.
_CARD_ISSUERS: tuple[tuple[str, str, frozenset[int]], ...] = (
    ("4", "4", frozenset({13, 16, 19})),  # Visa
    ("51", "55", frozenset({16})),  # Mastercard
    ("2221", "2720", frozenset({16})),  # Mastercard 2-series
    ("34", "34", frozenset({15})),  # American Express
    ("37", "37", frozenset({15})),
    ("300", "305", frozenset({14, 16, 17, 18, 19})),  # Diners Club
    ("36", "36", frozenset({14, 16, 17, 18, 19})),
    ("38", "39", frozenset({16, 17, 18, 19})),
    ("6011", "6011", frozenset({16, 17, 18, 19})),  # Discover
    ("644", "649", frozenset({16, 17, 18, 19})),
    ("65", "65", frozenset({16, 17, 18, 19})),
    ("3528", "3589", frozenset({16, 17, 18, 19})),  # JCB
    ("62", "62", frozenset({16, 17, 18, 19})),  # UnionPay
    ("50", "50", frozenset(range(12, 20))),  # Maestro
    ("56", "58", frozenset(range(12, 20))),
)


def plausible_card(digits: str) -> bool:
    """A payment card number: an issuer prefix of a major network, a length it issues, and
    a valid Luhn check digit."""
    issued = any(
        low <= digits[: len(low)] <= high and len(digits) in lengths
        for low, high, lengths in _CARD_ISSUERS
    )
    return issued and luhn.is_valid(digits)


def _iban_spans(text: str) -> Iterator[Span]:
    for found in _IBAN_CANDIDATE.finditer(text):
        candidate, start = found.group(0), found.start()
        # The longest prefix that is a valid IBAN: the pattern may have run into the next
        # word (`DE89 3704 0044 0532 0130 00 ABCD`); at most eight tries.
        for end in range(len(candidate), 14, -1):
            after = start + end
            if candidate[end - 1] == " " or (end < len(candidate) and candidate[end] != " "):
                continue
            if after < len(text) and text[after].isalnum():
                continue
            if stdnum_iban.is_valid(candidate[:end]):
                yield start, start + end
                break


def _card_spans(text: str) -> Iterator[Span]:
    for found in _CARD_CANDIDATE.finditer(text):
        if plausible_card(re.sub(r"[ -]", "", found.group(0))):
            yield found.span()


def _email_spans(text: str) -> Iterator[Span]:
    for found in _EMAIL_CANDIDATE.finditer(text):
        domain = found.group(0).rpartition("@")[2]
        labels = domain.split(".")
        tld = labels[-1]
        if len(tld) >= 2 and tld.isalpha() and all(labels) and ".." not in found.group(0):
            yield found.span()


# A run that could be a phone number: an optional `+`, then 6 to 24 digits and separators.
# libphonenumber judges each run on its own (its own matcher scans the whole text in Python
# and costs ~10 ms per KiB); a run is bounded, so the work stays linear in the text.
_PHONE_CANDIDATE = re.compile(r"(?<![\w+])\+?\(?[0-9][0-9 ().\-/]{4,22}[0-9](?![\w])")


def _phone_spans(text: str, region: str | None) -> Iterator[Span]:
    for found in _PHONE_CANDIDATE.finditer(text):
        candidate = found.group(0)
        if region is None and not candidate.startswith("+"):
            continue  # without a region only international numbers can be judged
        # Most runs (amounts, order numbers) are no valid number: skipped before the matcher.
        try:
            if not phonenumbers.is_valid_number(phonenumbers.parse(candidate, region)):
                continue
        except phonenumbers.NumberParseException:
            continue
        # libphonenumber's matcher on the run alone: it also refuses dates, times and
        # other digit runs that happen to be valid numbers somewhere.
        matcher = phonenumbers.PhoneNumberMatcher(
            candidate, region, leniency=phonenumbers.Leniency.VALID, max_tries=8
        )
        for match in matcher:
            yield found.start() + match.start, found.start() + match.end


# --- classifiers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Classifier:
    """One compiled classifier of policy data (`definition` is its compiled form)."""

    name: str
    kinds: frozenset[str]
    definition: Mapping[str, Any]
    _automaton: Any = None
    _regex: re.Pattern[str] | None = None

    @classmethod
    def compile(cls, definition: Mapping[str, Any]) -> Classifier:
        """Raises: ConfigurationError: a definition this build of the service cannot run."""
        name = definition.get("name")
        kinds = definition.get("kinds") or COMPONENT_KINDS
        if not isinstance(name, str) or not set(kinds) <= set(COMPONENT_KINDS):
            raise ConfigurationError("classifier definition without a name or known kinds")
        sorts = [key for key in ("terms", "regex", "detector") if key in definition]
        if len(sorts) != 1:
            raise ConfigurationError("a classifier has exactly one of terms, regex, detector")
        automaton, regex = None, None
        if "terms" in definition:
            case_sensitive = bool(definition.get("case_sensitive", False))
            automaton = ahocorasick.Automaton()
            for term in definition["terms"]:
                folded = fold(str(term), case_sensitive=case_sensitive)
                if folded:
                    automaton.add_word(folded, len(folded))
            if len(automaton) == 0:
                raise ConfigurationError("a term classifier without terms")
            automaton.make_automaton()
        elif "regex" in definition:
            if regex_problem(str(definition["regex"])) is not None:
                raise ConfigurationError("classifier regex refused")
            regex = re.compile(str(definition["regex"]))
        elif definition["detector"] not in DETECTORS:
            raise ConfigurationError("unknown classifier detector")
        return cls(name, frozenset(kinds), definition, automaton, regex)

    def spans(self, text: str | TextViews) -> Iterator[Span]:
        """Where this classifier matches `text` (offsets into the NFKC form of `text` for
        regexes and detectors, into its fold for term lists)."""
        views = text if isinstance(text, TextViews) else TextViews(text)
        definition = self.definition
        if self._automaton is not None:
            case_sensitive = bool(definition.get("case_sensitive", False))
            folded = views.folded(case_sensitive=case_sensitive)
            whole_words = bool(definition.get("whole_words", True))
            for last, length in self._automaton.iter(folded):
                start, end = last - length + 1, last + 1
                if not whole_words or _bounded(folded, start, end):
                    yield start, end
            return
        normalized = views.nfkc
        if self._regex is not None:
            for found in self._regex.finditer(normalized):
                yield found.span()
            return
        detector = definition["detector"]
        if detector == "iban":
            yield from _iban_spans(normalized)
        elif detector == "payment_card":
            yield from _card_spans(normalized)
        elif detector == "email":
            yield from _email_spans(normalized)
        else:
            yield from _phone_spans(normalized, definition.get("region"))

    def matches(self, text: str | TextViews) -> bool:
        return next(iter(self.spans(text)), None) is not None


class ClassifierSet:
    """The classifiers of one scope, compiled once (see `classifier_set_for`)."""

    __slots__ = ("classifiers",)

    def __init__(self, definitions: Sequence[Mapping[str, Any]]) -> None:
        """Raises: ConfigurationError: a definition cannot be compiled."""
        self.classifiers = tuple(Classifier.compile(d) for d in definitions)

    def __bool__(self) -> bool:
        return bool(self.classifiers)

    def classify(self, texts_by_kind: Mapping[str, str]) -> dict[str, list[str]]:
        """`{kind: [sorted names of the classifiers that matched its text]}`, for the kinds
        where any matched. Names only: this is what policy sees."""
        # Kinds often share a text (the primary component is also of its own kind): each
        # classifier runs once per distinct text, for the kinds it applies to.
        kinds_of_text: dict[str, list[str]] = {}
        for kind in COMPONENT_KINDS:
            text = texts_by_kind.get(kind, "")
            if text:
                kinds_of_text.setdefault(text, []).append(kind)
        out: dict[str, list[str]] = {}
        for text, kinds in kinds_of_text.items():
            views = TextViews(text)
            for classifier in self.classifiers:
                applicable = [kind for kind in kinds if kind in classifier.kinds]
                if applicable and classifier.matches(views):
                    for kind in applicable:
                        out.setdefault(kind, []).append(classifier.name)
        return {kind: sorted(set(out[kind])) for kind in COMPONENT_KINDS if kind in out}

    def locate(self, text: str) -> list[tuple[str, int, int, str]]:
        """For the author's terminal only (`policy try-pattern`): every (name, start, end,
        matched) in `text` as one text of every kind; offsets into the folded text."""
        out = []
        for classifier in self.classifiers:
            folded = (
                fold(text, case_sensitive=bool(classifier.definition.get("case_sensitive")))
                if "terms" in classifier.definition
                else unicodedata.normalize("NFKC", text)
            )
            for start, end in classifier.spans(text):
                out.append((classifier.name, start, end, folded[start:end]))
        return out


EMPTY_SET = ClassifierSet(())


@functools.lru_cache(maxsize=64)
def _cached_set(definitions_json: str) -> ClassifierSet:
    return ClassifierSet(json.loads(definitions_json))


def classifier_set_for(definitions: Sequence[Mapping[str, Any]]) -> ClassifierSet:
    """The compiled set for a scope's definitions, compiled once per distinct definitions
    (so once per bundle revision that changes them).

    Raises:
        ConfigurationError: a definition cannot be compiled.
    """
    if not definitions:
        return EMPTY_SET
    return _cached_set(json.dumps(list(definitions), sort_keys=True))


def texts_by_kind(payload: Mapping[str, Any]) -> dict[str, str]:
    """The text of each component kind of a capture payload (see module docstring)."""
    components = payload.get("components") or []
    primary_id = payload.get("primary_component_id")
    texts: dict[str, list[str]] = {kind: [] for kind in COMPONENT_KINDS}
    for component in components:
        text = str(component.get("text", ""))
        if component.get("component_id") == primary_id:
            texts["primary"].append(text)
        kind = str(component.get("kind", ""))
        if kind in texts and kind != "primary":
            texts[kind].append(text)
    for citation in payload.get("citations") or []:
        texts["citations"].append(str(citation.get("source_ref", "")))
        locator = citation.get("locator") or {}
        texts["citations"].append(str(locator.get("value", "")))
    return {kind: "\n".join(parts) for kind, parts in texts.items() if parts}
