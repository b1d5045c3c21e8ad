"""Following a run: its stream shown in a view and acted on by a responder, until it is over."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Awaitable, Callable

from treadle.cli.live.options import responder_for, warn_secret_env
from treadle.cli.live.responder import Responder
from treadle.cli.live.views import QuietView, TerminalView, View
from treadle.client import AgentClient, NoStream
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import AgentStatus

__all__ = ["follow", "show_run"]


async def follow(
    client: AgentClient,
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
    Raises ``NoStream`` when the run has no stream."""
    next_offset = from_offset
    if attached is not None:
        view.attached(workflow_id, attached)
    view.start()
    try:
        if attached is not None:
            await responder.on_attach(attached)
        stream = client.watch(workflow_id, from_offset=from_offset, on_notice=view.notice)
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


async def show_run(client: AgentClient, workflow_id: str, args: argparse.Namespace) -> bool:
    """``run --wait``: the live view of a run just started (nothing but its answers with
    ``--json``), until it is over. Returns whether it was shown (its answer or error included);
    a run without a stream is simply waited for."""
    view: View = QuietView() if args.json else TerminalView(show_started=False)
    warn_secret_env(args, view)
    responder = responder_for(client, workflow_id, view, args, can_ask=sys.stdin.isatty())
    try:
        await follow(client, workflow_id, view, responder, from_offset=0)
    except NoStream:
        return False
    return not args.json
