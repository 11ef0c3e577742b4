"""`engram-memory demo`: a narrated governed session through the real server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    demo: argparse.ArgumentParser = sub.add_parser(
        "demo", help="a narrated governed session through the real server"
    )
    demo.add_argument(
        "--workdir",
        default=".engram-demo",
        help="where keys and the store go (default: .engram-demo)",
    )
    demo.add_argument(
        "--transport", choices=("stdio", "http"), default="stdio", help="(default: stdio)"
    )
    return demo


def run(args: argparse.Namespace) -> int:
    from engram_memory.client.demo import run_demo

    return run_demo(Path(args.workdir), transport=args.transport)
