"""The runs and threads list, from Temporal visibility, and starting a run or a thread.

The list is one visibility query (``AgentState`` / ``AgentStep`` / ``AgentModel`` are the
search attributes the workflow keeps current); the open runs on it are then asked their
``state`` query, all at once with a short deadline, for what only the run knows (its task,
its last event, what it waits for). A run whose worker does not answer is still listed.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError

from treadle.cli.exits import UsageError
from treadle.cli.workspaces import make_workspace, resolve_workspace
from treadle.web.http import HttpError
from treadle.workflows.agent.messages import search_attributes as sa
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentStatus
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import describe_errors

__all__ = ["FILTERS", "StartRequest", "list_runs", "start_run", "waiting_for"]

LIST_LIMIT = 50
STATUS_TIMEOUT = timedelta(seconds=3)

FILTERS: dict[str, str] = {
    "WaitingForHuman": "AgentState = 'WaitingForHuman'",
    "WaitingForClient": "AgentState = 'WaitingForClient'",
    "WaitingForUserInput": "AgentState = 'WaitingForUserInput'",
    "running": "ExecutionStatus = 'Running'",
    "done": "ExecutionStatus = 'Completed' AND AgentState = 'Done'",
    "error": "ExecutionStatus != 'Running' AND AgentState != 'Done'",
}
"""The list's filters: the three waits, and running / done / error."""

_WAITS = {
    "WaitingForHuman": "a person: approve a call or guide the run",
    "WaitingForClient": "its client: answer a question",
    "WaitingForUserInput": "its user: the next message",
}


def waiting_for(state: str) -> str | None:
    return _WAITS.get(state)


async def list_runs(client: Client, state: str | None) -> list[dict[str, Any]]:
    """The newest agent runs and threads (``state``: one of ``FILTERS``)."""
    query = "WorkflowType = 'AgentWorkflow'"
    if state:
        if state not in FILTERS:
            raise HttpError(400, f"no filter {state!r}; one of {', '.join(FILTERS)}")
        query += f" AND {FILTERS[state]}"
    executions: list[WorkflowExecution] = []
    async for execution in client.list_workflows(query, limit=LIST_LIMIT):
        executions.append(execution)
    statuses = await asyncio.gather(*(_status(client, e) for e in executions))
    return [_row(e, s) for e, s in zip(executions, statuses, strict=True)]


async def _status(client: Client, execution: WorkflowExecution) -> AgentStatus | None:
    if execution.status is not WorkflowExecutionStatus.RUNNING:
        return None  # a closed run's query would replay its whole history on a worker
    handle = client.get_workflow_handle(execution.id)
    try:
        status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=STATUS_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        # No worker, or one that cannot answer: listed from visibility alone.
        return None
    return status


def _row(execution: WorkflowExecution, status: AgentStatus | None) -> dict[str, Any]:
    attrs = execution.typed_search_attributes
    state = attrs.get(sa.AGENT_STATE) or ""
    running = execution.status is WorkflowExecutionStatus.RUNNING
    if status is not None:
        state = status.state.value
    elif not running and execution.status is not None and not state:
        state = execution.status.name.title()
    row: dict[str, Any] = {
        "id": execution.id,
        "state": state or "Starting",
        "execution": execution.status.name.lower() if execution.status else "unknown",
        "step": status.step if status is not None else attrs.get(sa.AGENT_STEP),
        "model": status.model if status is not None else attrs.get(sa.AGENT_MODEL),
        "started": execution.start_time.isoformat() if execution.start_time else None,
        "closed": execution.close_time.isoformat() if execution.close_time else None,
        "task": status.task[:200] if status is not None else None,
        "thread": status.thread if status is not None else None,
        "last": status.last_event if status is not None else None,
        "waiting_for": waiting_for(state) if running else None,
        "answered": status is not None,
    }
    return row


@dataclass(frozen=True)
class StartRequest:
    """What the page's start form sends."""

    task: str
    model: str
    thread: bool
    workspace: str | None
    require_approval: str
    token_budget: int | None
    max_steps: int | None

    @classmethod
    def parse(cls, body: dict[str, Any]) -> StartRequest:
        try:
            return cls(
                task=str(body.get("task") or "").strip(),
                model=str(body.get("model") or "openai:gpt-4o").strip(),
                thread=bool(body.get("thread")),
                workspace=str(body["workspace"]).strip() or None if body.get("workspace") else None,
                require_approval=str(body.get("require_approval") or "").strip(),
                token_budget=_number(body.get("token_budget")),
                max_steps=_number(body.get("max_steps")),
            )
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None


def _number(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a whole number") from None


async def start_run(client: Client, task_queue: str, request: StartRequest) -> str:
    """Start the run or thread the form describes; returns its workflow id."""
    if not request.task:
        raise HttpError(400, "a run needs a task (a thread: its first message)")
    prefix = "thread" if request.thread else "agent"
    workflow_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
    config: dict[str, Any] = {}
    if request.require_approval:
        config["require_approval"] = request.require_approval
    if request.token_budget is not None:
        config["token_budget"] = request.token_budget
    if request.max_steps is not None:
        config["max_steps"] = request.max_steps
    try:
        workspace, create = resolve_workspace(request.workspace, workflow_id, create=False)
        agent_input = AgentInput(
            task=request.task,
            model=request.model,
            workspace=str(workspace),
            thread=request.thread,
            config=AgentConfig.model_validate(config),
        )
    except ValidationError as exc:
        raise HttpError(400, f"invalid run: {describe_errors(exc)}") from None
    except UsageError as exc:  # a workspace that does not exist, or is no directory
        raise HttpError(400, str(exc)) from None
    if create:
        try:
            await asyncio.to_thread(make_workspace, Path(agent_input.workspace))
        except UsageError as exc:
            raise HttpError(400, str(exc)) from None
    summary = f"thread: {request.task[:190]}" if request.thread else request.task[:200]
    await client.start_workflow(
        AgentWorkflow.run,
        agent_input,
        id=workflow_id,
        task_queue=task_queue,
        static_summary=summary,
        static_details=f"model {agent_input.model} · workspace {agent_input.workspace}",
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
    )
    return workflow_id
