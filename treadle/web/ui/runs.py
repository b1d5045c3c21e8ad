"""The runs and threads list, and starting a run or a thread, through ``AgentClient``.

The list is one visibility query (``AgentState`` / ``AgentStep`` / ``AgentModel`` are the
search attributes the workflow keeps current); the open runs on it are then asked their
``state`` query, all at once with a short deadline, for what only the run knows (its task,
its last event, what it waits for). A run whose worker does not answer is still listed
(``AgentClient.list_runs``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from treadle.client import FILTERS, AgentClient, InvalidRequest, RunSummary
from treadle.client.workdirs import resolve_workspace
from treadle.web.http import HttpError
from treadle.web.ui.actions import asked
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput
from treadle.workflows.base import describe_errors

__all__ = ["FILTERS", "StartRequest", "list_runs", "start_run"]


async def list_runs(client: AgentClient, state: str | None) -> list[dict[str, Any]]:
    """The newest agent runs and threads (``state``: one of ``FILTERS``), as the page's rows."""
    return [_row(summary) for summary in await asked(client.list_runs(state))]


def _row(summary: RunSummary) -> dict[str, Any]:
    row = summary.model_dump(mode="json")
    # ISO 8601 as Python writes it (``+00:00``), as the page has always been sent.
    row["started"] = summary.started.isoformat() if summary.started else None
    row["closed"] = summary.closed.isoformat() if summary.closed else None
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


async def start_run(client: AgentClient, task_queue: str, request: StartRequest) -> str:
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
    except InvalidRequest as exc:  # a workspace that does not exist, or is no directory
        raise HttpError(400, str(exc)) from None
    started = await asked(
        client.start(agent_input, id=workflow_id, task_queue=task_queue, create_workspace=create)
    )
    return started.id
