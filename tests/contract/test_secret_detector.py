"""The never-store detector against each disguise family of issue 23, piece by piece.

The corpora (tests/assets/secrets/) are asserted as a whole in test_secret_corpora.py; here
each mechanism is shown to do its part, and to stop where it should: TR39 confusables,
decoded views and their bounds, the seam view across fields, the proximity rule, the data
set's rules and their bounded repeats.
"""

from __future__ import annotations

import base64
import codecs
import urllib.parse

import pytest

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.contract.parsing import ToolName, parse_arguments
from engram_memory.contract.secret_decoding import MAX_DEPTH, DecodeBudget, decodings
from engram_memory.contract.secret_folding import fold_for_detection
from engram_memory.contract.secret_rules import bounded, built_in_rules, data_rules
from engram_memory.contract.secrets import DEFAULT_DETECTOR, SecretDetector, detector_for
from tests.contract.secret_corpus import capture_arguments, disguises

AWS = "AKIAIOSFODNN7EXAMPLE"
PURPOSE = "purpose:case"
FAMILIES = sorted({sample.family for sample in disguises()})


def _capture(texts: list[str], locators: list[str] | None = None) -> bool:
    """True if the detector refuses a capture of `texts` citing `locators`."""
    fields = texts + (locators or ["T-4711"])
    return DEFAULT_DETECTOR.capture_holds_secret(fields, fields)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_disguise_of_a_family_is_refused_at_parsing_as_invalid_schema(family: str) -> None:
    for sample in (s for s in disguises() if s.family == family):
        arguments = capture_arguments(sample, "disguise-key-0001", PURPOSE)
        with pytest.raises(ToolError) as caught:
            parse_arguments(
                ToolName.CAPTURE, arguments, detector=detector_for(sample.extra_patterns)
            )
        assert caught.value.code is ErrorCode.INVALID_SCHEMA, sample.sample_id


# --- TR39 confusables ------------------------------------------------------------------


def test_look_alikes_from_other_scripts_fold_to_the_ascii_they_imitate() -> None:
    assert fold_for_detection("pаssword") == "password"  # Cyrillic а
    assert fold_for_detection("АKIA") == "AKIA"  # Cyrillic А keeps its case
    assert fold_for_detection("ΙΟΝ") == "ION"  # Greek capitals: Ι is I, not TR39's l
    assert fold_for_detection("t\u0585ken") == "token"  # Armenian օ


def test_ascii_is_never_folded_so_digits_and_case_survive() -> None:
    assert fold_for_detection("Il1|O0") == "Il1|O0"


def test_text_in_other_scripts_is_folded_but_not_refused() -> None:
    for text in ("Пароль изменён клиентом.", "Ο κωδικός αλλάζει κάθε 90 ημέρες.", "Ωραία!"):
        assert fold_for_detection(text) != text
        assert not DEFAULT_DETECTOR.contains_secret(text)


# --- decoded views ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoded",
    [
        base64.b64encode(b"password=hunter22").decode(),
        base64.urlsafe_b64encode(b"password=hunter22?>").decode(),
        b"-----BEGIN RSA PRIVATE KEY-----".hex(),
        "".join(f"\\x{b:02x}" for b in b"password=hunter22"),
        urllib.parse.quote("password=hunter22", safe=""),
        "".join(f"&#{ord(c)};" for c in "password") + "=hunter22",
        codecs.encode("password=hunter22", "rot13"),
        "password=hunter22"[::-1],
    ],
    ids=["base64", "base64url", "hex", "backslash-x", "url", "html", "rot13", "reversed"],
)
def test_a_secret_under_one_encoding_is_refused(encoded: str) -> None:
    assert DEFAULT_DETECTOR.contains_secret(f"see {encoded} for details")


def test_two_layers_of_encoding_are_seen_and_a_third_is_not_decoded() -> None:
    layer = "password=hunter22"
    for _ in range(MAX_DEPTH):
        layer = base64.b64encode(layer.encode()).decode()
    assert DEFAULT_DETECTOR.contains_secret(layer)
    deeper = base64.b64encode(layer.encode()).decode()
    assert not DEFAULT_DETECTOR.contains_secret(deeper)


def test_binary_behind_base64_or_hex_is_not_text_and_not_refused() -> None:
    image = base64.b64encode(bytes(range(256)) * 4).decode()
    assert list(decodings(image, DecodeBudget(10**6))) == []
    assert not DEFAULT_DETECTOR.contains_secret(f"screenshot data:image/png;base64,{image}")
    assert not DEFAULT_DETECTOR.contains_secret("commit 66e0eba3bb98430eb66e4e0d8e37ab114b9eff80")


