"""What the page reads of one run and what it asks of it, through ``AgentClient``: its status
and conversation to read; ``decide`` (approve / reject / modify / guide), ``answer``, ``send``
and ``close`` to act. An update's validator refuses before anything reaches the run's history,
so a refusal comes back to the page at once (409, its reason).

New arguments for a call are checked against the tool's schema before they are sent
(``AgentClient.modify``; the run checks them again); a tool the catalogue does not know (an MCP
server's) is checked by the run alone. The client's errors become the page's answers in one
place (``http_error``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from pydantic import ValidationError

from treadle.client import (
    AgentClient,
    AgentClientError,
    InvalidRequest,
    NoStream,
    NoWorkerAnswered,
    Refused,
    RunCannotAnswer,
    RunNotFound,
    ThreadUnavailable,
    check_arguments,
)
from treadle.codec import EncryptionError
from treadle.web.http import HttpError
from treadle.workflows.agent.messages import catalogue
from treadle.workflows.agent.messages.events import MAX_DECLINE_CHARS, ClientAnswer
from treadle.workflows.agent.messages.models import Decision
from treadle.workflows.base import describe_errors

__all__ = ["answer", "asked", "close", "decide", "http_error", "run_view", "send"]

T = TypeVar("T")

RESULT_CHARS = 2_000
"""A tool result shown on the page is cut to this (the run's export holds previews anyway)."""


def http_error(exc: AgentClientError | EncryptionError) -> HttpError:
    """The page's answer to one of the client's errors."""
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
    """What ``asking`` (a call of the client) answers; its error as the page's."""
    try:
        return await asking
    except (AgentClientError, EncryptionError) as exc:
        raise http_error(exc) from None


async def run_view(client: AgentClient, workflow_id: str, web_ui: str | None) -> dict[str, Any]:
    """The run as the page shows it: its status, its calls' arguments and results (from its
    conversation), the schemas of the calls waiting for approval, its Web UI link."""
    overview = await asked(client.overview(workflow_id))
    status = overview.status
    calls: dict[str, dict[str, Any]] = {}
    if overview.export is not None:  # else the calls are shown from the stream's events alone
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
    return {
        "id": workflow_id,
        "status": status.model_dump(mode="json"),
        "progress": status.progress.describe() if status.progress is not None else None,
        "calls": calls,
        "schemas": schemas,
        "web_ui": f"{web_ui}/namespaces/{namespace}/workflows/{workflow_id}" if web_ui else None,
    }


async def decide(client: AgentClient, workflow_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Approve, reject, modify (``arguments_text``: JSON checked here first), or guide."""
    action = body.get("action")
    try:
        decision = Decision(
            action=action,  # checked by the model
            call_id=body.get("call_id") or None,
            reason=(body.get("reason") or "").strip() or None,
            arguments=_new_arguments(body.get("arguments_text")) if action == "modify" else None,
            guidance=(body.get("guidance") or "").strip() or None,
            halt=bool(body.get("halt")) if action == "guide" else None,
        )
    except ValidationError as exc:
        raise HttpError(400, describe_errors(exc)) from None
    if decision.arguments is not None:
        try:
            check_arguments(str(body.get("tool") or ""), decision.arguments)
        except InvalidRequest as exc:
            raise HttpError(400, str(exc)) from None
    decided = await asked(client.decide(workflow_id, decision))
    if decided.action == "guide":
        return {"done": decided.done}
    return {"done": decided.done, "call_id": decided.call_id}


def _new_arguments(text: Any) -> dict[str, Any]:
    try:
        arguments = json.loads(str(text or ""))
    except json.JSONDecodeError as exc:
        raise HttpError(
            400, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(arguments, dict):
        raise HttpError(400, "the arguments must be a JSON object")
    return arguments


async def answer(client: AgentClient, workflow_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Answer the run's client query (``content``), or decline it (``declined``: why)."""
    declined = body.get("declined")
    try:
        reply = ClientAnswer(
            query_id=str(body.get("query_id") or ""),
            kind=body.get("kind"),  # checked by the model
            content=None if declined else str(body.get("content") or ""),
            declined=str(declined)[:MAX_DECLINE_CHARS] if declined else None,
        )
    except ValidationError as exc:
        raise HttpError(400, describe_errors(exc)) from None
    query = await asked(client.answer(workflow_id, reply))
    return {"done": "declined" if declined else "answered", "query_id": query.id}


async def send(client: AgentClient, workflow_id: str, body: dict[str, Any]) -> dict[str, Any]:
    receipt = await asked(client.send(workflow_id, str(body.get("text") or "")))
    return {"done": "queued" if receipt.queued else "sent", "position": receipt.position}


async def close(client: AgentClient, workflow_id: str) -> dict[str, Any]:
    status = await asked(client.close(workflow_id))
    return {"done": "closing", "queued": status.queued_messages}


def _json_or_text(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
