"""`audit verify` of a stopped store's data directory: the transcript an auditor reads.

Kept apart from cli/audit.py (the `audit` command group) because `audit report` and
`audit pack` put the same transcript in what they write: both command modules import this
one, and neither imports the other. Exit codes: 0 verified, 1 broken chain, receipt or key
directory, 3 store behind its anchor, 4 damaged store file.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engram_memory.contract.exceptions import (
    ConfigurationError,
    StoreBehindAnchor,
    StoreDamaged,
    StoreRefusal,
)

if TYPE_CHECKING:
    from engram_memory.crypto.keys import RootKey
    from engram_memory.store.anchors import AnchorFile

EXIT_CHAIN_BROKEN = 1


def _anchor_for(data_dir: Path, root_key: str | None) -> AnchorFile:
    """The data directory's anchor, authenticated when a root key file is named.

    Raises:
        ConfigurationError: the named root key file is unusable.
    """
    from engram_memory.crypto.keys import RootKey
    from engram_memory.store.anchors import AnchorFile

    key_path = root_key or os.environ.get("ENGRAM_ROOT_KEY")
    key = None if not key_path else RootKey.load(Path(key_path)).head_anchor_key()
    return AnchorFile(data_dir, key)


def _root_key(root_key: str | None) -> RootKey | None:
    """The root key ring of `--root-key` or ENGRAM_ROOT_KEY, if either names one: with it
    every key file is authenticated, not only shape-checked."""
    from engram_memory.crypto.keys import RootKey

    key_path = root_key or os.environ.get("ENGRAM_ROOT_KEY")
    return RootKey.load(Path(key_path)) if key_path else None


def verify_stopped_store(args: argparse.Namespace) -> int:
    """`audit verify`: the result on stdout, one line; diagnostics stay on stderr."""
    # Imported here, not at the top: building the parser must stay cheap (cli/main.py).
    from engram_memory.admin.verification import verify_store
    from engram_memory.contract.exceptions import (
        AuditChainBroken,
        JournalCorrupt,
        KeyDirectoryInconsistent,
        OpenFailure,
        StoreCorrupt,
        StoreOpenFailed,
    )
    from engram_memory.core.key_recovery import audit_key_directory

    data_dir = Path(args.data_dir)
    try:
        root = _root_key(args.root_key)
        verified = verify_store(
            data_dir,
            _anchor_for(data_dir, args.root_key),
            None if root is None else root.call_log_key(),
        )
    except (JournalCorrupt, AuditChainBroken) as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return EXIT_CHAIN_BROKEN
    except StoreCorrupt:
        print(f"FAILED: {StoreDamaged(f'store file in {data_dir} is damaged')}")
        return StoreDamaged.exit_code
    except StoreOpenFailed as exc:
        refusal: StoreRefusal | ConfigurationError = (
            StoreDamaged(exc.line)
            if exc.failure is OpenFailure.DAMAGED
            else ConfigurationError(exc.line)
        )
        print(f"FAILED: {refusal}")
        return refusal.exit_code if isinstance(refusal, StoreRefusal) else 2
    except StoreBehindAnchor as exc:
        print(f"FAILED: {exc}")
        if args.checkpoint:  # what the checkpoint says about the loss, too
            print("\n".join(_checkpoint_lines(args)[1]))
        return exc.exit_code
    try:
        keys = audit_key_directory(data_dir, _root_key(args.root_key))
    except KeyDirectoryInconsistent as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return EXIT_CHAIN_BROKEN
    extends = ""
    if args.checkpoint:
        code, lines = _checkpoint_lines(args)
        if code:
            print("\n".join(lines))
            return code
        extends = "; " + "; ".join(lines)
    print(
        f"ok: {verified.events} journal events, {verified.entries} audit entries, "
        f"{verified.receipts} decision receipts, {verified.rows} rows in {verified.tables} "
        f"tables, {keys.key_files} key files verified; head anchor {verified.anchor}{extends}"
    )
    return 0


def _checkpoint_lines(args: argparse.Namespace) -> tuple[int, list[str]]:
    from engram_memory.admin.checkpointing import checkpoint_lines

    return checkpoint_lines(Path(args.data_dir), Path(args.checkpoint), args.checkpoint_public_key)
