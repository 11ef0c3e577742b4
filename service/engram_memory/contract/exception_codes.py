"""What each exception in contract/exceptions.py becomes where it is handled, as data.

The tree in that module's docstring says the same in prose; tests/contract/
test_exception_tree.py proves every class has an entry here, that the CLI's and the call
path's handlers agree with it, and that nothing mapped to a damaged store is retriable.
An entry is a contract `ErrorCode` (an envelope), a `ProtocolCode` (a JSON-RPC error), a
`RefusalReason` (a refusal before binding), a CLI exit status (an int), or, for `ToolError`
and `ProtocolRefusal`, the enum itself: the instance carries its own code.
"""

from __future__ import annotations

from typing import TypeAlias

from engram_memory.contract import exceptions as x
from engram_memory.contract.errors import ErrorCode, ProtocolCode
from engram_memory.contract.refusals import RefusalReason

Mapped: TypeAlias = (
    ErrorCode | ProtocolCode | RefusalReason | int | type[ErrorCode] | type[ProtocolCode]
)

EXIT_FAILED = 1  # cli/main.py: any other EngramError; audit and gateway checks: a defect
EXIT_CONFIG = 2  # cli/main.py: ConfigurationError (and the audit commands' usage errors)
EXIT_UNTRUSTED = 5  # checkpoint commands: the checkpoint or manifest does not verify

MAPPED_TO: dict[type[BaseException], Mapped] = {
    x.EngramError: EXIT_FAILED,
    x.ToolError: ErrorCode,
    x.PolicyUnavailable: ErrorCode.POLICY_UNAVAILABLE,
    x.PolicyStale: ErrorCode.POLICY_STALE,
    x.ContentMismatch: ErrorCode.POLICY_STALE,
    x.ProtocolRefusal: ProtocolCode,
    x.ConfigurationError: EXIT_CONFIG,
    x.BundleError: EXIT_CONFIG,
    x.BundleSignatureInvalid: EXIT_CONFIG,
    x.SigningKeyError: EXIT_CONFIG,
    x.OpaBinaryNotFound: EXIT_CONFIG,
    x.OpaServerStartError: EXIT_CONFIG,
    x.PolicyDataError: EXIT_CONFIG,
    x.DevIdpRefused: EXIT_CONFIG,
    x.GrantRefused: EXIT_CONFIG,
    x.PolicyTestError: EXIT_CONFIG,
    x.StoreRefusal: x.StoreRefusal.exit_code,
    x.StoreBehindAnchor: x.StoreBehindAnchor.exit_code,
    x.StoreDamaged: x.StoreDamaged.exit_code,
    # The same status as a checkpoint that does not verify: the trail is not what was signed.
    x.AuditTrailUntrusted: EXIT_UNTRUSTED,
    x.StoreUnavailable: ErrorCode.STORE_UNAVAILABLE,
    x.CommitOutcomeUnknown: ErrorCode.MUTATION_OUTCOME_UNKNOWN,
    x.StoreCorrupt: ErrorCode.JOURNAL_CORRUPT,
    # core/opening.py: StoreDamaged (exit 4) when the file is damaged, else configuration.
    x.StoreOpenFailed: EXIT_CONFIG,
    x.JournalCorrupt: ErrorCode.JOURNAL_CORRUPT,
    x.JournalIntentConflict: ErrorCode.DIGEST_CONFLICT,
    x.StoreVersionSkew: EXIT_CONFIG,
    x.AnchorInvalid: x.StoreBehindAnchor.exit_code,
    x.AuditChainBroken: EXIT_FAILED,
    x.ExportChainBroken: EXIT_FAILED,
    x.ProofInvalid: EXIT_FAILED,
    x.ArchiveInvalid: ErrorCode.BACKUP_INVALID,
    x.ArchiveForeign: ErrorCode.RESTORE_REFUSED,
    x.KeyDirectoryInconsistent: EXIT_FAILED,
    x.KeyFileBroken: ErrorCode.BLOB_MISSING,
    x.UnknownRootKey: ErrorCode.BLOB_MISSING,
    x.KeyStoreUnavailable: ErrorCode.STORE_UNAVAILABLE,
    x.KeyStoreBusy: ErrorCode.STORE_UNAVAILABLE,
    x.CheckpointInvalid: EXIT_UNTRUSTED,
    x.AuditAccessFailed: EXIT_FAILED,
    x.QueryUsageError: EXIT_CONFIG,
    x.QueryFileInvalid: EXIT_CONFIG,
    x.ExportUnusable: EXIT_CONFIG,
    x.ExportTampered: EXIT_FAILED,
    x.SealBroken: ErrorCode.BLOB_MISSING,
    x.TokenInvalid: RefusalReason.TOKEN_INVALID,
    x.TokenExpired: RefusalReason.TOKEN_EXPIRED,
    x.IndexInconsistent: ErrorCode.PROJECTION_STALE,
    x.NonCanonicalValue: ErrorCode.INVALID_SCHEMA,
    x.BundleFetchFailed: ErrorCode.POLICY_STALE,
    x.CallError: EXIT_CONFIG,
    x.RequestTooLarge: RefusalReason.REQUEST_TOO_LARGE,
    # examples/host/host.py: one line, then 5, 6 or 7 by kind.
    x.ServerUnavailable: 5,
    x.CannotConnect: 5,
    x.ServerExited: 6,
    x.ConnectionLost: 7,
    x.GatewayAuditUnavailable: ProtocolCode.CONTEXT_UNAVAILABLE,
    x.GatewayAuditInvalid: EXIT_FAILED,
    x.CallerUnavailable: ProtocolCode.CONTEXT_UNAVAILABLE,
    x.GatewayConfigError: EXIT_CONFIG,
    x.CommandLineRefused: EXIT_CONFIG,
    x.JwksUnavailable: RefusalReason.TOKEN_INVALID,
    x.UnknownKey: RefusalReason.TOKEN_INVALID,
    x.OAuthRefused: RefusalReason.TOKEN_INVALID,
    x.LineTooLong: RefusalReason.REQUEST_TOO_LARGE,
    x.UpstreamUnavailable: ErrorCode.STORE_UNAVAILABLE,
}
