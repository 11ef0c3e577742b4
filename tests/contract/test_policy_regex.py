"""The safety rules of policy-data regexes, shared by never-store patterns and classifiers."""

from __future__ import annotations

import pytest

from engram_memory.contract.policy_regex import MAX_REGEX_CHARS, checked_regex, regex_problem


@pytest.mark.parametrize(
    "regex",
    [
        r"\bACME-DAC-[0-9]{6}\b",
        r"[a-z]{1,3}(?:-[a-z]+)*",  # each round starts with a `-` the inner run cannot eat
        r"\w+(?:\.\w+)*@",
        r"(?:ab){1,64}",
        r"(?i)\bcustomer\b",
    ],
)
def test_linear_patterns_pass(regex: str) -> None:
    assert regex_problem(regex) is None
    assert checked_regex(regex) == regex


@pytest.mark.parametrize(
    "regex",
    [
        r"(a+)+$",
        r"(\w*\s?)*x",
        r"(?:a{2,100})+",
        r"(?:-[a-z-]+)*",  # the inner run can eat the separator
        r"(?:\.\S+)+",
        r"(a)\1",
        r"(?=.*secret)",
        "(",
        "a" * (MAX_REGEX_CHARS + 1),
    ],
)
def test_catastrophic_unbounded_or_broken_patterns_are_refused(regex: str) -> None:
    assert regex_problem(regex) is not None
    with pytest.raises(ValueError):  # noqa: PT011 - the message is for the author
        checked_regex(regex)
