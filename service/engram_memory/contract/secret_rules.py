"""The secret shapes the never-store detector runs, each behind the keywords that gate it.

Two sources:
- `secret_rules.json`: the token shapes of a maintained detector set (detect-secrets'
  plugin denylists), copied as data by scripts/secret_rules.py, with the literal keywords
  that must occur near a match;
- `_PROJECT_RULES` below: the shapes SPEC §11 names (`.env` lines, headers, connection
  strings, token prefixes) and those the data set lacks or words too strictly (space-less
  PEM headers, unsigned JWTs, `user:password@host` without a scheme, AWS key ids in
  groups). Assignments (`password=…`, `"token": "…"`) are judged by the proximity rule
  (secret_proximity.py), which looks at the value beside every credential word.

A rule runs only where one of its keywords occurs (found by one Aho-Corasick pass, see
secrets.py), and only on a window around it, so ordinary prose skips nearly every rule.
Keywords are lower-case and matched on the folded, lower-cased text.

Performance: every project rule starts with a literal or a short anchored token and uses
bounded quantifiers; the data set's rules run on bounded windows only.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Rule:
    """One shape: runs where any of `keywords` occurs and all of `requires` occur, on the
    characters from `before` ahead of each occurrence to `after` past it."""

    rule_id: str
    keywords: tuple[str, ...]
    pattern: re.Pattern[str]
    requires: tuple[str, ...] = ()
    before: int = 80
    after: int = 600


_AWS_PREFIXES = ("akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "anpa", "anva", "apka")
_SEPARATOR = r"[\s_.:/|-]{0,3}"
_AWS_GROUPED_PREFIXES = ("akia", "asia", "abia", "acca")
# The prefixes as written, and written one character at a time (`a k i a`, `a-k-i-a`).
_AWS_GROUPED_KEYWORDS = _AWS_GROUPED_PREFIXES + tuple(
    sep.join(p) for p in _AWS_GROUPED_PREFIXES for sep in (" ", "-", ".", "_")
)

# (id, keywords, requires, pattern)
_PROJECT_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    # PEM / OpenSSH / PGP private keys, with or without spaces and dashes.
    ("pem", ("private key",), (), r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    (
        "pem-loose",
        ("begin",),
        (),
        r"(?i)BEGIN[\s_-]{0,4}(?:[A-Z0-9]{2,10}[\s_-]{0,4}){0,3}PRIVATE[\s_-]{0,4}KEY",
    ),
    # AWS access key ids, also in groups (`AKIA-IOSF-…`, `akia iosf …`): a digit is required
    # among the 16 characters so that a name like "Akia" starting a sentence is no key.
    (
        "aws-key-id",
        _AWS_PREFIXES,
        (),
        r"\b(?:" + "|".join(p.upper() for p in _AWS_PREFIXES) + r")[0-9A-Z]{16}",
    ),
    (
        "aws-key-id-grouped",
        _AWS_GROUPED_KEYWORDS,
        (),
        r"(?i)(?<![A-Za-z0-9])(?:"
        + "|".join(_SEPARATOR.join(p.upper()) for p in _AWS_GROUPED_PREFIXES)
        + ")"
        r"(?=(?:" + _SEPARATOR + r"[A-Z]){0,15}" + _SEPARATOR + r"[0-9])"
        r"(?:" + _SEPARATOR + r"[A-Z0-9]){16}(?![A-Za-z0-9])",
    ),
    # GitHub, GitLab, Slack, npm, PyPI, Hugging Face, DigitalOcean, Shopify, SendGrid.
    ("github", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), (), r"\bgh[pousr]_[A-Za-z0-9]{30,255}\b"),
    ("github-pat", ("github_pat_",), (), r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b"),
    ("gitlab", ("glpat-",), (), r"\bglpat-[A-Za-z0-9_-]{20,255}"),
    (
        "slack",
        ("xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"),
        (),
        r"\bxox[abprs]-[A-Za-z0-9-]{10,255}",
    ),
    ("slack-app", ("xapp-",), (), r"\bxapp-[0-9]-[A-Za-z0-9-]{10,255}"),
    ("npm", ("npm_",), (), r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi", ("pypi-age",), (), r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    ("huggingface", ("hf_",), (), r"\bhf_[A-Za-z0-9]{30,64}\b"),
    ("digitalocean", ("dop_v1_", "doo_v1_", "dor_v1_"), (), r"\bdo[por]_v1_[a-f0-9]{64}\b"),
    (
        "shopify",
        ("shpat_", "shpca_", "shppa_", "shpss_"),
        (),
        r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b",
    ),
    ("sendgrid", ("sg.",), (), r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}"),
    # OpenAI / Anthropic style `sk-` keys (need a digit: hyphenated words are not keys).
    ("sk-key", ("sk-",), (), r"\bsk-(?=[A-Za-z0-9_-]{0,255}[0-9])[A-Za-z0-9_-]{20,255}"),
    ("stripe", ("k_live_", "k_test_"), (), r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,255}"),
    ("google-api-key", ("aiza",), (), r"\bAIza[0-9A-Za-z_-]{35}"),
    # JSON Web Tokens, signed or not (`header.payload.` or `header.payload`).
    ("jwt", ("eyj",), (), r"\beyJ[A-Za-z0-9_-]{4,1024}\.eyJ[A-Za-z0-9_-]{4,8192}"),
    # URLs and connection strings with `user:password@` (the user may be empty: redis://:pw@).
    ("url-userinfo", ("://",), ("@",), r"://[^\s:/?#@\"'<>]{0,256}:[^\s/?#@\"'<>]{1,256}@"),
    # `admin:p4ssw0rd@db.internal` without a scheme: the password mixes letters with digits
    # or symbols, and `mailto:`-like prefixes are not users.
    (
        "userinfo-without-scheme",
        ("@",),
        (":",),
        r"(?<![\w/.@:%+-])(?!(?:mailto|tel|sips?|xmpp|cid|mid|news|urn|ref|re|fw|fwd|aw|wg):)"
        r"[A-Za-z0-9._-]{1,64}:(?=[^\s:/@]{0,127}[A-Za-z])(?=[^\s:/@]{0,127}[0-9!#$%^&*+=?~])"
        r"[^\s:/@\"'<>]{3,128}@[A-Za-z0-9-]{1,63}",
    ),
    # `password=…`, `"token": "…"`, `password: Hunter42x` and the like are the proximity
    # rule's (secret_proximity.py): it judges the value next to each credential word.
    # .env lines: FOO_KEY=..., export DB_PASSWORD="...".
    (
        "dotenv",
        ("_key", "_secret", "_token", "_pass", "_pwd", "_credential"),
        ("=",),
        r"(?m)^[ \t]{0,16}(?:export[ \t]{1,8})?[A-Z][A-Z0-9_]{0,127}"
        r"_(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PASS|PWD|CREDENTIALS?)[ \t]{0,8}=[ \t]{0,8}"
        r"[\"']?[^\s\"']",
    ),
    # Authorization headers: a known scheme with a credential, or a long opaque credential.
    (
        "authorization",
        ("authorization",),
        (":",),
        r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]{0,8}:[ \t]{0,8}[\"']?"
        r"(?:(?:bearer|basic|digest|token|bot|negotiate|ntlm|apikey|aws4-hmac-sha256)[ \t]{1,8}"
        r"(?:(?=[A-Za-z0-9._~+/=:-]{0,255}[0-9+/=])[A-Za-z0-9._~+/=:-]{8,}"
        r"|[A-Za-z0-9._~+/=:-]{16,})"
        r"|(?=[^\s]{0,255}[0-9])[A-Za-z0-9._~+/=-]{20,})",
    ),
    # Bare bearer credentials.
    (
        "bearer",
        ("bearer",),
        (),
        r"\bBearer[ \t]{1,8}(?=[A-Za-z0-9._~+/-]{0,255}[0-9])[A-Za-z0-9._~+/-]{20,}",
    ),
    # Cookie headers carrying a name=value pair.
    (
        "cookie",
        ("cookie",),
        (":", "="),
        r"(?i)\b(?:set-)?cookie[\"']?[ \t]{0,8}:[ \t]{0,8}[\"']?[^\s=;:\"']{1,128}=[^\s;\"']",
    ),
)


# Repeats the data set leaves unbounded (`+`, `*`) are capped so that a rule's work per start
# position is bounded: `eyJ[…]+\.` over 64 KiB of `eyJ-eyJ-…` would otherwise be quadratic.
_MAX_REPEAT = 256


def bounded(pattern: str) -> str:
    """`pattern` with every `+` and `*` repeat outside a character class capped."""
    out: list[str] = []
    in_class = escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char in "+*":
            out.append(f"{{{1 if char == '+' else 0},{_MAX_REPEAT}}}")
            continue
        out.append(char)
    return "".join(out)


@functools.cache
def _data() -> dict[str, object]:
    text = (
        resources.files("engram_memory.contract").joinpath("secret_rules.json").read_text("utf-8")
    )
    loaded: dict[str, object] = json.loads(text)
    return loaded


def data_rules() -> tuple[Rule, ...]:
    """The detect-secrets shapes from secret_rules.json."""
    rules = _data()["rules"]
    assert isinstance(rules, list)
    return tuple(
        Rule(
            rule_id="detect-secrets:" + str(rule["id"]),
            keywords=tuple(rule["keywords"]),
            pattern=re.compile(bounded(rule["regex"]), int(rule["flags"])),
            before=int(rule["window"][0]),
            after=int(rule["window"][1]),
        )
        for rule in rules
    )


def data_credential_names() -> tuple[str, ...]:
    """detect-secrets' credential names (`api_?key` …) as the literals they stand for."""
    names = _data()["credential_names"]
    assert isinstance(names, list)
    literals: list[str] = []
    for name in names:
        literals.extend({str(name).replace("_?", "_"), str(name).replace("_?", "")})
    return tuple(sorted(set(literals)))


# (before, after) where a project rule needs other than Rule's default context.
_PROJECT_WINDOWS: dict[str, tuple[int, int]] = {
    "pem": (64, 16),
    "pem-loose": (8, 120),
    "aws-key-id": (8, 32),
    "aws-key-id-grouped": (8, 128),
    "jwt": (8, 1200),
    "userinfo-without-scheme": (200, 80),
    "dotenv": (160, 64),
    "cookie": (8, 320),
}


def project_rules() -> tuple[Rule, ...]:
    rules = []
    for rule_id, keywords, requires, pattern in _PROJECT_RULES:
        before, after = _PROJECT_WINDOWS.get(rule_id, (Rule.before, Rule.after))
        rules.append(
            Rule(rule_id, keywords, re.compile(pattern), requires, before=before, after=after)
        )
    return tuple(rules)


@functools.cache
def built_in_rules() -> tuple[Rule, ...]:
    """Every built-in rule: the data set's, then the project's."""
    return data_rules() + project_rules()
