"""Strict JSON at the door: every request is judged on its raw bytes before the SDK parses it.

The MCP SDK decodes with `errors="replace"`, keeps the last of duplicate keys and, on input
it cannot parse, either drops the line without an answer (stdio) or echoes its parser's text
(HTTP). This gate sees the bytes first and decides one of three things per message:

- **Refused** (`GateRefusal`): not UTF-8, a lone surrogate (raw or `\\ud800` escaped)
  anywhere outside a `tools/call`'s `params.arguments`, not JSON (or `NaN`/`Infinity`),
  nested deeper than `MAX_NESTING_DEPTH` → Parse error -32700;
  a batch array, a non-object, an `id` that is not a string or integer, a wrong `jsonrpc`,
  a non-string `method`, non-object `params`, or duplicate keys anywhere outside a
  `tools/call`'s `params.arguments` → Invalid Request -32600. The answer is owed even when
  the message looked like a notification (JSON-RPC answers an invalid request with id
  null); its message is constant and it carries no data. The id is echoed only when the
  envelope itself was read without doubt (no duplicate top-level key, a valid id).
- **Admitted with an argument defect** (`ArgumentDefect`): a `tools/call` whose
  `params.arguments` hold a duplicate key (raw, or equal after NFC) or a lone surrogate
  (escaped `\\ud800`; SPEC §3, case 30). It is not refused here: it must go through the
  normal call path, so the binding is verified first (an invalid token still gets -32603,
  SPEC §1.8) and the refusal is audited like every call; the call path answers it with the
  `INVALID_SCHEMA` envelope. A message with lone surrogates in its arguments cannot be
  handed on byte for byte (the SDK's parser refuses them): the gate hands on its own parse
  re-encoded, each lone surrogate of the arguments replaced by U+FFFD (`Admitted.forward`);
  nothing reads those arguments but the purpose rule, before the refusal.
- **Admitted as an error answer**: a client's response (to a server request such as an
  elicitation) holding a duplicate key anywhere, raw or after NFC. The SDK would keep the
  last value, so `{"action":"decline",…,"action":"accept"}` read as a yes (issue 23): the
  gate judges answers as strictly as requests. It hands on, for the same id, the error
  response `-32600` Invalid Request instead (`Admitted.forward`), so the request that waits
  for it fails: a confirmation asked this way is refused and audited as such.
- **Admitted**: everything else, handed on byte for byte.

How the call path learns of an argument defect: the gate sets the context variable
`ARGUMENT_DEFECT` in the task that hands the message to the SDK, just before the
hand-over. The SDK's message streams snapshot the sender's context with every message
(`mcp.shared._context_streams`) and run the handler in that snapshot, so the tool handler
reads the flag of exactly its own message. Nothing the client sends can set or clear it:
it is not in the JSON (which the SDK would parse and could let a client forge, e.g. a
`_meta` key) and not keyed by a client-chosen request id (which a client could reuse).

Depth: the standard library's C parser refuses a text nested deeper than the interpreter's
recursion limit with RecursionError (refused here as a parse error); what it parsed is then
measured without recursion against `MAX_NESTING_DEPTH`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engram_memory.contract.refusals import RefusalReason
from engram_memory.host.context import INVOCATION_META_KEY

MAX_NESTING_DEPTH = 64
"""Deepest nesting of arrays/objects accepted in one message (SPEC's argument schemas are a
few levels deep; the JSON-RPC envelope adds three)."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


class ArgumentDefect(StrEnum):
    """Why a tool call's arguments are refused as `INVALID_SCHEMA` before they are read
    (the value is the gateway audit's `reason`)."""

    DUPLICATE_KEYS = "duplicate_argument_keys"
    UNPAIRED_SURROGATE = "unpaired_surrogate_in_arguments"


ARGUMENT_DEFECT: ContextVar[ArgumentDefect | None] = ContextVar(
    "engram_argument_defect", default=None
)
"""Set while the SDK handles a tools/call whose `params.arguments` hold a duplicate key or a
lone surrogate; None otherwise."""

_PROTOCOL_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "notifications/initialized",
        "notifications/cancelled",
    }
)
_SURROGATE = re.compile("[\ud800-\udfff]")
# The only way a lone surrogate gets into strictly decoded UTF-8 JSON: a `\\uD8xx`-`\\uDFxx`
# escape (a false match, e.g. an escaped backslash before `uD800`, only costs a full walk).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


