"""Admin commands as data: what `engram-memory admin` asks, however it reaches the store.

The shell parses arguments into an `AdminCommand`; `execute` runs it against a service's
collaborators. The same command runs in the admin process (server stopped) or is carried as
JSON over the maintenance channel into the serving process (admin/channel.py), so both paths
authorize, journal and audit identically. `restore` is not a command here: it never touches
the configured store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engram_memory.admin.audit_service import AuditAccessService, span_from_operands
from engram_memory.admin.backup import BackupService
from engram_memory.admin.checkpointing import CheckpointService
from engram_memory.admin.compaction import CompactionService
from engram_memory.admin.loss import LossService
from engram_memory.admin.maintenance import (
    MaintenanceService,
    Operator,
    Progress,
)
from engram_memory.admin.names import RECORD_OPERATIONS
from engram_memory.admin.rotation import RotationService
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ToolError
from engram_memory.core.runtime import Services
from engram_memory.crypto.keys import RootKey

Operand = str | bool

# Every command and its operands (name -> type). A request naming anything else is refused.
OPERANDS: Mapping[str, Mapping[str, type]] = {
    "adjudicate": {"candidate_id": str, "decision": str, "reason": str},
    **{op.replace("_", "-"): {"record_id": str, "reason": str} for op in RECORD_OPERATIONS},
    "supersede": {"record_id": str, "reason": str, "successor": str},
    "expiry-sweep": {},
    "history": {"target_id": str},
    "inspect": {"candidate_id": str, "show_content": bool},
    "rotate-scope-key": {},
    "rotate-root-key": {"new_root_key": str},
    "backup": {"out": str},
    "compact": {},
    "accept-loss": {"reason": str},
    # admin/audit_service.py; "" = not given (a full export).
    "audit-export": {"out": str, "previous": str, "since_sequence": str},
    # "" = not given: no checkpoint comparison (admin/checkpoint_cli.py).
    "audit-verify": {"checkpoint": str, "checkpoint_public_key": str},
    "audit-checkpoint": {"out": str},
}
# Files named by these operands are opened by whichever process executes the command, so
# they travel as absolute paths.
PATH_OPERANDS = frozenset({"new_root_key", "out"})


@dataclass(frozen=True)
class AdminCommand:
    name: str
    who: Operator
    operands: Mapping[str, Operand]

    @classmethod
    def from_values(cls, name: str, who: Operator, values: Mapping[str, object]) -> AdminCommand:
        """The command `name` with exactly its operands, taken from `values` (extra keys
        are ignored, so an argparse namespace's `vars()` will do).

        Raises:
            ToolError: INVALID_SCHEMA for an unknown command or a missing or mistyped operand.
        """
        schema = OPERANDS.get(name)
        if schema is None:
            raise ToolError(ErrorCode.INVALID_SCHEMA, "unknown admin command")
        operands: dict[str, Operand] = {}
        for operand, kind in schema.items():
            value = values.get(operand)
            if not isinstance(value, kind):
                raise ToolError(ErrorCode.INVALID_SCHEMA, f"operand {operand} missing or mistyped")
            assert isinstance(value, str | bool)
            if operand in PATH_OPERANDS:
                value = str(Path(str(value)).absolute())
            operands[operand] = value
        return cls(name, who, operands)

    @classmethod
    def from_json(cls, request: object) -> AdminCommand:
        """Decode a channel request: `{"command", "tenant", "workspace", "operator",
        "operands"}`, nothing more.

        Raises:
            ToolError: INVALID_SCHEMA for any other shape.
        """
        fields = ("command", "tenant", "workspace", "operator", "operands")
        if not isinstance(request, dict) or set(request) != set(fields):
            raise ToolError(ErrorCode.INVALID_SCHEMA, "not an admin request")
        operands = request["operands"]
        names = [request[f] for f in fields[:4]]
        if not all(isinstance(n, str) for n in names) or not isinstance(operands, dict):
            raise ToolError(ErrorCode.INVALID_SCHEMA, "not an admin request")
        name, tenant, workspace, operator = (str(n) for n in names)
        if set(operands) != set(OPERANDS.get(name, {})):
            raise ToolError(ErrorCode.INVALID_SCHEMA, "operands do not match the command")
        return cls.from_values(name, Operator(tenant, workspace, operator), operands)

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "command": self.name,
            "tenant": self.who.tenant,
            "workspace": self.who.workspace,
            "operator": self.who.operator,
            "operands": dict(self.operands),
        }

    def text(self, operand: str) -> str:
        return str(self.operands[operand])


def execute(services: Services, command: AdminCommand, progress: Progress) -> dict[str, JsonValue]:
    """Run `command` with the service's store, keys and policy.

    Raises:
        ToolError: the operation's refusal (UNAUTHORIZED, NOT_FOUND, ILLEGAL_TRANSITION, ...).
        ConfigurationError: a key file the command names is unusable.
    """
    maintenance = MaintenanceService(services)
    who, name = command.who, command.name
    if name == "adjudicate":
        return maintenance.adjudicate(
            who, command.text("candidate_id"), command.text("decision"), command.text("reason")
        )
    if name == "expiry-sweep":
        return maintenance.expiry_sweep(who, progress)
    if name == "rotate-scope-key":
        return RotationService(services).rotate_scope_key(who, progress)
    if name == "rotate-root-key":
        new_root = RootKey.load(Path(command.text("new_root_key")))
        return RotationService(services).rotate_root_key(who, new_root, progress)
    if name == "compact":
        return CompactionService(services).compact(who, progress)
    if name == "accept-loss":
        return LossService(services).accept_loss(who, command.text("reason"), progress)
    if name == "backup":
        return BackupService(services).backup(who, Path(command.text("out")), progress)
    if name == "audit-export":
        span = span_from_operands(command.text("previous"), command.text("since_sequence"))
        return AuditAccessService(services).export(who, Path(command.text("out")), span, progress)
    if name == "audit-verify":
        return AuditAccessService(services).verify(
            who, progress, command.text("checkpoint"), command.text("checkpoint_public_key")
        )
    if name == "audit-checkpoint":
        return CheckpointService(services).checkpoint(who, Path(command.text("out")), progress)
    if name == "history":
        return maintenance.history(who, command.text("target_id"))
    if name == "inspect":
        show = command.operands["show_content"] is True
        return maintenance.inspect_candidate(who, command.text("candidate_id"), show_content=show)
    successor = command.text("successor") if "successor" in command.operands else None
    return maintenance.transition(
        who, name.replace("-", "_"), command.text("record_id"), command.text("reason"), successor
    )