def test_decoding_stops_when_the_budget_is_spent() -> None:
    run = base64.b64encode(b"password=hunter22").decode()
    budget = DecodeBudget(len(run) - 1)
    assert list(decodings(run, budget)) == []
    assert budget.remaining == len(run) - 1


# --- the seam view across fields -------------------------------------------------------


def test_a_key_split_across_components_or_a_locator_is_refused() -> None:
    assert _capture(["first half " + AWS[:10], AWS[10:] + " second half"])
    assert _capture(["the key starts " + AWS[:12]], [AWS[12:]])
    assert _capture([AWS[:6], AWS[6:13], AWS[13:]])


def test_each_half_alone_is_not_a_secret() -> None:
    assert not _capture(["first half " + AWS[:10]])
    assert not _capture([AWS[10:] + " second half"])


def test_the_middle_of_a_long_field_is_not_joined_to_its_neighbours() -> None:
    long_text = "word " * 200 + "the password is" + " filler" * 100
    assert not _capture([long_text, "Summer2024!"])
    assert _capture(["word " * 200 + "the password is", "Summer2024!"])


def test_a_credential_word_ending_one_stored_string_is_not_read_with_the_next() -> None:
    digest = "sha256:9f2c4e7a1b3d5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
    assert not DEFAULT_DETECTOR.capture_holds_secret(["https://x/reset-token", digest], [])
    assert DEFAULT_DETECTOR.capture_holds_secret([f"https://x/reset-token {digest}"], [])


# --- keyword proximity and entropy -----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "password\n= hunter22",
        "password: correcthorsebatterystaple",
        "FYI my password is Tr0ub4dor&3",
        "pw=hunter22",
        "<password>Summer2024!</password>",
        '{"Summer2024!": "password"}',
        "Tr0ub4dor&3 is my password",
        "api key 9f8a7b6c5d4e3f2a1b0c9d8e7f6a",
        "Passwort: Sommer2024!",
        "пароль: Zima2024!",
        "비밀번호: Seoul2024!",
    ],
)
def test_a_credential_word_next_to_a_credential_value_is_refused(text: str) -> None:
    assert DEFAULT_DETECTOR.contains_secret(text)


@pytest.mark.parametrize(
    "text",
    [
        "The password: must be rotated every 90 days.",
        "Password: reset via the self-service portal.",
        "Her password is case-sensitive.",
        "The secret is patience.",
        "Set max_tokens=1500 for the summarizer.",
        "if password == confirmation: proceed",
        "pass: 3 of 4 checks",
        "Booking pass AB12CD for gate 4",
        "api_key = config.get_key()",
        "token=<redacted>",
        "Trace id 3fa85f64-5717-4562-b3fc-2c963f66afa6, the token bucket refills.",
    ],
)
def test_prose_about_credentials_is_not_refused(text: str) -> None:
    assert not DEFAULT_DETECTOR.contains_secret(text)


# --- rule data -------------------------------------------------------------------------


def test_the_data_sets_rules_are_loaded_and_each_is_gated_or_runs_everywhere_on_purpose() -> None:
    rules = data_rules()
    assert len(rules) >= 30
    ungated = {rule.rule_id for rule in built_in_rules() if not rule.keywords}
    assert ungated == {
        "detect-secrets:DiscordBotTokenDetector:0",
        "detect-secrets:TwilioKeyDetector:0",
        "detect-secrets:TwilioKeyDetector:1",
    }


def test_unbounded_repeats_of_the_data_set_are_capped_outside_character_classes() -> None:
    assert bounded(r"[a+*]+x*\+") == r"[a+*]{1,256}x{0,256}\+"
    # Bounding is idempotent: no rule keeps a `+` or `*` outside a character class.
    assert all(bounded(rule.pattern.pattern) == rule.pattern.pattern for rule in data_rules())


def test_a_tenant_pattern_sees_spaces_or_underscores_where_it_expects_hyphens() -> None:
    detector = SecretDetector(extra_patterns=[r"\bACME-DAC-[0-9]{6}\b"])
    assert detector.contains_secret("door code ACME DAC 123456")
    assert detector.contains_secret("door code ACME_DAC_123456")
    assert not detector.contains_secret("door code ACME DAC")