@dataclass(frozen=True)
class GateRefusal:
    """A message the gate answers itself; `answer()` is the JSON-RPC error to send back."""

    code: int
    request_id: str | int | None
    reason: RefusalReason
    method: str  # a protocol method name, else "other" (contract/refusals.py)
    token: object = None

    def answer(self) -> dict[str, Any]:
        """The JSON-RPC error object: constant message, no data."""
        message = "Parse error" if self.code == PARSE_ERROR else "Invalid Request"
        return {
            "jsonrpc": "2.0",
            "id": self.request_id,
            "error": {"code": self.code, "message": message},
        }

    def answer_bytes(self) -> bytes:
        return json.dumps(self.answer(), separators=(",", ":")).encode()


@dataclass(frozen=True)
class Admitted:
    """A message handed on unchanged; `message` is the gate's own parse of it."""

    message: object
    argument_defect: ArgumentDefect | None = None
    forward: bytes | None = None
    """What to hand on instead of the raw bytes (None: the raw bytes, unchanged)."""


class _Object(dict[str, Any]):
    """A parsed JSON object that remembers whether its own keys repeated (raw or NFC)."""

    duplicate = False


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs) or (
        # NFC leaves ASCII unchanged: only an object with a non-ASCII key needs it.
        not all(map(str.isascii, obj))
        and len({unicodedata.normalize("NFC", k) for k in obj}) != len(obj)
    ):
        obj.duplicate = True
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity and -Infinity are not JSON


def _walk(value: object) -> tuple[bool, bool, int]:
    """(any string or key holds a lone surrogate, any object holds a duplicate key, the
    deepest nesting of arrays and objects)."""
    surrogate = duplicate = False
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            surrogate = surrogate or bool(_SURROGATE.search(item))
        elif isinstance(item, dict):
            deepest = max(deepest, depth + 1)
            duplicate = duplicate or getattr(item, "duplicate", False)
            for key, child in item.items():
                surrogate = surrogate or bool(_SURROGATE.search(key))
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in item)
    return surrogate, duplicate, deepest


def _parse(raw: bytes) -> tuple[object, bool, bool]:
    """The message of `raw`, strictly, whether any object in it holds a duplicate key and
    whether any string or key in it holds a lone surrogate.

    The full walk of what was parsed (`_walk`) runs only when the bytes leave a doubt; a
    call costs its every microsecond in the signing gateway (issue 11: ≤ 1 ms per call), and
    the common message leaves none: a lone surrogate can only come from a `\\uD800`-style
    escape (strict UTF-8 refuses an encoded one), nesting cannot exceed the number of `[`
    and `{` bytes, and the object hook notes a duplicate key as it builds the object.

    Raises:
        ValueError: not UTF-8, not JSON, or too deep.
    """
    text = raw.decode("utf-8")  # strict: also refuses UTF-8-encoded surrogates
    duplicates: list[_Object] = []

    def object_from_pairs(pairs: list[tuple[str, Any]]) -> _Object:
        obj = _object_from_pairs(pairs)
        if obj.duplicate:
            duplicates.append(obj)
        return obj

    # The C scanner stops a very deep text with RecursionError near the interpreter's
    # recursion limit, long before the C stack is at risk; the documented bound is ours.
    value = json.loads(text, object_pairs_hook=object_from_pairs, parse_constant=_reject_constant)
    maybe_surrogate = _SURROGATE_ESCAPE.search(raw) is not None
    maybe_deep = raw.count(b"[") + raw.count(b"{") > MAX_NESTING_DEPTH
    surrogate = False
    if maybe_surrogate or maybe_deep:
        surrogate, _duplicate, depth = _walk(value)
        if depth > MAX_NESTING_DEPTH:
            raise ValueError("too deep")
    return value, bool(duplicates), surrogate


