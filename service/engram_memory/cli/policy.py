"""`engram-memory policy build | check | validate | verify | identity | diff` (`test |
explain | effective` in `authoring_cli.py`, `sign | keygen` in `signing_cli.py`, `grant` in
`policy_grant.py`, `replay` in `policy_replay.py`).

For compliance authors: validate the YAML, build the bundle (Rego checked and tested by the
pinned OPA, compiled to Wasm), check that the shipped bundle matches the sources, verify a
bundle directory against its lock, and print which revision a bundle is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engram_memory.cli import policy_authoring as authoring_cli
from engram_memory.cli import policy_grant, policy_replay
from engram_memory.cli.policy_signing import (
    SIGNING_COMMANDS,
    add_signing_parsers,
    add_verification_flags,
    run_signing,
    run_verify,
)
from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR, DEFAULT_LABEL, verify_bundle


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "policy", help="validate, build, check and verify policy bundles"
    )
    policy_sub = parser.add_subparsers(dest="policy_command", required=True)

    build = policy_sub.add_parser(
        "build",
        help="build a bundle (default: regenerate the bundle shipped in the package)",
    )
    build.add_argument("--rego", help="Rego source directory (default ./rego)")
    build.add_argument("--policies", help="policy YAML directory (default ./policies)")
    build.add_argument("--out", help="output directory (default: the shipped bundle)")
    build.add_argument("--label", default=DEFAULT_LABEL, help="revision label")
    build.add_argument("--opa", help="OPA binary (default $ENGRAM_OPA_BIN, PATH, tool cache)")
    build.add_argument("--tests", help="tenant tests directory (default <policies>/tests)")
    build.add_argument(
        "--skip-tests", action="store_true", help="do not run the Rego and tenant tests"
    )

    check = policy_sub.add_parser(
        "check", help="fail unless the shipped bundle matches the sources"
    )
    check.add_argument(
        "--rebuild",
        action="store_true",
        help="also rebuild with the pinned OPA and compare every file byte for byte",
    )
    check.add_argument("--opa", help="OPA binary (default $ENGRAM_OPA_BIN, PATH, tool cache)")

    validate = policy_sub.add_parser(
        "validate", help="validate policy YAML; warn about likely mistakes"
    )
    validate.add_argument("--policies", default="policies", help="policy YAML directory")
    validate.add_argument("--strict", action="store_true", help="exit 1 when there is any warning")

    try_pattern = policy_sub.add_parser(
        "try-pattern",
        help="show what a never-store pattern or content classifier matches in sample text",
    )
    try_pattern.add_argument("name", help="the pattern's or classifier's name in policy data")
    try_pattern.add_argument("text", help="sample text to try it on")
    try_pattern.add_argument("--policies", default="policies", help="policy YAML directory")

    diff = policy_sub.add_parser(
        "diff",
        help="compare two bundles or source trees: data, Rego and the decisions that change",
    )
    diff.add_argument(
        "a",
        nargs="?",
        help="bundle directory (bundle.lock.json) or source tree (rego/, policies/)",
    )
    diff.add_argument("b", nargs="?", help="bundle directory or source tree to compare A with")
    diff.add_argument(
        "--against",
        metavar="BUNDLE",
        help="compare this bundle (`shipped`: the one in the package) with the one tree"
        " named (default .)",
    )
    diff.add_argument("--json", action="store_true", help="the whole report as JSON on stdout")
    diff.add_argument(
        "--limit", type=int, default=200, help="decision changes listed in text (default 200)"
    )
    diff.add_argument("--opa", help="OPA binary (default $ENGRAM_OPA_BIN, PATH, tool cache)")

    verify = policy_sub.add_parser("verify", help="verify a bundle directory against its lock")
    verify.add_argument("bundle_dir", nargs="?", default=str(DEFAULT_BUNDLE_DIR))
    add_verification_flags(verify)

    identity = policy_sub.add_parser("identity", help="print a bundle's revision and digest")
    identity.add_argument("bundle_dir", nargs="?", default=str(DEFAULT_BUNDLE_DIR))
    authoring_cli.add_parsers(policy_sub)
    add_signing_parsers(policy_sub)
    policy_grant.add_parser(policy_sub)
    policy_replay.add_parser(policy_sub)
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run one `policy` subcommand; exit codes: 0 ok, 1 check failed (`check`), a test
    failed (`test`), behaviour changed (`diff`, `replay`) or a warning under `validate --strict`.

    Raises:
        ConfigurationError: invalid data, missing OPA, failed build, bundle mismatch (the
            CLI prints it and exits 2).
    """
    # Imported here, not at the top: building the parser must stay cheap (cli/main.py).
    from engram_memory.policy.authoring.build import build_bundle
    from engram_memory.policy.authoring.default_bundle import (
        build_default_bundle,
        default_bundle_is_current,
        shipped_bundle_differs,
    )
    from engram_memory.policy.authoring.lint import run_validate

    command = args.policy_command
    if command in authoring_cli.COMMANDS:
        return authoring_cli.run(args)
    if command == "grant":
        return policy_grant.run(args)
    if command == "replay":
        return policy_replay.run(args)
    if command == "build":
        if args.out is None and args.rego is None and args.policies is None:
            if args.tests is not None:
                raise ConfigurationError(
                    "--tests needs --out: the shipped bundle uses policies/tests"
                )
            _require_checkout("build")
            identity = build_default_bundle(
                opa_bin=args.opa, progress=_progress, run_tests=not args.skip_tests
            )
        else:
            identity = build_bundle(
                Path(args.rego or "rego"),
                Path(args.policies or "policies"),
                Path(args.out or "bundle"),
                label=args.label,
                opa_bin=args.opa,
                run_tests=not args.skip_tests,
                tests_dir=args.tests,
                progress=_progress,
            )
        print(identity.revision)
        return 0
    if command == "check":
        _require_checkout("check")
        stale = [] if default_bundle_is_current() else ["content digest"]
        if not stale and args.rebuild:
            stale = shipped_bundle_differs(opa_bin=args.opa, progress=_progress)
        if not stale:
            print(f"shipped bundle is current: {DEFAULT_BUNDLE_DIR}")
            return 0
        print(
            f"shipped bundle differs from rego/ + policies/ ({', '.join(stale)}): "
            "run `engram-memory policy build` and commit the result"
        )
        return 1
    if command == "validate":
        return run_validate(args.policies, strict=args.strict)
    if command == "try-pattern":
        from engram_memory.policy.authoring.mistakes import run_try_pattern

        return run_try_pattern(args.policies, args.name, args.text)
    if command == "diff":
        # Imported here: it loads the Wasm runtime, which no other command of this CLI needs.
        from engram_memory.policy.authoring.diff import run_diff

        a, b = _diff_sides(args.a, args.b, args.against)
        return run_diff(a, b, as_json=args.json, limit=args.limit, opa_bin=args.opa)
    if command in SIGNING_COMMANDS:
        return run_signing(args)
    if command == "verify":
        return run_verify(args)
    identity = verify_bundle(args.bundle_dir)
    print(f"revision {identity.revision}\ndigest {identity.digest}")
    return 0


