"""``treadle fork ID --step N [--message TEXT] [--id NEW]``: a new run or thread that goes on
from the end of step N of another, with its conversation up to there (by reference to the
store's record), its workspace as step N's snapshot, and its config unless told otherwise; the
original is untouched."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from treadle.cli import shell
from treadle.cli.exits import UsageError
from treadle.client import AgentClient

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``fork`` (sets ``handler``)."""
    fork = subparsers.add_parser(
        "fork", help="a new run or thread from any step of another (the original untouched)"
    )
    fork.add_argument("workflow_id", help="the run or thread to fork")
    fork.add_argument(
        "--step", type=int, required=True, help="fork from the end of this step (0: the task)"
    )
    fork.add_argument("--message", help="a new instruction the fork's next model call reads")
    fork.add_argument("--id", help="the fork's id (default: agent-/thread-<random>)")
    fork.add_argument(
        "--workspace", help="an empty directory for its files (default: workspaces/ID)"
    )
    fork.add_argument("--create-workspace", action="store_true", help="create --workspace")
    fork.add_argument("--model", help="provider:model (default: the original's)")
    fork.add_argument(
        "--config", metavar="FILE", help="AgentConfig fields (JSON) over the original's config"
    )
    fork.add_argument("--json", action="store_true")
    fork.set_defaults(handler=cmd_fork)


async def cmd_fork(client: Client, args: argparse.Namespace) -> int:
    forked = await AgentClient(client, task_queue=args.task_queue).fork(
        args.workflow_id,
        args.step,
        message=args.message,
        id=args.id,
        workspace=args.workspace,
        create_workspace=args.create_workspace,
        model=args.model,
        config=_config(args.config),
    )
    if args.json:
        print(forked.model_dump_json(indent=2))
        return 0
    kind = "thread" if forked.thread else "run"
    print(f"forked {args.workflow_id} at step {forked.step} as {kind} {forked.id}")
    print(forked.workspace_note)
    print(f"  {shell.starter('status', forked.id)}")
    return 0


def _config(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read the config {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise UsageError(f"the config {path} must be a JSON object of AgentConfig fields")
    return config
