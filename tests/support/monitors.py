"""Helpers shared by the monitor tests: start a monitor, read its view, wait until it says
something, and read the ping service's server-sent event stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from temporalio.client import Client, WorkflowHandle

from treadle.workflows.monitors.models import (
    MonitorConfig,
    MonitorEvent,
    MonitorInput,
    MonitorView,
    ViewRequest,
    monitor_workflow_id,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow

Handle = WorkflowHandle[MonitorWorkflow, MonitorView]


async def start_monitor(
    client: Client,
    task_queue: str,
    slug: str,
    ping_key: str,
    *,
    continue_as_new_after_events: int = 10_000,
    **fields: Any,
) -> Handle:
    """Start a monitor as ``monitors create`` does; its schedule is hourly unless ``fields``
    give one."""
    fields.setdefault("schedule", {"kind": "interval", "minutes": 60})
    config = MonitorConfig.model_validate({"slug": slug, "ping_key": ping_key, **fields})
    return await client.start_workflow(
        MonitorWorkflow.run,
        MonitorInput(config=config, continue_as_new_after_events=continue_as_new_after_events),
        id=monitor_workflow_id(slug),
        task_queue=task_queue,
        memo=config.memo(),
    )


async def view(handle: Handle, recent: int = 50) -> MonitorView:
    return await handle.query(MonitorWorkflow.view, ViewRequest(recent=recent))


async def until(
    handle: Handle,
    check: Callable[[MonitorView], bool],
    timeout: float = 20,
    recent: int = 50,
) -> MonitorView:
    """Poll the view (in real time) until ``check`` holds; fail with the last view."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        current = await view(handle, recent)
        if check(current):
            return current
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never true; last view: {current.model_dump_json(indent=1)}")
        await asyncio.sleep(0.05)


class EventReader:
    """Reads a server-sent event stream frame by frame."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()
        self.comments: list[str] = []

    async def frame(self) -> dict[str, str]:
        """The next block up to a blank line: its fields (none for a comment-only block)."""
        fields: dict[str, str] = {}
        async for line in self.lines:
            if not line:
                return fields
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        raise AssertionError("the event stream ended")

    async def event(self, timeout: float = 20) -> tuple[str, MonitorEvent]:
        """The next event frame (comments are collected on the way): its id and event."""
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.frame()
                if "event" in frame:
                    event = MonitorEvent.model_validate_json(frame["data"])
                    assert frame["event"] == event.type.value
                    return frame["id"], event

    async def comment(self, text: str, timeout: float = 20) -> None:
        async with asyncio.timeout(timeout):
            while text not in self.comments:
                await self.frame()
