"""The two policy-fixed scopes the model-based test runs in, and the payloads it captures.

Everything here restates the shipped policy data (policies/acme.yaml, policies/globex.yaml);
tests/model/test_lifecycle_model.py checks that it still does.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from engram_memory.client.demo import demo_capture_arguments

SEARCH = "engram_memory_search"
GET = "engram_memory_get"
CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"

PURPOSE = "purpose:support-case"
EVIDENCE_REFS = {
    "ticket": "evidence:ticket/T-4711",
    "untrusted": "evidence:untrusted/U-1",
    "review": "evidence:review/R-1",
}
# Content i has component kind CONTENT_KINDS[i]; acme holds `context` for adjudication.
CONTENT_KINDS = ("decision", "decision", "context")
DAY_MS = 86_400_000


@dataclass(frozen=True)
class ScopeSpec:
    """One policy-fixed scope, its caller, its admission policy, retention and maintenance
    operators as the YAML states them."""

    name: str
    tenant: str
    workspace: str
    principal: str
    reject_prefixes: tuple[str, ...]
    adjudicate_kinds: tuple[str, ...]
    accept_prefixes: tuple[str, ...]
    default_ttl_days: int | None  # every capture expires this long after it (SPEC §11)
    operators: tuple[tuple[str, tuple[str, ...]], ...]  # (human, authorities)

    @property
    def scope_ref(self) -> str:
        return f"tenant:{self.tenant}/workspace:{self.workspace}"

    def admission_class(self, evidence_ref: str, kind: str) -> str:
        """Precedence reject > adjudicate > accept > otherwise (adjudication_required)."""
        if any(evidence_ref.startswith(p) for p in self.reject_prefixes):
            return "reject"
        if kind in self.adjudicate_kinds:
            return "adjudicate"
        if any(evidence_ref.startswith(p) for p in self.accept_prefixes):
            return "accept"
        return "adjudicate"

    def authorities(self, operator: str) -> tuple[str, ...]:
        return dict(self.operators).get(operator, ())


ACME = ScopeSpec(
    name="acme",
    tenant="acme",
    workspace="support",
    principal="user:alice",
    reject_prefixes=("evidence:untrusted/",),
    adjudicate_kinds=("context",),
    accept_prefixes=("evidence:ticket/",),
    default_ttl_days=90,
    operators=(("human:dana", ("read", "maintain")), ("human:erin", ("read",))),
)
# Globex has no reject rule and no adjudicate conditions: only tickets are accepted. It has
# no retention default either, so its records never expire by themselves.
GLOBEX = ScopeSpec(
    name="globex",
    tenant="globex",
    workspace="main",
    principal="user:carol",
    reject_prefixes=(),
    adjudicate_kinds=(),
    accept_prefixes=("evidence:ticket/",),
    default_ttl_days=None,
    operators=(("human:gina", ("read", "maintain")),),
)
SPECS = {spec.name: spec for spec in (ACME, GLOBEX)}
# A jump of the clock this long makes every record captured before it due, in every scope.
TIME_JUMP_MS = (max(s.default_ttl_days or 0 for s in SPECS.values()) + 1) * DAY_MS


def content_token(word: str, content: int) -> str:
    return f"{word}k{content}"


def capture_arguments(
    word: str, content: int, evidence: str, key: str, at_ms: int
) -> dict[str, Any]:
    """A capture whose payload depends only on (word, content, at_ms): same content, same
    payload (so same guard digest), whatever the evidence and key."""
    text = f"Case {word} note {content_token(word, content)} was handled."
    args = demo_capture_arguments(text, key, evidence_ref=EVIDENCE_REFS[evidence])
    payload = args["payload"]
    payload["valid_time"] = {"t": at_ms}
    payload["primary_event"]["at"] = at_ms
    payload["components"][0]["kind"] = CONTENT_KINDS[content]
    return args


def canonical(value: Any) -> str:
    # Arguments are ASCII strings and small integers: sorted-key JSON is canonical enough.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def record_id_for(record_digest: str) -> str:
    """SPEC §9.3: "mem_" + lowercase unpadded base32 of the digest bytes."""
    raw = bytes.fromhex(record_digest.removeprefix("sha256:"))
    return "mem_" + base64.b32encode(raw).decode("ascii").lower().rstrip("=")
