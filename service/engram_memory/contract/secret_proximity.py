"""Keyword proximity and entropy: a credential word with a credential-looking value beside it.

Token shapes (secret_rules.py) catch keys that announce themselves by a prefix. A password
does not: `password: correcthorsebatterystaple`, "my password is Tr0ub4dor&3",
`pw=hunter2`, `password\\n=…`, `"s3cr3tV4lue": "password"` or "api key 9f8a7b6c5d4e3f2a1b0c".
This rule starts at each credential word the keyword pass found (detect-secrets' names plus
the project's, in several languages) and judges the value next to it, before or after:

- after an assignment (`=`, `:=`, `=>`, `->`): any value but a placeholder or a dotted
  code name (`request.form.get`) is a secret;
- after a colon (or an XML start tag): a quoted value, or one that looks generated
  (letters with digits or symbols), or a long lower-case passphrase;
- after "is"/"was" (and their equivalents): only a value that looks generated;
- with nothing in between: only a long high-entropy value (Shannon entropy per character);
- before the word ("… is my password", `"value": "password"`): only a value that looks
  generated.

So prose like "the password: must be rotated", "max_tokens=1500", "password == confirmation"
or "the secret is communication" is not flagged. Work per keyword occurrence is bounded (a
match anchored at the keyword over at most ~300 characters, a search over the 96 before it).
"""

from __future__ import annotations

import math
import re
from collections import Counter

# Credential words (besides detect-secrets' names), lower-case; folded like the text before
# use (secrets.py), so Cyrillic or Hangul keywords meet text folded the same way.
PROJECT_CREDENTIAL_NAMES = (
    "password", "passwort", "passwd", "passphrase", "pwd", "pw", "pass", "secret", "token",
    "credential", "credentials", "apikey", "api_key", "api-key", "api key",
    *(
        f"{kind}{joiner}key"
        for kind in ("access", "secret", "private", "signing", "encryption", "master", "auth")
        for joiner in ("_", "-", " ", "")
    ),
    "kennwort", "mot de passe", "mdp", "contraseña", "contrasena", "clave", "senha",
    "wachtwoord", "hasło", "haslo", "lösenord", "losenord", "adgangskode", "salasana",
    "şifre", "пароль", "パスワード", "密码", "密碼", "口令", "비밀번호",
)  # fmt: skip
# Short words need a non-letter before them (`bypass`, `spwd` are not keywords).
_SHORT = 4
_ASSIGN = frozenset({"=", ":=", "=>", "->"})
_WORD_SEPARATORS = r"is|was|equals|ist|lautet|est|es|era|sera|wynosi|jest|je|er|ar|är|on"
_TAIL = re.compile(
    r"(?:[_.-][a-z0-9]{1,16}){0,2}"  # password_hash, token.value
    r"[\\\"'`\])]{0,4}"
    r"[ \t]{0,8}(?:\n[ \t]{0,8})?"
    r"(?P<sep>==|:=|=>|->|=|:|>|(?:\b(?:"
    + _WORD_SEPARATORS
    + r")\b|是|为|は|는|은)(?:[ \t]{0,4}:)?|)"
    r"[ \t]{0,8}(?:\n[ \t]{0,8})?"
    r"(?P<open>[\\\"'`\[(]{0,4})"
    r"(?P<value>[^\s\"'`\\,;<>{}()\[\]、。，．！？：；]{1,256})"
)
_BEFORE = 96
# `"Summer2024!": "password"`, `hunter22 = password`, "Tr0ub4dor&3 is my password". An
# unquoted value needs a space before its `=` or `:` (base64 padding `…CYII= the secret`
# is no assignment). Matched on the REVERSED text before the keyword, anchored at the
# keyword, so each occurrence costs one anchored match, not a search.
_VALUE_CLASS = r"[^\s\"'`\\,;<>{}()\[\]=:]"
_REVERSED_BEFORE = re.compile(
    r"(?:[_.-][a-z0-9]{1,16}){0,2}"  # `the secret_` → words between value and keyword
    r"(?:[\\\"'`]{0,2}[ \t]{0,4}[=:][ \t]{0,4}[\\\"'`]{1,2}(?P<quoted>"
    + _VALUE_CLASS
    + r"{6,64})[\\\"'`]"
    r"|[\\\"'`]{0,2}[ \t]{1,4}(?:=|:|>-)[ \t]{1,4}(?P<spaced>" + _VALUE_CLASS + r"{6,64})"
    r"|[ \t]{1,4}(?:(?:ym|eht|ruo|ruoy|sih|reh|rieht|a|na)[ \t]{1,4})?(?:si|saw)[ \t]{1,4}"
    r"(?P<said>" + _VALUE_CLASS + r"{6,64}))"
)
_PLACEHOLDERS = frozenset(
    {
        "null",
        "none",
        "nil",
        "true",
        "false",
        "redacted",
        "removed",
        "hidden",
        "masked",
        "empty",
        "undefined",
        "unset",
        "required",
        "optional",
        "todo",
        "tbd",
        "n/a",
        "xxx",
        "string",
        "str",
        "int",
        "bool",
        "value",
        "secret",
        "password",
        "token",
    }
)
_PLACEHOLDER_START = frozenset("$%<{*#")
_DOTTED_NAME = re.compile(r"[a-z_]+(?:\.[a-z_]+)+(?:\(\))?")
_SYMBOLS = frozenset("!@#$%^&*+=?~|/\\")
_MIN_ENTROPY_LENGTH = 16
_MIN_ENTROPY = 3.5
_MIN_KINDS = 3
_MIN_PASSPHRASE = 16


