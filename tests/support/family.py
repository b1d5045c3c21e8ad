"""Helpers for sub-agent tests (tests/subagents): scripted ``delegate`` calls, a parent's
children by their ids, and waiting for what a family shows."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from tests.support.harness import Harness, tool_messages
from tests.support.processes import ROOT
from treadle.workflows.agent.messages.models import AgentStatus, PendingApproval
from treadle.workflows.agent.workflow import AgentWorkflow

LIST = {"name": "list_dir", "arguments": {"path": "."}}


def usage(prompt: int, completion: int = 0) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def delegate(task: str, model: str | None, call_id: str, **more: Any) -> dict[str, Any]:
    """A scripted ``delegate`` call with its own id."""
    arguments = {"task": task, **({"model": model} if model else {}), **more}
    return {"name": "delegate", "arguments": arguments, "id": call_id}


def quick_and_hungry(harness: Harness) -> tuple[str, str, str]:
    """A family that shares one budget: a quick child (2,000 tokens), a hungry one (9,500, and a
    second call it must not make), and their parent (1,000, then 17,000 more), as models."""
    quick = harness.script({"content": "quick answer", "usage": usage(1500, 500)})
    hungry = harness.script(
        {"tool_calls": [LIST], "usage": usage(9000, 500)},
        {"content": "never reached"},
    )
    parent = harness.script(
        {
            "tool_calls": [
                delegate("quick", quick, "call_q"),
                delegate("hungry", hungry, "call_h"),
            ],
            "usage": usage(900, 100),
        },
        {"tool_calls": [LIST], "usage": usage(2000, 15_000)},
        {"content": "never reached"},
    )
    return quick, hungry, parent


def observations(harness: Harness, model: str, request: int) -> dict[str, str]:
    """Call id -> the observation the model was sent in its ``request``-th request."""
    body = harness.requests(model)[request]
    return {m["tool_call_id"]: m["content"] for m in tool_messages(body)}


def child(
    harness: Harness, parent: WorkflowHandle[Any, Any], call_id: str
) -> WorkflowHandle[Any, Any]:
    """The child a parent's call started (its id is the parent's plus the call's); replay-checked
    with the test's other runs."""
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, f"{parent.id}.{call_id}")
    harness.handles.append(handle)
    return handle


async def shows(
    handle: WorkflowHandle[Any, Any], what: str, check: Callable[[AgentStatus], bool]
) -> AgentStatus:
    """Wait until a run (which may not be started yet) answers a status that passes ``check``."""
    for _ in range(600):
        try:
            status: AgentStatus | None = await handle.query(AgentWorkflow.state)
        except RPCError:
            status = None
        if status is not None and check(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never showed {what}")


async def reaches(handle: WorkflowHandle[Any, Any], state: str) -> None:
    """Wait until a child (which may not be started yet) is in ``state``."""
    await shows(handle, state, lambda s: s.state == state)


async def pending_in(handle: WorkflowHandle[Any, Any], count: int) -> tuple[PendingApproval, ...]:
    """Wait until the parent's status lists ``count`` pending approvals; return them."""
    status = await shows(
        handle, f"{count} pending approval(s)", lambda s: len(s.pending_approvals) == count
    )
    return status.pending_approvals


async def starter(harness: Harness, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``starter.py`` against the harness's server and task queue, as a user would run it."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), *arguments],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
