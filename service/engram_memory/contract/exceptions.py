"""Every exception the service defines, in one tree (DESIGN "Conventions").

Each class says what it becomes where it is handled: a contract `ErrorCode` (an envelope),
a `ProtocolCode` (a JSON-RPC error), a `RefusalReason` (a refusal before binding, at a
transport's door) or a CLI exit status. `exception_codes.MAPPED_TO` holds the same mapping as
data, and tests/contract/test_exception_tree.py proves that every class here is in it and
that no class is defined anywhere else (but the two `MCPError` subclasses of server/ and
gateway/: the SDK's type is not for `contract` to import). Damage is never retriable.
Classes outside `EngramError` keep the builtin base their handlers catch (`ValueError`,
`OSError`), or never leave the adapter that raises them.

    EngramError                     exit 1 (any other EngramError reaching cli/main.py)
        ToolError                   the ErrorCode it carries (envelope)
            PolicyUnavailable       POLICY_UNAVAILABLE
            PolicyStale             POLICY_STALE
                ContentMismatch     POLICY_STALE (OPA serves other content than its revision)
        ProtocolRefusal             the ProtocolCode it carries (JSON-RPC error)
        ConfigurationError          exit 2
            BundleError             exit 2
                BundleSignatureInvalid  exit 2
            SigningKeyError         exit 2
            OpaBinaryNotFound       exit 2
            OpaServerStartError     exit 2
            PolicyDataError         exit 2
            PolicyTestError         exit 2
            DevIdpRefused           exit 2 (`gateway dev-idp`: its `code`, DEV_IDP_*)
            GrantRefused            exit 2 (`policy grant`: the grant cannot be made as asked)
        StoreRefusal                exit 1 (its `exit_code`)
            StoreBehindAnchor       exit 3
            StoreDamaged            exit 4
            AuditTrailUntrusted     exit 5 (start-up: the trail does not verify against its
                                    signed checkpoint)
        ProofInvalid                exit 1 (`audit verify-proof`)
        StoreUnavailable            STORE_UNAVAILABLE
            CommitOutcomeUnknown    MUTATION_OUTCOME_UNKNOWN
            StoreCorrupt            JOURNAL_CORRUPT (never retriable)
            StoreOpenFailed         exit 2 (StoreDamaged, exit 4, for OpenFailure.DAMAGED)
        JournalCorrupt              JOURNAL_CORRUPT
        JournalIntentConflict       DIGEST_CONFLICT
        StoreVersionSkew            exit 2 (serve); RESTORE_REFUSED in a restore
        AnchorInvalid               exit 3 (the store is treated as behind its anchor)
        AuditChainBroken            exit 1 (`audit verify`); BACKUP_INVALID in a restore
        ExportChainBroken           exit 1 (`audit export`)
        ArchiveInvalid              BACKUP_INVALID
        ArchiveForeign              RESTORE_REFUSED
        KeyDirectoryInconsistent    exit 1 (`audit verify`)
        KeyFileBroken               BLOB_MISSING
        UnknownRootKey              BLOB_MISSING (as the KeyFileBroken it becomes)
        KeyStoreUnavailable         STORE_UNAVAILABLE
            KeyStoreBusy            STORE_UNAVAILABLE
        CheckpointInvalid           exit 5 (checkpoint not trusted)
        AuditAccessFailed           exit 1 (a chain or export defect)
        QueryUsageError             exit 2 (usage)
        QueryFileInvalid            exit 2 (usage)
        ExportUnusable              exit 2 (usage)
        ExportTampered              exit 1
    SealBroken                      BLOB_MISSING
    TokenInvalid                    TOKEN_INVALID refusal (gate_failed for a confirmation)
        TokenExpired                TOKEN_EXPIRED refusal
    IndexInconsistent               PROJECTION_STALE (absorbed: searches read the store)
    NonCanonicalValue (ValueError)  INVALID_SCHEMA
    BundleFetchFailed (OSError)     POLICY_STALE
    CallError (ValueError)          exit 2
    RequestTooLarge                 REQUEST_TOO_LARGE refusal (HTTP 413)
    ServerUnavailable               exit 5 (examples/host: cannot use the server)
        CannotConnect               exit 5
        ServerExited                exit 6
        ConnectionLost              exit 7
    GatewayAuditUnavailable         CONTEXT_UNAVAILABLE
    GatewayAuditInvalid             exit 1 (`gateway audit verify`)
    CallerUnavailable               CONTEXT_UNAVAILABLE
    GatewayConfigError              exit 2
    CommandLineRefused              exit 2 (usage; cli/usage.py names the unknown option)
    JwksUnavailable                 TOKEN_INVALID refusal (as an OAuthRefused)
    UnknownKey                      TOKEN_INVALID refusal (as an OAuthRefused)
    OAuthRefused                    TOKEN_INVALID refusal (HTTP 401 at the gateway's door)
    LineTooLong (ValueError)        REQUEST_TOO_LARGE refusal
    UpstreamUnavailable             STORE_UNAVAILABLE (MUTATION_OUTCOME_UNKNOWN if `sent`)

Messages: a `ToolError` or `ProtocolRefusal` reaches an agent only as its code's constant
message; the text of any other class here is for operators and carries no content.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from engram_memory.contract.errors import ErrorCode, ProtocolCode


class EngramError(Exception):
    """Root of every exception the service raises on purpose."""


class ToolError(EngramError):
    """A failure reported to the agent as an envelope with a constant `error` object.

    The optional `detail` is a sanitized, operator-facing note for the audit trail; it never
    reaches the agent.
    """

    def __init__(self, code: ErrorCode, detail: str = "") -> None:
        super().__init__(code.name)
        self.code = code
        self.detail = detail


class PolicyUnavailable(ToolError):
    """No usable decision: engine unreachable, timed out, trapped, undefined or malformed.

    Maps to `POLICY_UNAVAILABLE` (retriable). `detail` is for the audit trail only.
    """

    def __init__(self, detail: str = "") -> None:
        super().__init__(ErrorCode.POLICY_UNAVAILABLE, detail)


class PolicyStale(ToolError):
    """A decision that is not bound to the bundle (or admission policy, or clock) the
    service expects. Maps to `POLICY_STALE` (retriable)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(ErrorCode.POLICY_STALE, detail)


