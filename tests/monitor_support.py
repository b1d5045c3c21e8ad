"""Helpers shared by the monitor tests: read a monitor's view, wait until it says something."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio.client import WorkflowHandle

from workflows.monitors.models import MonitorView, ViewRequest
from workflows.monitors.workflow import MonitorWorkflow

Handle = WorkflowHandle[MonitorWorkflow, MonitorView]


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
