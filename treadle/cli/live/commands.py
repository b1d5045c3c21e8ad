"""``treadle watch`` and ``treadle answer``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from treadle.cli import identity
from treadle.cli.exits import UsageError
from treadle.cli.live.follow import follow, outcome
from treadle.cli.live.lines import short
from treadle.cli.live.options import add_client_options, responder_for, warn_secret_env
from treadle.cli.live.responder import STATUS_TIMEOUT, UPDATE_TIMEOUT, cause_of
from treadle.cli.live.views import JsonView, TerminalView, View
from treadle.stream import StreamUnavailable
from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import describe_errors

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
    handle = client.get_workflow_handle(args.workflow_id, result_type=AgentResult)
    status = await _attach_status(handle)
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
    responder = responder_for(handle, view, args, can_ask=sys.stdin.isatty())
    try:
        await follow(
            client,
            args.workflow_id,
            view,
            responder,
            from_offset=from_offset,
            attached=status if not args.from_start else None,
        )
    except StreamUnavailable as exc:
        raise UsageError(str(exc)) from exc
    result = await outcome(handle)
    return 0 if result.status is RunStatus.DONE else 1


async def cmd_answer(client: Client, args: argparse.Namespace) -> int:
    handle = client.get_workflow_handle(args.workflow_id, result_type=AgentResult)
    text = args.text
    if text == "-":
        text = await asyncio.to_thread(sys.stdin.read)
    if (text is None) == (args.decline is None):
        raise UsageError("give the answer as TEXT, or --decline REASON")
    status = await _attach_status(handle, required=True)
    assert status is not None
    waiting = (*((status.client_query,) if status.client_query else ()), *status.child_queries)
    # The run's own query, or a sub-agent's it takes answers for (``call_1/q1``).
    query = next((q for q in waiting if q.id == args.query_id), None)
    if query is None and status.client_query is not None and not status.child_queries:
        query = status.client_query  # its id is checked by the run, which says what waits
    if query is None and not waiting:
        raise UsageError(f"run {args.workflow_id} has no client query waiting")
    if query is None:
        named = ", ".join(q.id for q in waiting)
        raise UsageError(
            f"run {args.workflow_id} has no client query {args.query_id!r} waiting "
            f"(waiting: {named})"
        )
    try:
        answer = ClientAnswer(
            query_id=args.query_id,
            kind=query.kind,
            content=text,
            declined=args.decline,
            decided_by=identity.decided_by(args),
        )
    except ValidationError as exc:
        raise UsageError(f"invalid answer: {describe_errors(exc)}") from exc
    try:
        answered: ClientQuery = await handle.execute_update(
            AgentWorkflow.answer_query, answer, rpc_timeout=UPDATE_TIMEOUT
        )
    except WorkflowUpdateFailedError as exc:
        raise UsageError(f"run {args.workflow_id} refused the answer: {cause_of(exc)}") from exc
    except RPCError as exc:
        raise UsageError(f"run {args.workflow_id} did not take the answer: {exc.message}") from exc
    how = "declined" if args.decline is not None else "answered"
    print(f"{how} {answered.id} ({answered.kind}: {short(answered.what, 80)}) in run {handle.id}")
    return 0


async def _attach_status(
    handle: WorkflowHandle[Any, Any], *, required: bool = False
) -> AgentStatus | None:
    """The run's status, or ``None`` when no worker answers (unless ``required``)."""
    try:
        status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=STATUS_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise UsageError(f"no run with id {handle.id!r}") from exc
        if required:
            raise UsageError(
                f"run {handle.id!r} did not answer ({exc.message}); is a worker running?"
            ) from exc
        return None
    except WorkflowQueryFailedError as exc:
        if required:
            raise UsageError(f"run {handle.id!r} did not answer: {exc.message}") from exc
        return None
    return status
