"""The redaction each record of a search page or a get receives (SPEC §4.1 "Redaction",
docs/compliance/classifiers.md).

The call's authorization decision is taken before any record is opened. In a scope without
content classifiers it decides the redaction of every record, as SPEC §4.1 has it. In a
scope with classifiers that first decision is asked with `classifiers: {}` (nothing
matched), and each record about to be returned is classified on the plaintext the read
already opened for its packet; a record some classifier matched gets the authorization
decision for its names, asked once per distinct set of names in the call. A page where
nothing matched therefore costs the single decision it always did.

Only the names reach the policy; every decision taken goes into the call's audit entry, and
its receipt's input digest binds the names it saw (the redaction receipt's SPEC shape holds
no decision digest). Nothing here logs: names are facts about memory content.
"""

from __future__ import annotations

from collections.abc import Mapping

from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.classifiers import ClassifierSet, texts_by_kind
from engram_memory.core.call_audit import CallAudit
from engram_memory.core.runtime import CallContext
from engram_memory.policy.decider import AuthzResult, ClassifierFacts, Redaction

# A decision that denies (the names changed nothing that grants the tool, so only a
# policy that reads them in its allow rules can get here) discloses only `record_id`.
_RECORD_ID_ONLY = Redaction(
    mode="field-allowlist",
    allowed_fields=(),
    allow_derivation_lineage=False,
    max_packet_bytes=65_536,
)

_FactsKey = tuple[tuple[str, tuple[str, ...]], ...]


def base_classifiers(classifiers: ClassifierSet) -> ClassifierFacts | None:
    """What the call's first authorization sees: `{}` where the scope classifies (it is
    the decision for every record nothing matched), else no `classifiers` at all (an
    input, and its receipt digest, stay as they were before classifiers)."""
    return {} if classifiers else None


class RecordRedactions:
    """Per-record redaction for one read call; memoizes decisions by the canonical set of
    names (kinds and names sorted)."""

    def __init__(
        self,
        ctx: CallContext,
        audit: CallAudit,
        base: AuthzResult,
        classifiers: ClassifierSet,
    ) -> None:
        self._ctx = ctx
        self._audit = audit
        self._classifiers = classifiers
        self._decided: dict[_FactsKey, AuthzResult] = {(): base}

    @property
    def decisions_asked(self) -> int:
        """How many authorization decisions the call has taken for redaction (the base
        one included)."""
        return len(self._decided)

    def applied(self, record: Mapping[str, JsonValue]) -> AuthzResult:
        """The authorization decision whose redaction applies to `record` (a full record,
        already opened for its packet).

        Raises:
            PolicyUnavailable / PolicyStale: the decider cannot answer (the call fails;
                a record is never returned under a redaction nobody decided).
        """
        if not self._classifiers:
            return self._decided[()]
        facts = self._classifiers.classify(texts_by_kind(record))
        key: _FactsKey = tuple(sorted((kind, tuple(sorted(n))) for kind, n in facts.items()))
        decided = self._decided.get(key)
        if decided is None:
            ctx = self._ctx
            named = {kind: list(names) for kind, names in key}
            decided = ctx.services.decider.authz(ctx.subject, ctx.tool, named)
            self._audit.decided(decided.decision)
            self._decided[key] = decided
        return decided


def redaction_of(decided: AuthzResult) -> Redaction:
    """The allowlist a decision grants; a denial grants `record_id` alone (fail closed)."""
    return decided.redaction if decided.allow else _RECORD_ID_ONLY
