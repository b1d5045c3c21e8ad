"""Following a run: its stream shown in a view and acted on by a responder, until it is over."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from treadle.cli.live.options import responder_for, warn_secret_env
from treadle.cli.live.responder import Responder
from treadle.cli.live.views import QuietView, TerminalView, View
from treadle.stream import StreamUnavailable, watch_events
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus

__all__ = ["follow", "outcome", "show_run"]


async def follow(
    client: Client,
    workflow_id: str,
    view: View,
    responder: Responder,
    *,
    from_offset: int | None,
    attached: AgentStatus | None = None,
    until: Callable[[AgentEvent], Awaitable[bool]] | None = None,
) -> int | None:
    """Show the run's stream from ``from_offset`` (``None``: from now) and act on it, until the
    run is over or ``until`` says so; returns the offset to continue from (``None`` if nothing
    was read). ``attached``: the run's status when the view attached (what already waits).
    Raises ``StreamUnavailable`` when the run has no stream."""
    next_offset = from_offset
    if attached is not None:
        view.attached(workflow_id, attached)
    view.start()
    try:
        if attached is not None:
            await responder.on_attach(attached)
        stream = watch_events(client, workflow_id, from_offset=from_offset, on_notice=view.notice)
        async with contextlib.aclosing(stream):
            async for item in stream:
                next_offset = item.offset + 1
                view.item(item)
                if isinstance(item.value, AgentEvent):
                    await responder.on_event(item.value)
                    if until is not None and await until(item.value):
                        break
    finally:
        view.stop()
    return next_offset


async def outcome(handle: WorkflowHandle[Any, Any]) -> AgentResult:
    """The run's result once it is over (an error result for a failed, terminated, cancelled
    or timed-out run)."""
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        return AgentResult(status=RunStatus.ERROR, error=getattr(cause, "message", str(cause)))
    if isinstance(result, AgentResult):
        return result
    return AgentResult.model_validate(result)


async def show_run(
    client: Client, handle: WorkflowHandle[Any, Any], args: argparse.Namespace
) -> bool:
    """``run --wait``: the live view of a run just started (nothing but its answers with
    ``--json``), until it is over. Returns whether it was shown (its answer or error included);
    a run without a stream is simply waited for."""
    view: View = QuietView() if args.json else TerminalView(show_started=False)
    warn_secret_env(args, view)
    responder = responder_for(handle, view, args, can_ask=sys.stdin.isatty())
    try:
        await follow(client, handle.id, view, responder, from_offset=0)
    except StreamUnavailable:
        return False
    return not args.json