SHIPPED = "shipped"


def _diff_sides(a: str | None, b: str | None, against: str | None) -> tuple[str, str]:
    """`diff A B`, or `diff --against BUNDLE [TREE]` (TREE default `.`); `shipped` names the
    bundle in the package wherever a side is named and no such path exists.

    Raises:
        ConfigurationError: the sides are not named one of those two ways.
    """
    if against is not None:
        if b is not None:
            raise ConfigurationError("with --against, name one bundle or tree to compare")
        sides = (against, a or ".")
    elif a is None or b is None:
        raise ConfigurationError("name two bundles or trees, or use --against shipped [TREE]")
    else:
        sides = (a, b)
    first, second = (
        str(DEFAULT_BUNDLE_DIR) if side == SHIPPED and not Path(side).exists() else side
        for side in sides
    )
    return first, second


def _require_checkout(command: str) -> None:
    """`build` and `check` without paths work on the source checkout the package runs
    from; an installed package has none, so say what to run instead.

    Raises:
        ConfigurationError: no `rego/` and `policies/` beside the package.
    """
    from engram_memory.contract.exceptions import BundleError
    from engram_memory.policy.authoring.default_bundle import default_sources

    try:
        default_sources()
    except BundleError:
        here = Path("rego").is_dir() and Path("policies").is_dir()
        if command == "build":
            advice = (
                "run `engram-memory policy build --rego rego --policies policies --out bundle`"
                if here
                else "build your own with `engram-memory policy build --rego DIR"
                " --policies DIR --out DIR`"
            )
            raise ConfigurationError(
                "this installed package has no sources to rebuild its shipped bundle from: "
                + advice
            ) from None
        raise ConfigurationError(
            "`policy check` compares the shipped bundle with the source checkout it came"
            " from, which an installed package does not have: check a bundle you built with"
            " `engram-memory policy verify DIR`, or compare it with"
            " `engram-memory policy diff --against shipped DIR`"
        ) from None
