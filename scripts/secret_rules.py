"""Regenerate service/engram_memory/contract/secret_rules.json from detect-secrets' plugins.

The never-store detector takes its token shapes as data from a maintained detector set
(detect-secrets, Yelp) instead of hand-writing them. This script copies each plugin's
`denylist` regular expressions (and the keyword plugin's credential names) into JSON and adds
the literal keywords the detector's Aho-Corasick prefilter looks for before running a rule.

Run after upgrading detect-secrets (a dev dependency; the service does not import it):

    .venv/bin/python scripts/secret_rules.py

tests/contract/test_secret_rules_data.py fails when the committed JSON and the installed
detect-secrets disagree, or when a plugin has no keywords here.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent.parent / "service/engram_memory/contract/secret_rules.json"

# Lower-case literals, one of which occurs (after folding) wherever the plugin's regex can
# match. An empty tuple means "no literal": the rule runs on every text.
KEYWORDS: dict[str, tuple[str, ...]] = {
    "AWSKeyDetector": ("akia", "asia", "abia", "acca", "a3t", "aws"),
    "ArtifactoryDetector": ("akc",),
    "AzureStorageKeyDetector": ("accountkey=",),
    "BasicAuthDetector": ("://",),
    "CloudantDetector": ("key", "pw", "pass", "token"),
    "DiscordBotTokenDetector": (),
    "GitHubTokenDetector": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "GitLabTokenDetector": (
        "glpat-",
        "gldt-",
        "glft-",
        "glsoat-",
        "glrt-",
        "gr1348941",
        "glcbt-",
        "glimt-",
        "glptt-",
        "glagent-",
        "gloas-",
    ),
    "IbmCloudIamDetector": ("key", "pwd", "pass", "token"),
    "IbmCosHmacDetector": ("secret",),
    "JwtTokenDetector": ("eyj",),
    "MailchimpDetector": ("-us",),
    "NpmDetector": (":_authtoken",),
    "OpenAIDetector": ("t3blbkfj",),
    "PrivateKeyDetector": ("begin", "putty-user-key-file"),
    "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("sg.",),
    "SlackDetector": ("xox", "hooks.slack.com"),
    "SoftlayerDetector": ("key", "pwd", "pass", "token", "softlayer"),
    "SquareOAuthDetector": ("sq0csp-",),
    "StripeDetector": ("k_live_",),
    "TelegramBotTokenDetector": (":",),
    "TwilioKeyDetector": (),
}

# Per-pattern keywords where one pattern of a plugin differs from the others.
PATTERN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "CloudantDetector:2": ("cloudant.com",),
    "CloudantDetector:3": ("cloudant.com",),
    "SoftlayerDetector:1": ("api.softlayer.com",),
}

# Characters of context a match may need (before, after) its keyword: the rule runs on that
# window around each keyword occurrence only. Most patterns start at their keyword.
DEFAULT_WINDOW = (64, 512)
WINDOWS: dict[str, tuple[int, int]] = {
    "CloudantDetector": (64, 160),
    "IbmCloudIamDetector": (64, 160),
    "IbmCosHmacDetector": (80, 160),
    "SoftlayerDetector": (64, 160),
    "MailchimpDetector": (40, 8),
    "NpmDetector": (300, 320),
    "OpenAIDetector": (300, 64),
    "TelegramBotTokenDetector": (16, 48),
}

_PROXIMITY_COVERS = (
    "credential word + separator + value: the proximity rule judges that for every credential"
    " word; as a regex led by optional prefixes it runs at each `key`, `pass` or `token` in"
    " prose and cost more than all other rules together"
)

# Plugins or single patterns left out, each with the reason (they would refuse ordinary text).
EXCLUDED: dict[str, str] = {
    "IPPublicDetector": "an IP address is not a credential; tickets quote them all the time",
    "AWSKeyDetector:0": (
        "case-insensitive and without word boundaries it fires inside German compounds"
        " (`Asiatischerlebensmittel…`) and base64 data; the project's aws-key-id rules keep"
        " the shape with boundaries and see lower-cased and grouped keys"
    ),
    **dict.fromkeys(
        (
            "CloudantDetector:0",
            "CloudantDetector:1",
            "IbmCloudIamDetector:0",
            "SoftlayerDetector:0",
        ),
        _PROXIMITY_COVERS,
    ),
    "ArtifactoryDetector:1": "`AP` + hex + 8 alphanumerics is also every such order or part number",
}


def _plugins() -> dict[str, Any]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    return {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}


def build() -> dict[str, Any]:
    """The JSON document, from the installed detect-secrets."""
    from detect_secrets.plugins.keyword import DENYLIST

    rules: list[dict[str, Any]] = []
    for name, cls in sorted(_plugins().items()):
        denylist = getattr(cls, "denylist", None)
        if not denylist or name in EXCLUDED:
            continue
        if name not in KEYWORDS:
            raise SystemExit(f"detect-secrets plugin {name} has no keywords in {__file__}")
        for index, pattern in enumerate(denylist):
            rule_id = f"{name}:{index}"
            if rule_id in EXCLUDED:
                continue
            rules.append(
                {
                    "id": rule_id,
                    "regex": pattern.pattern,
                    "flags": int(pattern.flags) & ~32,  # re.UNICODE is implied for str
                    "keywords": list(PATTERN_KEYWORDS.get(rule_id, KEYWORDS[name])),
                    "window": list(WINDOWS.get(name, DEFAULT_WINDOW)),
                }
            )
    return {
        "source": f"detect-secrets {version('detect-secrets')} plugin denylists",
        "regenerate": ".venv/bin/python scripts/secret_rules.py",
        "excluded": EXCLUDED,
        "credential_names": list(DENYLIST),
        "rules": rules,
    }


def main() -> int:
    OUTPUT.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