class ContentMismatch(PolicyStale):
    """The OPA server serves other modules or data than the bundle its revision names."""


class ProtocolRefusal(EngramError):
    """The call is refused at the protocol level; `detail` is for the audit trail only."""

    def __init__(self, code: ProtocolCode, detail: str = "") -> None:
        super().__init__(code.name)
        self.code = code
        self.detail = detail


class ConfigurationError(EngramError):
    """Operator configuration is unusable; the CLI prints one line and exits 2."""


class GrantRefused(ConfigurationError):
    """`policy grant` cannot make the grant as asked (unknown tenant, workspace or role, a group
    given as principal, data that would not validate); nothing was changed. The message says
    why and what to do."""


class DevIdpRefused(ConfigurationError):
    """The development identity provider (gateway/dev_idp.py) refuses: `code` is one of its
    DEV_IDP_* codes, `field` the request field at fault (for DEV_IDP_INVALID_REQUEST). The
    text leads with the code, so the CLI's one line names it."""

    def __init__(self, code: str, message: str, *, field: str = "") -> None:
        super().__init__(f"{code}: {message}" + (f" ({field})" if field else ""))
        self.code, self.field = code, field


class StoreRefusal(EngramError):
    """The store must not be served: the CLI prints its one line and exits `exit_code`.

    Not a configuration problem (exit 2): the data itself is behind what it acknowledged or
    damaged, and an operator has to restore it or accept the loss (docs/operators/backup.md).
    """

    exit_code = 1


class StoreBehindAnchor(StoreRefusal):
    """Acknowledged writes are missing (WAL lost, chain tail removed, anchor file gone)."""

    exit_code = 3


class StoreDamaged(StoreRefusal):
    """The store file failed a checksum or header check."""

    exit_code = 4


class AuditTrailUntrusted(StoreRefusal):
    """Start-up found an audit entry rewritten since the last signed checkpoint (or, with
    none, one that does not re-derive): the trail is not what was signed, so nothing is
    served on top of it (core/startup_audit.py)."""

    exit_code = 5


