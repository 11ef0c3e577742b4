"""The `serve` settings a command that opens the service itself takes as flags.

`admin`, `import` and `audit checkpoint` open the service when no server holds the data
directory; they take the same settings as `serve`, each falling back to its ENGRAM_*
variable. Kept apart from config.py so building the CLI's parser stays cheap: the
configuration (and the crypto and policy modules it loads) is imported only when a command
runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engram_memory.core.service_config import ServiceConfig

SERVICE_FLAGS = (
    "data_dir",
    "host_keys",
    "root_key",
    "policy",
    "bundle",
    "bundle_verification_key",
    "bundle_key_id",
    "checkpoint_key",
)


def add_service_flags(parser: argparse.ArgumentParser) -> None:
    """`--data-dir`, `--root-key`, ... (SERVICE_FLAGS), each "as for serve"."""
    for flag in SERVICE_FLAGS:
        parser.add_argument(
            f"--{flag.replace('_', '-')}", help=f"as for serve (ENGRAM_{flag.upper()})"
        )


def config_from_flags(args: argparse.Namespace) -> ServiceConfig:
    """The configuration the flags of `add_service_flags` (and the environment) give.

    Raises:
        ConfigurationError: see `config.load_config`.
    """
    from engram_memory.core.service_config import load_config

    return load_config({flag: getattr(args, flag) for flag in SERVICE_FLAGS})
