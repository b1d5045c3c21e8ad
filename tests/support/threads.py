"""Threads in tests: start one on the harness's worker, send it a message, wait for its answers;
an imported thread's input."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from tests.support.harness import Harness
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentStatus,
    SendReceipt,
    ThreadExport,
    UserMessage,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.threads import rebuild
from treadle.workflows.agent.workflow import AgentWorkflow


async def start_thread(
    harness: Harness,
    model: str,
    *,
    task: str = "Hello, remember the word 'marmalade'.",
    task_queue: str | None = None,
    **config: Any,
) -> WorkflowHandle[Any, Any]:
    """A thread on the harness's task queue (or ``task_queue``), replay-checked at the end."""
    handle = await harness.client.start_workflow(
        AgentWorkflow.run,
        AgentInput(
            task=task,
            model=model,
            workspace=str(harness.workspace),
            thread=True,
            config=AgentConfig.model_validate(config),
        ),
        id=f"thread-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue or harness.task_queue,
        execution_timeout=timedelta(minutes=5),
    )
    harness.handles.append(handle)
    return handle


async def send(handle: WorkflowHandle[Any, Any], text: str) -> SendReceipt:
    receipt: SendReceipt = await handle.execute_update(AgentWorkflow.send, UserMessage(text=text))
    return receipt


async def answered(harness: Harness, handle: WorkflowHandle[Any, Any], turns: int) -> AgentStatus:
    """Wait until the thread has answered ``turns`` turns and waits for its user again."""
    return await answered_turns(handle, turns)


async def answered_turns(
    handle: WorkflowHandle[Any, Any], turns: int, timeout: float = 15
) -> AgentStatus:
    """Wait until the thread has answered ``turns`` turns and waits for its user again."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        # Trace first: a status read after it is at least as far along.
        trace = await handle.query(AgentWorkflow.trace)
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        done = [e for e in trace.entries if e.event == "TurnAnswered"]
        if status.state is State.WAITING_FOR_USER_INPUT and len(done) + trace.earlier >= turns:
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the thread never answered {turns} turn(s): {status}")
        await asyncio.sleep(0.05)


def imported_thread(model: str, workspace: Path, sizes: Sequence[int]) -> AgentInput:
    """The input of a thread imported waiting for its user, as ``starter.py import`` makes it:
    messages of ``sizes`` characters (and a number), the user's and the model's in turn."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i:02d} " + "x" * size}
        for i, size in enumerate(sizes)
    ]
    export = ThreadExport.model_validate(
        {
            "agent_state": {"kind": "waiting_for_user_input"},
            "conversation": {"messages": messages},
            "treadle": {"model": model},
        }
    )
    agent_input, run = rebuild(export, str(workspace), datetime.now(UTC))
    return agent_input.model_copy(update={"resume": run.model_dump(mode="json")})
