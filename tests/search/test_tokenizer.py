"""offline_lexical_v1 tokenizer (SPEC §10.1)."""

from __future__ import annotations

import pytest

from engram_memory.search.tokenizer import tokenize


def test_short_pure_ascii_letter_tokens_are_dropped() -> None:
    assert tokenize("db is a DB") == []


def test_short_tokens_with_digits_or_non_ascii_letters_are_kept() -> None:
    assert tokenize("v2 é 42 x1 ü") == ["v2", "é", "42", "x1", "ü"]


def test_three_letter_ascii_tokens_are_kept() -> None:
    assert tokenize("the API") == ["the", "api"]


def test_text_is_fully_lowercased_before_splitting() -> None:
    # str.lower() applies special casing: ß stays, final sigma becomes ς.
    assert tokenize("Straße ΣΟΦΟΣ") == ["straße", "\u03c3\u03bf\u03c6\u03bf\u03c2"]


def test_full_lowercase_can_split_a_word_as_the_reference_does() -> None:
    # "İ" lowercases to "i" + U+0307 (a combining mark, not a letter), so the run breaks and
    # the lone "i" is then dropped as a short ASCII token.
    assert tokenize("İstanbul") == ["stanbul"]


def test_mixed_scripts_are_split_on_non_word_characters() -> None:
    assert tokenize("東京タワー and Москва-2024!") == ["東京タワー", "and", "москва", "2024"]


def test_underscores_are_word_characters() -> None:
    assert tokenize("snake_case __init__ _a a_ __") == ["snake_case", "__init__", "_a", "a_", "__"]


def test_punctuation_and_whitespace_separate_tokens() -> None:
    assert tokenize("don't-stop\nrunning\tnow") == ["don", "stop", "running", "now"]


@pytest.mark.parametrize("text", ["", "   ", "!?-", "a b c"])
def test_text_without_kept_tokens_gives_no_tokens(text: str) -> None:
    assert tokenize(text) == []


def test_duplicates_are_kept_in_order() -> None:
    assert tokenize("Alpha beta ALPHA") == ["alpha", "beta", "alpha"]