def _without_surrogates(value: object) -> object:
    """`value` with every lone surrogate of its strings and keys replaced by U+FFFD (objects
    keep their duplicate mark; NFC-equal keys stay distinct, as the raw keys were)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        pairs = [(_SURROGATE.sub("\ufffd", k), _without_surrogates(v)) for k, v in value.items()]
        copy = _Object(pairs)
        copy.duplicate = getattr(value, "duplicate", False) or len(copy) != len(pairs)
        return copy
    return value


def protocol_method(method: object) -> str:
    """`method` if it is one of the protocol's, else "other" (what the host-level audit and
    the logs may name: nothing the client wrote verbatim)."""
    return method if isinstance(method, str) and method in _PROTOCOL_METHODS else "other"


def _token(params: object) -> object:
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(INVOCATION_META_KEY) if isinstance(meta, dict) else None


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _duplicates_outside_arguments(params: object, method: object) -> tuple[bool, bool]:
    """(a duplicate key in params outside `arguments`, one inside a tools/call's arguments)."""
    if not isinstance(params, dict):
        return False, False
    outside = bool(getattr(params, "duplicate", False))
    in_arguments = False
    for key, child in params.items():
        child_duplicate = _walk(child)[1]
        if key == "arguments" and method == "tools/call":
            in_arguments = child_duplicate
        else:
            outside = outside or child_duplicate
    return outside, in_arguments


def _surrogates_only_in_arguments(message: object) -> bool:
    """Whether `message` is a tools/call whose lone surrogates all lie in `params.arguments`
    (the caller knows it holds at least one)."""
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return False
    params = message.get("params")
    if not isinstance(params, dict) or "arguments" not in params:
        return False
    outside = [v for k, v in message.items() if k != "params"]
    outside += [v for k, v in params.items() if k != "arguments"]
    keys = list(message) + list(params)
    return not any(_SURROGATE.search(k) for k in keys) and not _walk(outside)[0]


def inspect_message(
    raw: bytes, accepts: Callable[[object], bool] = lambda _message: True
) -> GateRefusal | Admitted:
    """Judge one raw message (a stdio line without its newline, or an HTTP body).

    `accepts` is the SDK's own check of a message's shape (mcp_server.py): a message the gate
    would admit but the SDK would reject is refused here as -32600, so the SDK never answers
    with its parser's text or, on stdio, not at all.
    """
    try:
        message, any_duplicate, any_surrogate = _parse(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return GateRefusal(PARSE_ERROR, None, RefusalReason.PARSE_ERROR, "other")
    surrogate_in_arguments = False
    if any_surrogate:
        # Only inside a tools/call's arguments is a lone surrogate a schema error (SPEC §3,
        # case 30); anywhere else the message is not readable JSON text.
        if not _surrogates_only_in_arguments(message):
            return GateRefusal(PARSE_ERROR, None, RefusalReason.PARSE_ERROR, "other")
        assert isinstance(message, dict)
        params = message["params"]
        params["arguments"] = _without_surrogates(params["arguments"])
        surrogate_in_arguments = True
    if not isinstance(message, dict):  # a batch or a bare value: MCP has no batches
        return GateRefusal(INVALID_REQUEST, None, RefusalReason.INVALID_REQUEST, "other")
    method, params = message.get("method"), message.get("params")
    name, token = protocol_method(method), _token(params)
    has_id = "id" in message
    trusted = not getattr(message, "duplicate", False) and (not has_id or _valid_id(message["id"]))
    request_id = message["id"] if trusted and has_id else None

    def refuse(reason: RefusalReason = RefusalReason.INVALID_REQUEST) -> GateRefusal:
        return GateRefusal(INVALID_REQUEST, request_id, reason, name, token)

    if getattr(message, "duplicate", False):
        return refuse(RefusalReason.DUPLICATE_KEYS)
    if not trusted or message.get("jsonrpc") != "2.0":
        return refuse()
    if "method" not in message:
        # A response to a server request: an id and exactly one of result/error.
        if not has_id or ("result" in message) == ("error" in message):
            return refuse()
        if any_duplicate:
            error = {"code": INVALID_REQUEST, "message": "Invalid Request"}
            answer = {"jsonrpc": "2.0", "id": request_id, "error": error}
            if not accepts(answer):
                return refuse()
            return Admitted(answer, forward=json.dumps(answer, separators=(",", ":")).encode())
        if not accepts(message):
            return refuse()
        return Admitted(message)
    if not isinstance(method, str) or ("params" in message and not isinstance(params, dict)):
        return refuse()
    outside, in_arguments = (
        _duplicates_outside_arguments(params, method) if any_duplicate else (False, False)
    )
    if outside:
        return refuse(RefusalReason.DUPLICATE_KEYS)
    if not accepts(message):
        return refuse()
    if surrogate_in_arguments:
        try:
            text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError:  # a number beyond float range read as infinity: not re-encodable
            return GateRefusal(PARSE_ERROR, None, RefusalReason.PARSE_ERROR, "other")
        return Admitted(message, ArgumentDefect.UNPAIRED_SURROGATE, text.encode())
    return Admitted(message, ArgumentDefect.DUPLICATE_KEYS if in_arguments else None)
