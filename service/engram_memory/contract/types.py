"""Reusable field types of the tool contract (SPEC §3).

Every type here validates a value that `canonical.normalize` has already produced: strings are
NFC, integral floats are ints, `null` never reaches a model. So a byte bound only counts UTF-8
bytes. Strings are strict (`5` is not `"5"`), integers are strict (`True` is not `1`).

JSON Schema cannot express byte lengths; each string type publishes code-point bounds equal to
its byte bounds (`minLength` = min bytes, `maxLength` = max bytes) and states its byte bound in
`description`. For ASCII, which the contract tells clients to use for keys, the schema then
gives exactly the server's verdict (tests/contract/test_schema_boundaries.py); a short string of
multi-byte characters is refused by the schema although the server would accept it, which is
the safe side (a schema looser than validation made stock clients send 4-character keys). Only
a long multi-byte string passes `maxLength` and is refused by the server, as `description`
says. The validators here are authoritative.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from engram_memory.contract.canonical import SAFE_INTEGER_MAX, utf8_len

# Error types raised by the validators below; `parsing` maps them to codes.
DIGEST_FORMAT_ERROR = "digest_format"
BYTE_LENGTH_ERROR = "byte_length"
PATTERN_ERROR = "string_format"
INSTANT_ERROR = "instant_format"
NULL_ERROR = "null_value"


class ToolName(StrEnum):
    """The six agent tools (SPEC §4); nothing else is reachable by an agent."""

    SEARCH = "engram_memory_search"
    GET = "engram_memory_get"
    CAPTURE = "engram_memory_capture"
    REQUEST_ADMISSION = "engram_memory_request_admission"
    WITHDRAW = "engram_memory_withdraw"
    FORGET = "engram_memory_forget"


MUTATING_TOOLS: frozenset[ToolName] = frozenset(
    {ToolName.CAPTURE, ToolName.REQUEST_ADMISSION, ToolName.WITHDRAW, ToolName.FORGET}
)
READ_TOOLS: frozenset[ToolName] = frozenset(ToolName) - MUTATING_TOOLS
# SPEC §7: these need a human confirmation whatever policy says...
ALWAYS_CONFIRMED_TOOLS: tuple[ToolName, ...] = (ToolName.WITHDRAW, ToolName.FORGET)
# ...these when policy data (or a gateway's configuration) selects them; reads never do.
SELECTABLE_CONFIRMED_TOOLS: tuple[ToolName, ...] = (ToolName.CAPTURE, ToolName.REQUEST_ADMISSION)


def one_of(*allowed: str) -> AfterValidator:
    """A string field that accepts only `allowed`, failing as a `Literal` of them would.

    For names kept in a collection (`ToolName`, `MUTATING_TOOLS`) rather than spelled again
    in a `Literal`: `Annotated[str, one_of(*ToolName)]`.
    """
    quoted = [repr(str(value)) for value in allowed]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    accepted = frozenset(allowed)

    def check(value: str) -> str:
        if value not in accepted:
            raise PydanticCustomError(
                "literal_error", "Input should be {expected}", {"expected": expected}
            )
        return str(value)  # a plain string, also when given a `ToolName`

    return AfterValidator(check)


# A tool name in a configuration model (policy YAML, gateway config, policy test cases).
ToolNameText = Annotated[str, one_of(*ToolName)]


class ClosedModel(BaseModel):
    """Base of every contract object: closed (`extra="forbid"`), strict, immutable.

    Optional fields default to `None`, which only ever means "omitted": `null` is refused
    here as well as by `normalize`, and the published schemas never admit it.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_null(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(v is None for v in data.values()):
            raise PydanticCustomError(NULL_ERROR, "null is not a valid value")
        return data


class ContractJsonSchema(GenerateJsonSchema):
    """JSON Schema for contracts where optional means omitted: no `null`, no `None` default."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if schema.get("default", object()) is None:
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _byte_bounds(low: int, high: int) -> AfterValidator:
    def check(value: str) -> str:
        size = utf8_len(value)
        if size < low or size > high:
            raise PydanticCustomError(
                BYTE_LENGTH_ERROR,
                "String must be {low}..{high} UTF-8 bytes",
                {"low": low, "high": high},
            )
        return str(value)  # a plain string, also when given a `ToolName`

    return AfterValidator(check)


def _string_schema(
    description: str, min_length: int, max_length: int, pattern: str | None = None
) -> WithJsonSchema:
    schema: dict[str, Any] = {
        "type": "string",
        "minLength": min_length,
        "maxLength": max_length,
        "description": description,
    }
    if pattern is not None:
        schema["pattern"] = pattern
    return WithJsonSchema(schema)


def _byte_schema(what: str, low: int, high: int) -> WithJsonSchema:
    # `low` code points are at least `low` bytes: the schema never admits a string too short.
    return _string_schema(f"{what}; {low}..{high} UTF-8 bytes after NFC.", low, high)


Ref = Annotated[str, Strict(), _byte_bounds(1, 512), _byte_schema("Opaque reference", 1, 512)]
IdempotencyKey = Annotated[
    str,
    Strict(),
    _byte_bounds(16, 256),
    _byte_schema("Idempotency key, one per operation; use at least 16 ASCII characters", 16, 256),
]
Query = Annotated[str, Strict(), _byte_bounds(1, 8192), _byte_schema("Search query", 1, 8192)]
Text = Annotated[str, Strict(), _byte_bounds(1, 65536), _byte_schema("Component text", 1, 65536)]
Attestation = Annotated[
    str,
    Strict(),
    _byte_bounds(1, 4096),
    _byte_schema("Evidence attestation, never trusted alone", 1, 4096),
]
CandidateId = Annotated[
    str,
    Strict(),
    _byte_bounds(1, 512),
    _byte_schema("Candidate id exactly as returned by capture", 1, 512),
]
PageCursor = Annotated[
    str,
    Strict(),
    _byte_bounds(1, 512),
    _byte_schema("Page cursor exactly as returned in next_page_cursor", 1, 512),
]
LocatorPart = Annotated[str, Strict(), _byte_bounds(1, 512), _byte_schema("Locator part", 1, 512)]


def _pattern(regex: re.Pattern[str], error: str, what: str) -> AfterValidator:
    def check(value: str) -> str:
        # fullmatch: `$` would also accept a trailing newline.
        if regex.fullmatch(value) is None:
            raise PydanticCustomError(error, "{what} has an invalid format", {"what": what})
        return value

    return AfterValidator(check)


RECORD_ID_RE = re.compile(r"mem_[a-z2-7]+")
RECORD_ID_PATTERN = "^mem_[a-z2-7]+$"
RecordId = Annotated[
    str,
    Strict(),
    _byte_bounds(1, 512),
    _pattern(RECORD_ID_RE, PATTERN_ERROR, "record_id"),
    _string_schema(
        "Record id: mem_ + lowercase base32; at most 512 bytes.", 5, 512, RECORD_ID_PATTERN
    ),
]

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
DIGEST_JSON_PATTERN = "^sha256:[0-9a-f]{64}$"
Digest = Annotated[
    str,
    Strict(),
    _pattern(DIGEST_RE, DIGEST_FORMAT_ERROR, "digest"),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DIGEST_JSON_PATTERN,
            "minLength": 71,
            "maxLength": 71,
            "description": "sha256: followed by 64 lowercase hex digits.",
        }
    ),
]

JOURNAL_CURSOR_RE = re.compile(r"0|[1-9][0-9]*")
JOURNAL_CURSOR_PATTERN = "^(0|[1-9][0-9]*)$"
JournalCursor = Annotated[
    str,
    Strict(),
    _byte_bounds(1, 20),
    _pattern(JOURNAL_CURSOR_RE, PATTERN_ERROR, "cursor"),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": JOURNAL_CURSOR_PATTERN,
            "minLength": 1,
            "maxLength": 20,
            "description": "Journal cursor: unsigned 64-bit decimal string.",
        }
    ),
]

# ---------------------------------------------------------------------------------------------
# Instants

INSTANT_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{3})Z"
)
INSTANT_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def parse_instant(text: str) -> int:
    """Epoch milliseconds of a contract Instant (`YYYY-MM-DDTHH:MM:SS.mmmZ`, UTC).

    The string must round-trip: `format_instant(parse_instant(s)) == s`.

    Raises:
        ValueError: wrong shape, impossible date or time (`2026-02-30`, `24:00`), year 0000.
    """
    match = INSTANT_RE.fullmatch(text)
    if match is None:
        raise ValueError("not an instant")
    year, month, day, hour, minute, second, milli = (int(g) for g in match.groups())
    if year == 0:
        raise ValueError("year 0000")
    moment = datetime(year, month, day, hour, minute, second, milli * 1000, tzinfo=UTC)
    millis = (moment - _EPOCH) // _ONE_MS
    if format_instant(millis) != text:  # pragma: no cover - datetime already refused it
        raise ValueError("instant does not round-trip")
    return millis


def format_instant(millis: int) -> str:
    """The contract Instant of `millis` epoch milliseconds (UTC, millisecond precision).

    Raises:
        ValueError: `millis` is outside years 0001..9999.
    """
    try:
        moment = _EPOCH + millis * _ONE_MS
    except OverflowError as exc:
        raise ValueError("instant out of range") from exc
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}."
        f"{moment.microsecond // 1000:03d}Z"
    )


def _check_instant(value: str) -> str:
    try:
        parse_instant(value)
    except ValueError:
        raise PydanticCustomError(INSTANT_ERROR, "Not a valid contract instant") from None
    return value


Instant = Annotated[
    str,
    Strict(),
    AfterValidator(_check_instant),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": INSTANT_PATTERN,
            "minLength": 24,
            "maxLength": 24,
            "description": "UTC instant with milliseconds, e.g. 2026-01-31T12:00:00.000Z; "
            "must be a real date and time, year 0001..9999.",
        }
    ),
]

# ---------------------------------------------------------------------------------------------
# Integers

SafeInt = Annotated[
    int,
    Strict(),
    Field(ge=-SAFE_INTEGER_MAX, le=SAFE_INTEGER_MAX),
]
EpochMillis = Annotated[
    int,
    Strict(),
    Field(
        ge=-SAFE_INTEGER_MAX,
        le=SAFE_INTEGER_MAX,
        description="Epoch milliseconds (safe integer).",
    ),
]

# ---------------------------------------------------------------------------------------------
# Enumerations (exact, case-sensitive)

ComponentKind = Literal["context", "decision", "evidence"]
DerivativeRule = Literal["retain", "make-ineligible"]
MinimumChannels = Literal["lexical", "lexical_and_semantic"]
NetworkPolicy = Literal["forbid", "allow"]
RankingProfile = Literal["offline_lexical_v1", "semantic_v1"]
CaptureStatus = Literal["committed_pending", "duplicate_exact"]
AdmissionStatus = Literal["accepted", "rejected", "pending_adjudication", "duplicate_exact"]
ForgettableState = Literal[
    "accepted_current", "accepted_disputed", "historical", "expired", "trust_invalid"
]
ProgressStatus = Literal["pending", "complete"]

__all__ = [
    "MUTATING_TOOLS",
    "AdmissionStatus",
    "Attestation",
    "CandidateId",
    "CaptureStatus",
    "ClosedModel",
    "ComponentKind",
    "ContractJsonSchema",
    "DerivativeRule",
    "Digest",
    "EpochMillis",
    "ForgettableState",
    "IdempotencyKey",
    "Instant",
    "JournalCursor",
    "LocatorPart",
    "MinimumChannels",
    "NetworkPolicy",
    "PageCursor",
    "ProgressStatus",
    "Query",
    "RankingProfile",
    "RecordId",
    "Ref",
    "SafeInt",
    "Text",
    "ToolName",
    "format_instant",
    "parse_instant",
]
