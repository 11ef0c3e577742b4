"""Content classifiers (issue 22 item 1): each detector on valid and invalid numbers, term
lists across scripts and cases, kind scoping, and names-only output."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.contract.classifiers import (
    ClassifierSet,
    classifier_set_for,
    plausible_card,
    texts_by_kind,
)
from engram_memory.contract.exceptions import ConfigurationError

CUSTOMER: dict[str, Any] = {
    "name": "customer",
    "terms": ["customer", "Kunde", "клиент", "顧客", "cliente"],
    "case_sensitive": False,
    "whole_words": True,
}


def names(definition: dict[str, Any], text: str) -> list[str]:
    return ClassifierSet([definition]).classify({"primary": text}).get("primary", [])


@pytest.mark.parametrize(
    "text",
    [
        "The customer called.",
        "THE CUSTOMER CALLED",
        "Der Kunde rief an.",
        "Der ＫＵＮＤＥ rief an.",  # full-width folds under NFKC
        "наш клиент доволен",
        "這位顧客很滿意",  # no spaces between words: ideographs stand on their own
        "el cliente pagó",
        "customer",
        "(customer)",
    ],
)
def test_a_term_matches_as_a_whole_word_in_any_case_and_script(text: str) -> None:
    assert names(CUSTOMER, text) == ["customer"]


@pytest.mark.parametrize(
    "text",
    [
        "customers asked",
        "Kundennummer 7",
        "Stammkunde",
        "клиентами",
        "clientela",
        "customer_id",
        "ordinary text",
        "customer\u20dd",  # a combining mark is part of the word it follows
    ],
)
def test_a_term_inside_a_longer_word_does_not_match(text: str) -> None:
    assert names(CUSTOMER, text) == []


def test_case_sensitive_and_partial_words_when_asked() -> None:
    strict = {**CUSTOMER, "terms": ["ACME"], "case_sensitive": True}
    assert names(strict, "ACME Corp") == ["customer"]
    assert names(strict, "acme corp") == []
    partial = {**CUSTOMER, "whole_words": False}
    assert names(partial, "Kundennummer 7") == ["customer"]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("pay DE89 3704 0044 0532 0130 00 today", True),
        ("pay DE89370400440532013000 today", True),
        ("GB82 WEST 1234 5698 7654 32", True),
        ("NO93 8601 1117 947", True),  # the shortest IBAN length
        ("pay DE89 3704 0044 0532 0130 01 today", False),  # wrong check digits
        ("DE00 3704 0044 0532 0130 00", False),
        ("XX89 3704 0044 0532 0130 00", False),  # no such country
        ("de89 3704 0044 0532 0130 00", False),  # IBANs are written in capitals
        ("DE89370400440532013000123", False),  # part of a longer number
    ],
)
def test_the_iban_detector_checks_format_and_mod_97(text: str, found: bool) -> None:
    assert names({"name": "iban", "detector": "iban"}, text) == (["iban"] if found else [])


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("card 4111 1111 1111 1111", True),  # Visa test number
        ("card 4111-1111-1111-1111", True),
        ("card 5500005555555559", True),  # Mastercard
        ("card 378282246310005", True),  # American Express, 15 digits
        ("card 4111 1111 1111 1112", False),  # Luhn fails
        ("card 9111 1111 1111 1117", False),  # Luhn holds, no issuer starts with 9
        ("order 3782822463100051", False),  # Amex prefix at 16 digits: wrong length
        ("phone 0049 30 1234 5678", False),
        ("id 41111111111111111111111", False),  # part of a longer digit run
    ],
)
def test_the_card_detector_checks_luhn_issuer_and_length(text: str, found: bool) -> None:
    assert names({"name": "card", "detector": "payment_card"}, text) == (["card"] if found else [])


def test_luhn_alone_is_not_enough() -> None:
    assert plausible_card("4111111111111111")
    assert not plausible_card("0000000000000000")  # Luhn-valid, no issuer


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("write to bob.smith@example.co.uk today", True),
        ("write to zoë@exämple.de", True),
        ("user@localhost", False),
        ("a@b", False),
        ("bob..smith@example.com", False),
        ("@example.com", False),
    ],
)
def test_the_email_detector(text: str, found: bool) -> None:
    assert names({"name": "email", "detector": "email"}, text) == (["email"] if found else [])


def test_the_phone_detector_finds_valid_numbers_with_and_without_a_region() -> None:
    international = {"name": "phone", "detector": "phone"}
    german = {"name": "phone", "detector": "phone", "region": "DE"}
    assert names(international, "call +49 30 901820 now") == ["phone"]
    assert names(international, "call 030 901820 now") == []  # national: needs a region
    assert names(german, "call 030 901820 now") == ["phone"]
    assert names(german, "version 2026-01-05, order 12345") == []
    assert names(international, "call +49 30 1 now") == []  # not a valid number


def test_a_regex_classifier_runs_on_the_nfkc_form() -> None:
    contract = {"name": "contract", "regex": r"\bCN-[0-9]{6}\b"}
    assert names(contract, "see CN-123456") == ["contract"]
    assert names(contract, "see ＣＮ－１２３４５６") == ["contract"]  # full-width folds
    assert names(contract, "see CN-12345") == []


def test_kinds_scope_a_classifier_and_only_names_come_out() -> None:
    classifiers = ClassifierSet(
        [
            {**CUSTOMER, "kinds": ["context", "primary"]},
            {"name": "iban", "detector": "iban"},
        ]
    )
    payload = {
        "primary_component_id": "c1",
        "components": [
            {"component_id": "c1", "kind": "decision", "text": "Refund approved."},
            {"component_id": "c2", "kind": "evidence", "text": "customer email attached"},
            {"component_id": "c3", "kind": "context", "text": "The customer was upset."},
        ],
        "citations": [
            {
                "source_ref": "source:crm/customer",
                "locator": {"scheme": "iban", "value": "DE89370400440532013000"},
            }
        ],
    }
    facts = classifiers.classify(texts_by_kind(payload))
    assert facts == {"context": ["customer"], "citations": ["iban"]}
    # evidence mentions a customer, but the classifier is not scoped to evidence


def test_definitions_are_compiled_once_and_refused_when_unsafe() -> None:
    definitions = [CUSTOMER]
    assert classifier_set_for(definitions) is classifier_set_for([dict(CUSTOMER)])
    assert not classifier_set_for([])
    for bad in (
        {"name": "x", "regex": "(a+)+"},
        {"name": "x", "detector": "passport"},
        {"name": "x", "terms": ["a"], "detector": "iban"},
        {"name": "x", "terms": ["   "][:0]},
        {"name": "x", "kinds": ["body"], "detector": "iban"},
    ):
        with pytest.raises(ConfigurationError):
            ClassifierSet([bad])


def test_locate_shows_where_for_the_authors_terminal_only() -> None:
    classifiers = ClassifierSet([CUSTOMER, {"name": "iban", "detector": "iban"}])
    assert classifiers.locate("Kunde DE89 3704 0044 0532 0130 00") == [
        ("customer", 0, 5, "kunde"),
        ("iban", 6, 33, "DE89 3704 0044 0532 0130 00"),
    ]


EVERY_DETECTOR = ClassifierSet(
    [
        CUSTOMER,
        {"name": "iban", "detector": "iban"},
        {"name": "card", "detector": "payment_card"},
        {"name": "email", "detector": "email"},
        {"name": "phone", "detector": "phone"},
        {"name": "phone-de", "detector": "phone", "region": "DE"},
        {"name": "contract", "regex": r"\bCN-[0-9]{6}\b"},
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_any_text_classifies_to_known_names_without_raising(text: str) -> None:
    facts = EVERY_DETECTOR.classify({"primary": text, "citations": text})
    known = {c.name for c in EVERY_DETECTOR.classifiers}
    assert set(facts) <= {"primary", "citations"}
    assert all(set(names) <= known and names == sorted(names) for names in facts.values())


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789 +-()./@abcDE", max_size=120))
def test_digit_heavy_text_classifies_without_raising(text: str) -> None:
    EVERY_DETECTOR.classify({"primary": text})


_WORD = st.characters(whitelist_categories=("Ll", "Lu", "Nd"), max_codepoint=0x24F)
_SPACE = st.sampled_from([" ", ",", ".", "(", ")", "\n", "-", "!", "\u00a0"])


@settings(max_examples=200, deadline=None)
@given(st.text(_WORD, max_size=5), st.text(_WORD, max_size=5), _SPACE, _SPACE)
def test_a_term_matches_exactly_when_no_word_character_touches_it(
    before: str, after: str, left: str, right: str
) -> None:
    term = {**CUSTOMER, "terms": ["Kunde"]}
    assert names(term, f"{before}{left}KUNDE{right}{after}") == ["customer"]
    joined = f"{before}KUNDE{after}"
    touching = bool(before) or bool(after)
    assert (names(term, joined) == []) == touching


def test_a_middle_dot_joins_a_word_so_a_term_after_it_is_not_whole() -> None:
    # NFKC turns `Ŀ` into `l·`; the middle dot joins letters (Catalan `col·lega`), so
    # `ĿKUNDE` holds no whole word `kunde` (hypothesis found it), nor does `col·kunde`.
    term = {**CUSTOMER, "terms": ["Kunde"]}
    assert names(term, "ĿKUNDE") == []
    assert names(term, "col·kunde") == []
    assert names(term, "die Kunde · der Vertrag") == ["customer"]
