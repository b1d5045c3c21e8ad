"""``treadle watch`` and ``treadle answer``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from temporalio.client import Client

from treadle.cli import identity
from treadle.cli.exits import UsageError
from treadle.cli.live.follow import follow
from treadle.cli.live.options import add_client_options, responder_for, warn_secret_env
from treadle.cli.live.views import JsonView, TerminalView, View
from treadle.client import (
    AgentClient,
    NoStream,
    NoWorkerAnswered,
    RunCannotAnswer,
)
from treadle.client.describe import short
from treadle.workflows.agent.messages.models import AgentStatus, RunStatus
from treadle.workflows.agent.messages.state_machine import State

__all__ = ["cmd_answer", "cmd_watch", "register"]


def register(subparsers: Any) -> None:
    """Add ``watch`` and ``answer``; each sets ``handler`` (async (client, args) -> exit code)."""
    watch = subparsers.add_parser("watch", help="show a run or thread live (JSON lines when piped)")
    watch.add_argument("workflow_id")
    start = watch.add_mutually_exclusive_group()
    start.add_argument("--from-start", action="store_true", help="from the run's first event")
    start.add_argument(
        "--from", dest="from_offset", type=int, metavar="OFFSET", help="from this offset"
    )
    watch.add_argument("--json", action="store_true", help="JSON lines, even on a terminal")
    add_client_options(watch)
    watch.set_defaults(handler=cmd_watch)

    answer = subparsers.add_parser("answer", help="answer a run's client query by hand")
    answer.add_argument("workflow_id")
    answer.add_argument("query_id")
    answer.add_argument("text", nargs="?", help='the answer ("-": read it from standard input)')
    answer.add_argument("--decline", metavar="REASON", help="refuse to answer, saying why")
    identity.add_as_option(answer)
    answer.set_defaults(handler=cmd_answer)


async def cmd_watch(client: Client, args: argparse.Namespace) -> int:
    if args.from_offset is not None and args.from_offset < 0:
        raise UsageError("--from must be an offset of 0 or more")
    agents = AgentClient(client)
    status = await _attach_status(agents, args.workflow_id)
    as_json = args.json or not sys.stdout.isatty()
    view: View = JsonView() if as_json else TerminalView()
    warn_secret_env(args, view)
    if args.from_start:
        from_offset: int | None = 0
    elif args.from_offset is not None:
        from_offset = args.from_offset
    else:
        from_offset = status.stream_offset if status is not None else None
        if status is not None and status.state.is_terminal:
            view.say(f"run {args.workflow_id} has ended: {status.state.value}")
            return 0 if status.state is State.DONE else 1
    responder = responder_for(agents, args.workflow_id, view, args, can_ask=sys.stdin.isatty())
    try:
        await follow(
            agents,
            args.workflow_id,
            view,
            responder,
            from_offset=from_offset,
            attached=status if not args.from_start else None,
        )
    except NoStream as exc:
        raise UsageError(str(exc)) from exc
    result = await agents.result(args.workflow_id)
    return 0 if result.status is RunStatus.DONE else 1


async def cmd_answer(client: Client, args: argparse.Namespace) -> int:
    text = args.text
    if text == "-":
        text = await asyncio.to_thread(sys.stdin.read)
    if (text is None) == (args.decline is None):
        raise UsageError("give the answer as TEXT, or --decline REASON")
    answered = await AgentClient(client).answer_query(
        args.workflow_id,
        args.query_id,
        text,
        declined=args.decline,
        decided_by=identity.decided_by(args),
    )
    how = "declined" if args.decline is not None else "answered"
    print(
        f"{how} {answered.id} ({answered.kind}: {short(answered.what, 80)}) "
        f"in run {args.workflow_id}"
    )
    return 0


async def _attach_status(client: AgentClient, workflow_id: str) -> AgentStatus | None:
    """The run's status, or ``None`` when no worker answers (a missing run is an error)."""
    try:
        return await client.status(workflow_id)
    except (NoWorkerAnswered, RunCannotAnswer):
        return None
