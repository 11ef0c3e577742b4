"""The five weighted lexical fields of a record and their term statistics (SPEC §10.1).

Term representation is pluggable so the store can run a blind index: with
`keyed_term_hasher(scope_key)` every token becomes an HMAC under a per-scope key, and the
index never holds plaintext terms (DESIGN "Store and crypto"). Ranking only compares terms
for equality, so keyed terms rank exactly like plaintext ones.
"""

from __future__ import annotations

import hmac
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from engram_memory.search.tokenizer import tokenize

# Listed order matters: BM25 sums fields in this order, and float addition is not
# associative, so a different order could change the last bit of a score.
FIELD_NAMES: tuple[str, ...] = ("primary", "decision", "evidence", "context", "citations")
FIELD_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"primary": 3.0, "decision": 2.0, "evidence": 1.5, "context": 1.0, "citations": 0.5}
)

TermKey = Callable[[str], str]

# A blind-index key shorter than the HMAC-SHA-256 output would be the weakest link.
MIN_TERM_KEY_BYTES = 32


def identity_term(token: str) -> str:
    """Plaintext term representation: the token itself."""
    return token


def keyed_term_hasher(key: bytes) -> TermKey:
    """Return a term mapper giving lowercase hex HMAC-SHA-256(key, UTF-8 token).

    Raises:
        ValueError: `key` is shorter than 32 bytes.
    """
    if len(key) < MIN_TERM_KEY_BYTES:
        raise ValueError("blind-index key must be at least 32 bytes")
    frozen_key = bytes(key)

    def keyed(token: str) -> str:
        return hmac.digest(frozen_key, token.encode("utf-8"), "sha256").hex()

    return keyed


@dataclass(frozen=True, slots=True)
class FieldTerms:
    """One field of one document: term -> frequency, and the field's token count.

    `counts` may hold only a subset of the field's terms (an index answering a query loads
    only the query terms), but `length` is always the full token count of the field.
    """

    counts: Mapping[str, int]
    length: int

    def __post_init__(self) -> None:
        if self.length < 0 or any(count < 1 for count in self.counts.values()):
            raise ValueError("field term statistics must be positive")
        if sum(self.counts.values()) > self.length:
            raise ValueError("field term counts exceed the field length")


@dataclass(frozen=True, slots=True)
class DocumentTerms:
    """Per-field term statistics of one document; all five fields are always present."""

    fields: Mapping[str, FieldTerms]

    def __post_init__(self) -> None:
        if set(self.fields) != set(FIELD_NAMES):
            raise ValueError("document terms must cover exactly the five lexical fields")

    def contains(self, term: str) -> bool:
        """True iff `term` occurs in at least one field (the `df` criterion)."""
        return any(term in self.fields[name].counts for name in FIELD_NAMES)


def _texts(items: object, what: str) -> Sequence[Mapping[str, Any]]:
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise ValueError(f"payload {what} must be an array")
    for item in items:
        if not isinstance(item, Mapping):
            raise ValueError(f"payload {what} entries must be objects")
    return items


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"payload {what} must be a string")
    return value


def document_fields(payload: Mapping[str, Any]) -> dict[str, str]:
    """Build the five lexical field texts of an effective payload (or a full record).

    `primary` is the primary component's text; `decision`, `evidence`, `context` join the
    texts of every component of that kind in array order (the primary included) with
    `"\\n"`; `citations` joins every citation's `source_ref` with `"\\n"`. The separator
    is not a token character, so joining never glues two words into one token.

    Raises:
        ValueError: components or citations are malformed, or `primary_component_id` does
            not resolve to a component (a validated payload never does this).
    """
    components = _texts(payload.get("components"), "components")
    citations = _texts(payload.get("citations"), "citations")
    primary_id = _string(payload.get("primary_component_id"), "primary_component_id")
    by_kind: dict[str, list[str]] = {"decision": [], "evidence": [], "context": []}
    primary: str | None = None
    for component in components:
        text = _string(component.get("text"), "component text")
        kind = _string(component.get("kind"), "component kind")
        if kind not in by_kind:
            raise ValueError("payload component kind is unknown")
        by_kind[kind].append(text)
        if primary is None and component.get("component_id") == primary_id:
            primary = text
    if primary is None:
        raise ValueError("primary_component_id does not resolve to a component")
    sources = [_string(citation.get("source_ref"), "citation source_ref") for citation in citations]
    return {
        "primary": primary,
        "decision": "\n".join(by_kind["decision"]),
        "evidence": "\n".join(by_kind["evidence"]),
        "context": "\n".join(by_kind["context"]),
        "citations": "\n".join(sources),
    }


def field_terms(text: str, term_key: TermKey = identity_term) -> FieldTerms:
    """Tokenize one field text into term frequencies under `term_key` and its length.

    Raises:
        Nothing beyond what `term_key` raises.
    """
    tokens = tokenize(text)
    counts: dict[str, int] = {}
    # Key each distinct token once: a keyed mapper is an HMAC per call.
    for token, count in Counter(tokens).items():
        term = term_key(token)
        counts[term] = counts.get(term, 0) + count
    return FieldTerms(counts=counts, length=len(tokens))


def document_terms(payload: Mapping[str, Any], term_key: TermKey = identity_term) -> DocumentTerms:
    """Per-field term frequencies and lengths of a payload, terms mapped by `term_key`.

    Raises:
        ValueError: the payload is malformed (see `document_fields`).
    """
    texts = document_fields(payload)
    # The primary text is also one of its kind's texts, and fields share words: each distinct
    # text is tokenized, and each distinct token keyed (an HMAC), once per document.
    keyed: dict[str, str] = {}

    def key_once(token: str) -> str:
        term = keyed.get(token)
        if term is None:
            term = keyed[token] = term_key(token)
        return term

    by_text: dict[str, FieldTerms] = {}
    for text in texts.values():
        if text not in by_text:
            by_text[text] = field_terms(text, key_once)
    return DocumentTerms({name: by_text[texts[name]] for name in FIELD_NAMES})


def query_terms(query: str, term_key: TermKey = identity_term) -> list[str]:
    """Q of SPEC §10.1: distinct query tokens in order of first occurrence, mapped by `term_key`.

    Raises:
        Nothing beyond what `term_key` raises.
    """
    return list(dict.fromkeys(term_key(token) for token in tokenize(query)))