def _is_placeholder(value: str) -> bool:
    if value[0] in _PLACEHOLDER_START or value in _PLACEHOLDERS:
        return True
    return len(set(value)) == 1 or _DOTTED_NAME.fullmatch(value) is not None


def _looks_generated(value: str, minimum: int) -> bool:
    """ASCII letters with digits or symbols, like a chosen or generated credential (CJK
    text has no spaces: a "value" running on into the next sentence is not one)."""
    if len(value) < minimum or "://" in value or not value.isascii():
        return False
    has_letter = any(c.isalpha() for c in value)
    has_other = any(c.isdigit() or c in _SYMBOLS for c in value)
    return has_letter and has_other


def _entropy(value: str) -> float:
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _high_entropy(value: str) -> bool:
    """Long, several digits and letters, and a spread of characters like a random string
    (`bucketcase-7#correction`, two words run together, is not)."""
    if len(value) < _MIN_ENTROPY_LENGTH or not value.isascii():
        return False
    digits = sum(c.isdigit() for c in value)
    letters = sum(c.isalpha() for c in value)
    if digits < _MIN_KINDS or letters < _MIN_KINDS:
        return False
    return _entropy(value) >= _MIN_ENTROPY


def _value_after(text: str, end: int, short: bool) -> bool:
    match = _TAIL.match(text, end)
    if match is None:
        return False
    separator, value = match.group("sep"), match.group("value").rstrip(".")
    if not value or separator == "==" or _is_placeholder(value):
        return False
    minimum = 8 if short else 6
    if separator in _ASSIGN:
        return len(value) >= 3
    if separator in (":", ">"):  # `password: …`, `<password>…`
        if match.group("open") and len(value) >= 3:
            return True
        passphrase = len(value) >= _MIN_PASSPHRASE and value.isalpha() and value.islower()
        return passphrase or _looks_generated(value, minimum)
    if separator:
        return _looks_generated(value, minimum)
    # Nothing in between: the word must stand alone (not `…s5pw8lo1…` inside base64).
    return text[match.start("value") - 1].isspace() and _high_entropy(value)


def _value_before(text: str, start: int) -> bool:
    before = text[max(0, start - _BEFORE) : start][::-1]
    match = _REVERSED_BEFORE.match(before)
    if match is None:
        return False
    value = (match.group("quoted") or match.group("spaced") or match.group("said"))[::-1]
    return not _is_placeholder(value) and _looks_generated(value, 6)


def _ascii_letter(char: str) -> bool:
    return "a" <= char <= "z"


def credential_near(lowered: str, start: int, end: int) -> bool:
    """True if the credential word at `lowered[start:end]` has a credential value beside it.

    `lowered` is the folded, lower-cased text the keyword pass ran on.
    """
    short = end - start <= _SHORT
    if short and start > 0 and lowered[start - 1].isascii() and lowered[start - 1].isalnum():
        return False  # `bypass`, `5pw`
    if end < len(lowered) and _ascii_letter(lowered[end]):
        return False  # `tokenizer`, `passwords`, `secretary`: another word
    if short and end < len(lowered) and lowered[end].isdigit():
        return False
    return _value_after(lowered, end, short) or _value_before(lowered, start)