class ProofInvalid(EngramError):
    """A Merkle inclusion or consistency proof does not lead to the signed root(s)."""


class BundleError(ConfigurationError):
    """A bundle cannot be built, read, or does not match its lock."""


class BundleSignatureInvalid(BundleError):
    """Unsigned, signed by another key or key id, or a file added, removed or changed."""


class SigningKeyError(ConfigurationError):
    """A signing or verification key, or a key id, that cannot be used."""


class OpaBinaryNotFound(ConfigurationError):
    """No usable OPA binary at $ENGRAM_OPA_BIN, on PATH, or in the tool cache."""


class OpaServerStartError(ConfigurationError):
    """`opa run --server` exited or did not become healthy in time."""


class PolicyDataError(ConfigurationError):
    """Policy data is unusable. `problems` holds one `<file>:<line>: <path>: <message>` line
    per problem; `str()` joins them."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class PolicyTestError(ConfigurationError):
    """The tests cannot run: OPA missing or refusing the modules, unreadable output."""


class OpenFailure(Enum):
    """Why the store file did not open (store/driver_errors.py diagnoses it)."""

    HELD = "held by another process"
    NOT_A_STORE = "not a store"
    DAMAGED = "damaged"
    NOT_A_DIRECTORY = "not a directory"
    OTHER = "unreadable"


class StoreUnavailable(EngramError):
    """The store could not complete an operation; maps to STORE_UNAVAILABLE."""


class CommitOutcomeUnknown(StoreUnavailable):
    """COMMIT itself failed: the transaction may or may not be durable (MUTATION_OUTCOME_UNKNOWN).

    Any failure before COMMIT rolls back and is a definite STORE_UNAVAILABLE instead.
    """


class StoreCorrupt(StoreUnavailable):
    """The store file is damaged (checksum, header or fatal I/O error): JOURNAL_CORRUPT.

    Not retriable. It is a `StoreUnavailable` so that every handler of store failures sees
    it, but callers that pick a contract code must test for it first.
    """


class StoreOpenFailed(StoreUnavailable):
    """The store file could not be opened; `line` says why in one operator line."""

    def __init__(self, failure: OpenFailure, line: str) -> None:
        super().__init__(line)
        self.failure = failure
        self.line = line


class JournalCorrupt(EngramError):
    """A gap, a broken link or a malformed event; maps to JOURNAL_CORRUPT / CURSOR_GAP."""


class JournalIntentConflict(EngramError):
    """An event id already exists with a different intent; maps to DIGEST_CONFLICT."""


class StoreVersionSkew(EngramError):
    """The file was written by a newer (or foreign) schema; the service refuses to start."""


class AnchorInvalid(EngramError):
    """No anchor slot is intact and authentic (tampered, or made under another root)."""


class AuditChainBroken(EngramError):
    """A gap, broken link, wrong hash, or a receipt that does not re-derive."""


class ExportChainBroken(EngramError):
    """The store no longer extends the previous export (rewritten or truncated since), or an
    increment does not link to its predecessor."""


class ArchiveInvalid(EngramError):
    """The archive is damaged, truncated, extended or tampered with (BACKUP_INVALID)."""


class ArchiveForeign(EngramError):
    """The archive is intact but made under a root key this ring does not hold."""


class KeyDirectoryInconsistent(EngramError):
    """A live item has no usable key file, or an ended item's key file survives."""


class KeyFileBroken(EngramError):
    """A key file does not open: tampered, foreign, or wrapped under a root not held."""


class UnknownRootKey(EngramError):
    """A key file or archive names a root key this key ring does not hold."""


class KeyStoreUnavailable(EngramError):
    """A key file could not be written or read; maps to STORE_UNAVAILABLE."""


class KeyStoreBusy(KeyStoreUnavailable):
    """Another rotation or backup holds the key store."""


class CheckpointInvalid(EngramError):
    """Not a checkpoint (or manifest) of this format, or its signature does not verify
    under the given public key: nothing it says can be trusted."""


class AuditAccessFailed(EngramError):
    """The chains do not verify, or the store does not extend the previous export: the
    first defect, by sequence or cursor (never content)."""


