"""`engram-memory policy grant`: give a principal a role in one workspace, show the YAML diff,
and rebuild the bundle the server decides with (docs/first-hour.md, "Grant yourself").

Without `--policies` it edits the checkout's `policies/` and rebuilds the shipped bundle (as
`policy build` does); with `--policies DIR` it needs `--out BUNDLE_DIR`, the bundle a server
is then pointed at (`ENGRAM_BUNDLE`). When the build fails (a tenant test no longer holds,
no OPA) the YAML is put back as it was: nothing is left half-done.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.policy.bundle import DEFAULT_LABEL

GRANT_DOCS = "docs/first-hour.md, 'Grant yourself'"


def add_parser(policy_sub: Any) -> argparse.ArgumentParser:
    grant: argparse.ArgumentParser = policy_sub.add_parser(
        "grant",
        help="give a principal a role in a workspace: edit the tenant YAML, show the diff, "
        "rebuild the bundle",
        description="Adds a grant to the tenant's YAML (comments and layout kept), prints the "
        "diff, and rebuilds the bundle with the pinned OPA (Rego and tenant tests first). "
        "Restart the server (or the MCP client that starts the gateway) to use it.",
    )
    grant.add_argument("--tenant", required=True, help="the tenant, e.g. acme")
    grant.add_argument("--workspace", required=True, help="the workspace, e.g. support")
    grant.add_argument("--principal", required=True, help="who, e.g. user:alice")
    grant.add_argument("--role", required=True, help="a role the workspace defines, e.g. steward")
    grant.add_argument(
        "--purpose",
        action="append",
        dest="purposes",
        metavar="PURPOSE",
        help="only for this purpose (repeat for several; default: any purpose)",
    )
    grant.add_argument(
        "--policies", help="policy YAML directory (default: the checkout's ./policies)"
    )
    grant.add_argument("--rego", default="rego", help="Rego source directory (default ./rego)")
    grant.add_argument(
        "--out", help="bundle directory to build (required with --policies; default: shipped)"
    )
    grant.add_argument("--label", default=DEFAULT_LABEL, help="revision label")
    grant.add_argument("--opa", help="OPA binary (default $ENGRAM_OPA_BIN, PATH, tool cache)")
    return grant


def run(args: argparse.Namespace) -> int:
    """Grant, print the diff and rebuild; exit 0 (also when the grant already existed).

    Raises:
        ConfigurationError: the grant cannot be made (the message says why), or the bundle
            cannot be built (the YAML is restored first).
    """
    # Imported here: building the parser must stay cheap (cli/main.py).
    from engram_memory.contract.exceptions import GrantRefused
    from engram_memory.policy.authoring.build import build_bundle
    from engram_memory.policy.authoring.default_bundle import build_default_bundle
    from engram_memory.policy.authoring.grant import (
        apply_grant,
        plan_grant,
        restore,
    )

    if args.policies is not None and args.out is None:
        raise ConfigurationError(
            "--policies needs --out: the shipped bundle is built from the checkout's policies/"
        )
    policies = Path(args.policies or "policies")
    try:
        edit = plan_grant(
            policies,
            tenant=args.tenant,
            workspace=args.workspace,
            principal=args.principal,
            role=args.role,
            purposes=args.purposes,
        )
    except GrantRefused as refused:
        raise ConfigurationError(f"policy grant: {refused}") from None
    if edit.changed:
        sys.stdout.write(edit.diff())
    else:
        print(f"{edit.path}: {args.principal} already has role {args.role}; nothing to change")
    apply_grant(edit)
    try:
        if args.policies is None:
            identity = build_default_bundle(opa_bin=args.opa, progress=_progress)
        else:
            identity = build_bundle(
                Path(args.rego),
                policies,
                Path(args.out),
                label=args.label,
                opa_bin=args.opa,
                progress=_progress,
            )
    except BaseException:  # a failed or interrupted build leaves the YAML as it found it
        restore(edit)
        print(f"policy grant: the bundle did not build; {edit.path} is unchanged", file=sys.stderr)
        raise
    print(f"bundle {identity.revision}")
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr)
