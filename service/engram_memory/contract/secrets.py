"""The never-store detector (SPEC §11): secret shapes are refused before anything is stored.

A match is reported as a bare boolean so that no caller can echo, log or store it.

Performance: capture strings reach 64 KiB each and the whole argument object 1 MiB, so every
built-in pattern starts with a literal or a short anchored token and uses bounded quantifiers
with disjoint neighbouring classes: no nested quantifiers, no exponential backtracking, and the
work per start position is capped.

Evasions: shapes are matched on a folded copy of the text (secret_folding.py: format
characters and combining marks removed, compatibility forms decomposed), so zero-width,
full-width or decorated secrets are refused too; what is stored stays the NFC input.

False positives: assignments such as `token: bucket` in ordinary prose are not flagged; an
unquoted `key: value` only counts when the value mixes letters and digits, like generated
credentials do.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.contract.secret_folding import fold_for_detection

# Names that mark the value assigned to them as a credential. `access_token`, `client_secret`
# and `DB_PASSWORD` match through their last word.
_KEY_NAMES = (
    r"(?:pass(?:word|wd|phrase)|pwd|secret|token|credentials?|apikey"
    r"|(?:api|access|secret|private|signing|encryption|master)[_-]?key)"
)
_KEY_HINTS = ("pass", "pwd", "secret", "token", "credential", "key")
# A credential value: no whitespace, quotes or separators, not a placeholder like $X or <x>.
_VALUE_START = r"[^\s\"'`<>${}*,;()\[\]]"
_VALUE_REST = r"[^\s\"'`,;]"
# `db_password:` counts, `mypassword:` need not.
_NO_ALNUM_BEFORE = r"(?<![A-Za-z0-9])"

_ASSIGN = (_KEY_HINTS, ("=",))
_COLON = (_KEY_HINTS, (":",))
_QUOTED_COLON = (_KEY_HINTS, (":",), ('"', "'", "`"))

Hints = tuple[tuple[str, ...], ...]

# (hints, pattern). A pattern runs only if, for every group of its hints, the case-folded text
# contains at least one member. Substring tests are far cheaper than a regex scan, so ordinary
# prose skips nearly all patterns.
_BUILT_IN: tuple[tuple[Hints, str], ...] = (
    # PEM / OpenSSH / PGP private keys.
    ((("private key",),), r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    # AWS access key ids.
    (
        (("akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "anpa", "anva", "apka"),),
        r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|APKA)[0-9A-Z]{16}\b",
    ),
    # GitHub tokens.
    ((("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),), r"\bgh[pousr]_[A-Za-z0-9]{30,255}\b"),
    ((("github_pat_",),), r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b"),
    # GitLab, Slack, npm, PyPI, Hugging Face, DigitalOcean, Shopify, SendGrid.
    ((("glpat-",),), r"\bglpat-[A-Za-z0-9_-]{20,255}"),
    ((("xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"),), r"\bxox[abprs]-[A-Za-z0-9-]{10,255}"),
    ((("xapp-",),), r"\bxapp-[0-9]-[A-Za-z0-9-]{10,255}"),
    ((("npm_",),), r"\bnpm_[A-Za-z0-9]{36}\b"),
    ((("pypi-age",),), r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    ((("hf_",),), r"\bhf_[A-Za-z0-9]{30,64}\b"),
    ((("dop_v1_", "doo_v1_", "dor_v1_"),), r"\bdo[por]_v1_[a-f0-9]{64}\b"),
    ((("shpat_", "shpca_", "shppa_", "shpss_"),), r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
    ((("sg.",),), r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}"),
    # OpenAI / Anthropic style `sk-` keys (need a digit: hyphenated words are not keys).
    ((("sk-",),), r"\bsk-(?=[A-Za-z0-9_-]{0,255}[0-9])[A-Za-z0-9_-]{20,255}"),
    # Stripe secret and restricted keys.
    ((("k_live_", "k_test_"),), r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,255}"),
    # Google API keys.
    ((("aiza",),), r"\bAIza[0-9A-Za-z_-]{35}"),
    # JSON Web Tokens (header and payload are base64url JSON objects).
    (
        (("eyj",),),
        r"\beyJ[A-Za-z0-9_-]{4,1024}\.eyJ[A-Za-z0-9_-]{4,8192}\.[A-Za-z0-9_-]{0,4096}",
    ),
    # URLs and connection strings with `user:password@` (the user may be empty: redis://:pw@).
    ((("://",), ("@",)), r"://[^\s:/?#@\"'<>]{0,256}:[^\s/?#@\"'<>]{1,256}@"),
    # `password=...`, `api_key = "..."` (any value but a placeholder).
    (
        _ASSIGN,
        r"(?i)"
        + _KEY_NAMES
        + r"[\"']?[ \t]{0,8}=(?!=)[ \t]{0,8}[\"']?"
        + _VALUE_START
        + _VALUE_REST
        + r"{2,}",
    ),
    # `"token": "..."` and `password: '...'` (quoted values).
    (
        _QUOTED_COLON,
        r"(?i)[\"'][A-Za-z0-9_.-]{0,64}"
        + _KEY_NAMES
        + r"[\"'][ \t]{0,8}:[ \t]{0,8}[\"']"
        + _VALUE_START
        + r"[^\s\"']{2,}",
    ),
    (
        _QUOTED_COLON,
        r"(?i)"
        + _NO_ALNUM_BEFORE
        + _KEY_NAMES
        + r"[ \t]{0,8}:[ \t]{0,8}[\"'`]"
        + _VALUE_START
        + r"[^\s\"'`]{2,}",
    ),
    # Unquoted `password: Hunter42x`: only values mixing letters and digits.
    (
        _COLON,
        r"(?i)" + _NO_ALNUM_BEFORE + _KEY_NAMES + r"[ \t]{0,8}:[ \t]{0,8}"
        r"(?=[^\s]{0,255}[A-Za-z])(?=[^\s]{0,255}[0-9])" + _VALUE_START + _VALUE_REST + r"{5,255}",
    ),
    # .env lines: FOO_KEY=..., export DB_PASSWORD="...".
    (
        (("_key", "_secret", "_token", "_pass", "_pwd", "_credential"), ("=",)),
        r"(?m)^[ \t]{0,16}(?:export[ \t]{1,8})?[A-Z][A-Z0-9_]{0,127}"
        r"_(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PASS|PWD|CREDENTIALS?)[ \t]{0,8}=[ \t]{0,8}"
        r"[\"']?[^\s\"']",
    ),
    # Authorization headers: a known scheme with a credential, or a long opaque credential.
    (
        (("authorization",), (":",)),
        r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]{0,8}:[ \t]{0,8}[\"']?"
        r"(?:(?:bearer|basic|digest|token|bot|negotiate|ntlm|apikey|aws4-hmac-sha256)[ \t]{1,8}"
        r"(?:(?=[A-Za-z0-9._~+/=:-]{0,255}[0-9+/=])[A-Za-z0-9._~+/=:-]{8,}"
        r"|[A-Za-z0-9._~+/=:-]{16,})"
        r"|(?=[^\s]{0,255}[0-9])[A-Za-z0-9._~+/=-]{20,})",
    ),
    # Bare bearer credentials.
    (
        (("bearer",),),
        r"\bBearer[ \t]{1,8}(?=[A-Za-z0-9._~+/-]{0,255}[0-9])[A-Za-z0-9._~+/-]{20,}",
    ),
    # Cookie headers carrying a name=value pair.
    (
        (("cookie",), (":",), ("=",)),
        r"(?i)\b(?:set-)?cookie[\"']?[ \t]{0,8}:[ \t]{0,8}[\"']?[^\s=;:\"']{1,128}=[^\s;\"']",
    ),
)


class SecretDetector:
    """Recognizes secret shapes in text (SPEC §11).

    `extra_patterns` are Python regular expressions from policy data; their authors own their
    performance. Matching is a boolean on purpose: the match is never handed out.
    """

    __slots__ = ("_patterns",)

    def __init__(self, extra_patterns: Sequence[str] = ()) -> None:
        """Compile the built-in shapes plus `extra_patterns`.

        Raises:
            ConfigurationError: an extra pattern is not a valid regular expression.
        """
        compiled = [(hints, re.compile(pattern)) for hints, pattern in _BUILT_IN]
        for pattern in extra_patterns:
            try:
                compiled.append(((), re.compile(pattern)))
            except re.error as exc:
                raise ConfigurationError("invalid never-store pattern in policy data") from exc
        self._patterns: tuple[tuple[Hints, re.Pattern[str]], ...] = tuple(compiled)

    def contains_secret(self, text: str) -> bool:
        """True if `text`, or its folded form (secret_folding.py), holds any secret shape.

        The folded form defeats zero-width, format, full-width and combining-mark evasions;
        `text` itself is scanned too when folding changed it, so a policy-data pattern
        written for the text as stored (accents and all) still matches.
        """
        folded = fold_for_detection(text)
        if self._matches(folded):
            return True
        return folded != text and self._matches(text)

    def _matches(self, text: str) -> bool:
        lowered = text.casefold()
        for hints, pattern in self._patterns:
            if not all(any(hint in lowered for hint in group) for group in hints):
                continue
            if pattern.search(text) is not None:
                return True
        return False

    def any_secret(self, texts: Iterable[str]) -> bool:
        """True if any of `texts` holds a secret shape."""
        return any(self.contains_secret(t) for t in texts)


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
