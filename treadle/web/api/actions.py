"""What the API does, through ``AgentClient`` alone: start, list, read (status, view, trace,
result, export), decide (approve / reject / modify / guide), answer, wake, send, close, cancel.

A body is read within the size limit and parsed into its model (``parsed``: a 400 naming the
field that does not fit); each of the client's errors becomes one HTTP answer (``http_error``),
here and nowhere else. An update's validator refuses before anything reaches the run's history,
so a refusal comes back at once: 409 with the run's own reason.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from treadle.client import (
    AgentClient,
    AgentClientError,
    InvalidRequest,
    NoStream,
    NoWorkerAnswered,
    Refused,
    RunCannotAnswer,
    RunNotFound,
    StartedRun,
    ThreadUnavailable,
)
from treadle.client.workdirs import resolve_workspace
from treadle.codec import EncryptionError
from treadle.web.api.bodies import (
    Answer,
    Answered,
    Approve,
    DecisionTaken,
    Guide,
    Modify,
    Reject,
    RunView,
    Sent,
    StartRun,
)
from treadle.web.http import HttpError
from treadle.workflows.agent.messages import catalogue
from treadle.workflows.agent.messages.models import AgentInput
from treadle.workflows.base import describe_errors

__all__ = [
    "answer",
    "asked",
    "decided",
    "http_error",
    "parsed",
    "run_view",
    "send",
    "start",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

RESULT_CHARS = 2_000
"""A tool result in a run's view is cut to this (its export holds previews anyway)."""


def http_error(exc: AgentClientError | EncryptionError) -> HttpError:
    """The API's answer to one of the client's errors."""
    if isinstance(exc, InvalidRequest):
        return HttpError(400, str(exc))
    if isinstance(exc, RunNotFound | NoStream):
        return HttpError(404, str(exc))
    if isinstance(exc, Refused):
        return HttpError(409, f"the run refused it: {exc.reason}")
    if isinstance(exc, ThreadUnavailable):
        return HttpError(409, str(exc))
    if isinstance(exc, NoWorkerAnswered):
        return HttpError(503, str(exc))
    if isinstance(exc, RunCannotAnswer | EncryptionError):
        return HttpError(503, f"the run could not answer: {exc}")
    return HttpError(409, f"the run did not take it: {exc}")


async def asked(asking: Awaitable[T]) -> T:
    """What ``asking`` (a call of the client) answers; its error as the API's."""
    try:
        return await asking
    except (AgentClientError, EncryptionError) as exc:
        raise http_error(exc) from None


def parsed(model: type[M], body: bytes) -> M:
    """``body`` (JSON) as ``model``; a 400 naming what does not fit."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise HttpError(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise HttpError(400, "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise HttpError(400, describe_errors(exc)) from None


async def start(client: AgentClient, task_queue: str, request: StartRun, model: str) -> StartedRun:
    """Start the run or thread ``request`` describes, on ``task_queue`` (with ``model`` when it
    names none)."""
    prefix = "thread" if request.thread else "agent"
    workflow_id = request.id or f"{prefix}-{uuid.uuid4().hex[:12]}"
    try:
        workspace, create = resolve_workspace(request.workspace, workflow_id, create=False)
        agent_input = AgentInput(
            task=request.task,
            model=request.model or model,
            workspace=str(workspace),
            thread=request.thread,
            task_type=request.task_type,
            config=request.config,
        )
    except ValidationError as exc:
        raise HttpError(400, f"invalid run: {describe_errors(exc)}") from None
    except InvalidRequest as exc:  # a workspace that does not exist, or is no directory
        raise HttpError(400, str(exc)) from None
    return await asked(
        client.start(agent_input, id=workflow_id, task_queue=task_queue, create_workspace=create)
    )


async def run_view(client: AgentClient, workflow_id: str, web_ui: str | None) -> RunView:
    """The run as a front end shows it: its status, its calls' arguments and results (from its
    conversation), the schemas of the calls waiting for approval, its Web UI link."""
    overview = await asked(client.overview(workflow_id))
    status = overview.status
    calls: dict[str, dict[str, Any]] = {}
    memory = None
    if overview.export is not None:  # else the calls are shown from the stream's events alone
        kept = overview.export.treadle.config.memory
        memory = kept.namespace if kept is not None else None
        for message in overview.export.conversation.messages:
            for call in message.tool_calls:
                calls.setdefault(call.id, {})["arguments"] = _json_or_text(call.arguments)
            if message.role == "tool" and message.tool_call_id:
                text = message.content or ""
                calls.setdefault(message.tool_call_id, {})["result"] = text[:RESULT_CHARS]
    schemas = {}
    for pending in status.pending_approvals:
        spec = catalogue.TOOLS.get(pending.tool)
        if spec is not None:
            schemas[pending.tool] = spec.json_schema()
    namespace = client.namespace
    return RunView(
        id=workflow_id,
        status=status.model_dump(mode="json"),
        progress=status.progress.describe() if status.progress is not None else None,
        calls=calls,
        schemas=schemas,
        web_ui=f"{web_ui}/namespaces/{namespace}/workflows/{workflow_id}" if web_ui else None,
        memory=memory,
    )


async def decided(
    client: AgentClient, workflow_id: str, decision: Approve | Reject | Modify | Guide
) -> DecisionTaken:
    """Approve, reject, modify or guide, as the run's ``decide`` update."""
    if isinstance(decision, Approve):
        taking = client.approve(
            workflow_id, call_id=decision.call_id, decided_by=decision.decided_by
        )
    elif isinstance(decision, Reject):
        taking = client.reject(
            workflow_id, decision.reason, call_id=decision.call_id, decided_by=decision.decided_by
        )
    elif isinstance(decision, Modify):
        taking = client.modify(
            workflow_id,
            decision.arguments,
            call_id=decision.call_id,
            tool=decision.tool,
            decided_by=decision.decided_by,
        )
    else:
        taking = client.guide(
            workflow_id,
            decision.guidance,
            halt=decision.halt,
            reason=decision.reason,
            child=decision.child,
            decided_by=decision.decided_by,
        )
    taken = await asked(taking)
    return DecisionTaken(
        done=taken.done,
        call_id=taken.call_id,
        tool=taken.tool,
    )


async def answer(client: AgentClient, workflow_id: str, request: Answer) -> Answered:
    """Answer the run's client query, or decline it (its kind is read from the run)."""
    query = await asked(
        client.answer_query(
            workflow_id,
            request.query_id,
            request.content,
            declined=request.declined,
            decided_by=request.decided_by,
        )
    )
    return Answered(done="declined" if request.declined else "answered", query_id=query.id)


_MET: dict[str, Literal["queued", "steered", "interrupting"]] = {
    "queue": "queued",
    "steer": "steered",
    "interrupt": "interrupting",
}
"""How a message met the running turn, by the policy that took it."""


async def send(
    client: AgentClient, workflow_id: str, text: str, message_id: str | None, mode: str | None
) -> Sent:
    receipt = await asked(client.send(workflow_id, text, update_id=message_id, mode=mode))
    done: Literal["sent", "queued", "steered", "interrupting"] = (
        "queued" if receipt.queued else "sent"
    )
    if receipt.mode is not None:
        done = _MET.get(receipt.mode.value, "queued")
    return Sent(done=done, position=receipt.position, step=receipt.step)


def _json_or_text(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
