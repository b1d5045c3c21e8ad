"""Read a run's live stream in tests the way a script does: `treadle.stream.read_items`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio.client import WorkflowHandle

from treadle.stream import read_items
from treadle.workflows.agent.messages.events import AgentEvent, TokenDelta


async def stream_items(
    handle: WorkflowHandle[Any, Any], from_offset: int = 0
) -> list[tuple[int, AgentEvent | TokenDelta]]:
    """Every retained item from ``from_offset``: ``(offset, event or token delta)``."""
    items = await read_items(handle._client, handle.id, from_offset=from_offset)
    return [(item.offset, item.value) for item in items]


async def events(handle: WorkflowHandle[Any, Any], from_offset: int = 0) -> list[AgentEvent]:
    return [e for _, e in await stream_items(handle, from_offset) if isinstance(e, AgentEvent)]


async def wait_for_event(
    handle: WorkflowHandle[Any, Any],
    match: Callable[[AgentEvent], bool],
    timeout: float = 30,
) -> AgentEvent:
    """The first event ``match`` accepts, polling until it is published."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        for event in await events(handle):
            if match(event):
                return event
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("no matching event was published")
        await asyncio.sleep(0.1)
