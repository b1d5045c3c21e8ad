"""``treadle wake ID [--reason TEXT]``: end the wait of a run the ``wait`` tool parked
(``Waiting``) now, instead of when its timer fires; the model reads the reason."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from treadle.cli.exits import UsageError
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.waiting import WakeSignal
from treadle.workflows.agent.workflow import AgentWorkflow

__all__ = ["register"]

QUERY_TIMEOUT = timedelta(seconds=10)


def register(subparsers: Any) -> None:
    """Add ``wake`` (sets ``handler``)."""
    wake = subparsers.add_parser("wake", help="end a run's wait (the wait tool) now")
    wake.add_argument("workflow_id")
    wake.add_argument("--reason", default="", help="why it wakes (the model reads it)")
    wake.set_defaults(handler=cmd_wake)


async def cmd_wake(client: Client, args: argparse.Namespace) -> int:
    handle = client.get_workflow_handle(args.workflow_id, result_type=AgentResult)
    try:
        status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise UsageError(f"no run with id {args.workflow_id!r}") from exc
        raise UsageError(
            f"run {args.workflow_id!r} did not answer ({exc.message}); is a worker running?"
        ) from exc
    except WorkflowQueryFailedError as exc:
        raise UsageError(f"run {args.workflow_id!r} did not answer: {exc.message}") from exc
    if status.state is not State.WAITING:
        raise UsageError(
            f"run {args.workflow_id} is not waiting (it is {status.state.value}); wake ends a "
            "wait of the wait tool"
        )
    await handle.signal(AgentWorkflow.wake, WakeSignal(reason=args.reason))
    when = (
        f" (it would have woken at {status.wakes_at:%Y-%m-%d %H:%M:%S} UTC)"
        if status.wakes_at
        else ""
    )
    print(f"woke run {args.workflow_id}{when}")
    return 0
