"""The safety rules every regular expression from policy data must pass (never-store
patterns and content classifiers alike), checked when the data is validated.

Policy regexes run in-process on every capture, on text an agent chooses, so a pattern that
backtracks exponentially is a denial of service an author can ship by accident. Python's `re`
has no timeout; what it cannot take is refused up front instead:

- more than `MAX_REGEX_CHARS` characters;
- a pattern that does not compile;
- a repetition that is unbounded (or large) around another unbounded repetition, such as
  `(a+)+` or `(\\w*\\s?)*`: the classic catastrophic shape;
- a backreference (`\\1`, `(?P=name)`): it makes matching non-regular;
- a lookbehind or lookahead holding an unbounded repetition.

What passes is linear or polynomial of low degree in the text for the patterns authors write
(anchored identifiers, words, bounded runs); `policy validate --strict` also reports a
pattern that matches ordinary prose (authoring/mistakes.py).
"""

from __future__ import annotations

import re
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parser  # type: ignore[attr-defined]
from typing import Any

MAX_REGEX_CHARS = 512
# A repetition allowing more than this many rounds counts as unbounded.
_LARGE_REPEAT = 64

_REPEATS = {
    sre_constants.MAX_REPEAT,
    sre_constants.MIN_REPEAT,
    *([sre_constants.POSSESSIVE_REPEAT] if hasattr(sre_constants, "POSSESSIVE_REPEAT") else []),
}


def _children(op: Any, av: Any) -> list[Any]:
    """The sub-patterns of one parsed node."""
    if op in _REPEATS:
        return [av[2]]
    if op == sre_constants.SUBPATTERN:
        return [av[-1]]
    if op == sre_constants.BRANCH:
        return list(av[1])
    if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
        return [av[1]]
    if op == sre_constants.GROUPREF_EXISTS:
        return [branch for branch in av[1:] if branch is not None]
    if op == getattr(sre_constants, "ATOMIC_GROUP", None):
        return [av]
    return []


def _unbounded(op: Any, av: Any) -> bool:
    return op in _REPEATS and (av[1] is sre_constants.MAXREPEAT or av[1] > _LARGE_REPEAT)


def _has_unbounded(pattern: Any) -> bool:
    for op, av in pattern:
        if _unbounded(op, av) or any(_has_unbounded(sub) for sub in _children(op, av)):
            return True
    return False


def _may_match(op: Any, av: Any, char: str) -> bool:
    """Can the single-character node (op, av) match `char`? True when unsure."""
    if op == sre_constants.LITERAL:
        return bool(av == ord(char))
    if op == sre_constants.NOT_LITERAL:
        return bool(av != ord(char))
    if op == sre_constants.IN:
        try:
            return re.fullmatch(_class_text(av), char) is not None
        except (re.error, ValueError):
            return True
    return True


def _class_text(items: Any) -> str:
    parts = []
    negate = ""
    for op, av in items:
        if op == sre_constants.NEGATE:
            negate = "^"
        elif op == sre_constants.LITERAL:
            parts.append(re.escape(chr(av)))
        elif op == sre_constants.RANGE:
            parts.append(f"{re.escape(chr(av[0]))}-{re.escape(chr(av[1]))}")
        elif op == sre_constants.CATEGORY:
            parts.append(_CATEGORIES[av])
        else:
            raise ValueError("unknown class item")
    return f"[{negate}{''.join(parts)}]"


_CATEGORIES = {
    sre_constants.CATEGORY_DIGIT: r"\d",
    sre_constants.CATEGORY_NOT_DIGIT: r"\D",
    sre_constants.CATEGORY_SPACE: r"\s",
    sre_constants.CATEGORY_NOT_SPACE: r"\S",
    sre_constants.CATEGORY_WORD: r"\w",
    sre_constants.CATEGORY_NOT_WORD: r"\W",
}


def _separated(body: Any) -> bool:
    """Does every round of the repeated `body` start with a literal character that no
    unbounded repetition inside it can consume (`(?:-[a-z]+)*`)? Then the rounds cannot
    be split in more than one way and the nesting is harmless."""
    items = list(body)
    if not items or items[0][0] != sre_constants.LITERAL:
        return False
    separator = chr(items[0][1])
    for op, av in items[1:]:
        if _unbounded(op, av):
            inner = list(av[2])
            if len(inner) != 1 or _may_match(inner[0][0], inner[0][1], separator):
                return False
        elif _has_unbounded([(op, av)]):
            return False
    return True


def _problem_in(pattern: Any) -> str | None:
    for op, av in pattern:
        if op in (sre_constants.GROUPREF, sre_constants.GROUPREF_EXISTS):
            return "a backreference makes matching non-regular: refused in policy data"
        body = av[2] if op in _REPEATS else None
        if body is not None and len(body) == 1 and body[0][0] == sre_constants.SUBPATTERN:
            body = body[0][1][-1]
        if _unbounded(op, av) and _has_unbounded(av[2]) and not _separated(body):
            return (
                "an unbounded repetition around another one (like `(a+)+`) can take "
                "exponential time: refused in policy data"
            )
        if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT) and _has_unbounded(av[1]):
            return "a lookaround holding an unbounded repetition: refused in policy data"
        for sub in _children(op, av):
            problem = _problem_in(sub)
            if problem is not None:
                return problem
    return None


def regex_problem(regex: str) -> str | None:
    """Why `regex` may not be used in policy data, or None when it may."""
    if len(regex) > MAX_REGEX_CHARS:
        return f"longer than {MAX_REGEX_CHARS} characters"
    try:
        re.compile(regex)
        parsed = sre_parser.parse(regex)
    except re.error as exc:
        return f"not a valid regular expression: {exc.msg}"
    return _problem_in(parsed)


def checked_regex(regex: str) -> str:
    """`regex` itself when policy data may use it (a pydantic after-validator).

    Raises:
        ValueError: why it may not.
    """
    problem = regex_problem(regex)
    if problem is not None:
        raise ValueError(problem)
    return regex