class QueryUsageError(EngramError):
    """An unknown query or parameter, a missing required parameter, or an unusable value."""


class QueryFileInvalid(EngramError):
    """A shipped query file's header does not follow the format (a packaging defect)."""


class ExportUnusable(EngramError):
    """The directory is not an audit export (no manifest, a table's file missing)."""


class ExportTampered(EngramError):
    """An exported file's sha256 differs from the one its manifest pinned."""


class SealBroken(Exception):
    """A ciphertext does not open: wrong key, wrong binding, or tampered bytes."""


class TokenInvalid(Exception):
    """The token is missing, malformed, unsigned, untrusted, expired or mis-bound."""


class TokenExpired(TokenInvalid):
    """A well-formed, trusted token past its `exp` (the audit tells it from a forgery)."""


class IndexInconsistent(Exception):
    """The changes do not fit the index (a programming error or an unknown commit outcome):
    the owner stops using it until it is rebuilt from the store."""


class NonCanonicalValue(ValueError):
    """A value cannot be represented canonically; maps to INVALID_SCHEMA at the boundary."""


class BundleFetchFailed(OSError):
    """The bundle service did not serve the published bundle (unreachable, timed out, a
    status other than 200, or larger than `MAX_BUNDLE_BYTES`)."""


class CommandLineRefused(Exception):
    """argparse refused a command line; `parser` is the (sub)command that refused it (an
    `argparse.ArgumentParser`, typed loosely so the contract does not depend on the CLI)."""

    def __init__(self, parser: object, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class CallError(ValueError):
    """A binding or call document is malformed; `problems` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class RequestTooLarge(Exception):
    """The request body is larger than allowed."""


class ServerUnavailable(Exception):
    """The host cannot use the server; `str()` is one line naming the problem and what to do."""


class CannotConnect(ServerUnavailable):
    """No connection was made (nothing was sent): no server at the URL, TLS failed, not an
    MCP endpoint, a stdio command that cannot be started, or no answer in time."""


class ServerExited(ServerUnavailable):
    """The stdio server exited during start-up (e.g. its store is held by another server)."""


# The line `serve` writes on stderr when its opening failed (store, keys, policy engine)
# after it had answered a client's `initialize` (it answers while opening,
# server/service_opening.py):
# no call reached the service, so nothing can have committed. A host that reads it reports
# the exit as a start-up refusal (ServerExited), not as a lost connection whose call under
# way may have committed. The reason follows on its own `engram-memory: ` line.
SERVE_OPENING_FAILED = "engram-memory serve: the service did not open; no call was answered"


class ConnectionLost(ServerUnavailable):
    """The connection failed after it was made; a mutation under way may have committed."""


class GatewayAuditUnavailable(Exception):
    """The gateway audit log cannot be opened or written; the call (or the start) fails
    closed."""


class GatewayAuditInvalid(Exception):
    """The chain does not verify; `line` is the 1-based line that broke it."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


class CallerUnavailable(Exception):
    """No trustworthy caller for this request; answered JSON-RPC -32603 (constant message,
    no data)."""


class GatewayConfigError(Exception):
    """The configuration cannot be used; `problems` are `file:line: field: message` lines."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class JwksUnavailable(Exception):
    """The JWKS could not be fetched (or held no usable signing key) and none is cached."""


class UnknownKey(Exception):
    """The JWKS (fetched afresh, or within the cooldown) has no signing key with this kid."""


class OAuthRefused(Exception):
    """The gateway's HTTP door refuses a bearer token; `reason` is the audit's word for why
    and `detail` the (shortened, printable) values it may record."""

    def __init__(self, reason: str, **detail: str) -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class LineTooLong(ValueError):
    """A request line beyond MAX_LINE_BYTES, as the reader delivers it: its bytes are
    dropped (up to its newline) and it is answered -32600 with id null, as serve answers
    one (stdin_lines.py)."""


class UpstreamUnavailable(Exception):
    """The upstream did not answer. `sent` is True when the request may have reached it
    (a mutation's outcome is then unknown), False when it certainly did not."""

    def __init__(self, sent: bool, reason: str) -> None:
        super().__init__(reason)
        self.sent = sent
        self.reason = reason
