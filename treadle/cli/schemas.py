"""`treadle schemas`: the JSON Schemas of the workflow's input, result, signals, updates and
queries, for clients in any language (``treadle.contract``; docs/contract.md).

    treadle schemas --out schemas
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from treadle import contract
from treadle.cli.exits import UsageError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the `schemas` command (no Temporal connection: ``standalone``)."""
    p = subparsers.add_parser(
        "schemas", help="write the JSON Schemas of the workflow's input, result and handlers"
    )
    p.add_argument("--out", type=Path, required=True, help="the directory to write them into")
    p.set_defaults(standalone=cmd_schemas)


async def cmd_schemas(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory")
    written = contract.write(out)
    print(f"{len(written)} files written to {out} (index.json names each)")
    return 0
