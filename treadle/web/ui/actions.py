"""What the page reads of one run and what it asks of it, through the run's own queries and
updates: ``state`` and ``export`` to read; ``decide`` (approve / reject / modify / guide),
``answer_query``, ``send`` and ``close`` to act. An update's validator refuses before anything
reaches the run's history, so a refusal comes back to the page at once (409, its reason).

New arguments for a call are checked against the tool's schema here before they are sent (the
run checks them again); a tool the catalogue does not know (an MCP server's) is checked by the
run alone.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from treadle import closed as closed_runs
from treadle.activities import thread_turns as threads
from treadle.activities.errors import ThreadUnavailable
from treadle.cli.live.responder import cause_of
from treadle.web.http import HttpError
from treadle.workflows.agent.messages import catalogue
from treadle.workflows.agent.messages.events import MAX_DECLINE_CHARS, ClientAnswer
from treadle.workflows.agent.messages.models import AgentStatus, Decision, ThreadExport
from treadle.workflows.agent.parts.toolbox import parse_with_refs
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import describe_errors

__all__ = ["answer", "close", "decide", "run_view", "send"]

QUERY_TIMEOUT = timedelta(seconds=5)
UPDATE_TIMEOUT = timedelta(seconds=10)
RESULT_CHARS = 2_000
"""A tool result shown on the page is cut to this (the run's export holds previews anyway)."""


async def run_view(client: Client, workflow_id: str, web_ui: str | None) -> dict[str, Any]:
    """The run as the page shows it: its status, its calls' arguments and results (from the
    ``export`` query), the schemas of the calls waiting for approval, its Web UI link."""
    # A finished run is asked once per process (``treadle.closed``): each query of a closed
    # run is a replay by a worker, and the page refreshes its view as the stream ends.
    run_id = await closed_runs.closed_run(client, workflow_id)

    async def ask(what: str, query: Callable[[WorkflowHandle[Any, Any]], Awaitable[Any]]) -> Any:
        if run_id is None:
            return await query(client.get_workflow_handle(workflow_id))
        return await closed_runs.kept(client, workflow_id, run_id, ("ui", what), query)

    status: AgentStatus = await ask("state", lambda h: _query(h, AgentWorkflow.state))
    calls: dict[str, dict[str, Any]] = {}
    exported: ThreadExport | None
    try:
        exported = await ask(
            "export", lambda h: h.query(AgentWorkflow.export, rpc_timeout=QUERY_TIMEOUT)
        )
    except (RPCError, WorkflowQueryFailedError):
        exported = None  # the calls are shown from the stream's events alone
    if exported is not None:
        for message in exported.conversation.messages:
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


async def decide(client: Client, workflow_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Approve, reject, modify (``arguments_text``: JSON checked here first), or guide."""
    handle = client.get_workflow_handle(workflow_id)
    action = body.get("action")
    arguments = None
    if action == "modify":
        arguments = _new_arguments(str(body.get("tool") or ""), body.get("arguments_text"))
    try:
        decision = Decision(
            action=action,  # checked by the model
            call_id=body.get("call_id") or None,
            reason=(body.get("reason") or "").strip() or None,
            arguments=arguments,
            guidance=(body.get("guidance") or "").strip() or None,
            halt=bool(body.get("halt")) if action == "guide" else None,
        )
    except ValidationError as exc:
        raise HttpError(400, describe_errors(exc)) from None
    if action == "reject" and not decision.reason:
        raise HttpError(400, "a rejection needs a reason (the model reads it)")
    if action == "guide" and not decision.halt and not decision.guidance:
        raise HttpError(400, "give the model guidance, or halt the run")
    decided = await _update(handle, AgentWorkflow.decide, decision)
    if decided is None:
        return {"done": "halted" if decision.halt else "guided"}
    done = {"approve": "approved", "reject": "rejected", "modify": "modified"}[decision.action]
    return {"done": done, "call_id": decided.call_id}


def _new_arguments(tool: str, text: Any) -> dict[str, Any]:
    try:
        arguments = json.loads(str(text or ""))
    except json.JSONDecodeError as exc:
        raise HttpError(
            400, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(arguments, dict):
        raise HttpError(400, "the arguments must be a JSON object")
    if tool in catalogue.TOOLS:
        try:
            parse_with_refs(tool, arguments)  # a stored value's marker may stay as it is
        except catalogue.ToolArgumentsError as exc:
            raise HttpError(400, str(exc)) from None
    return arguments


async def answer(client: Client, workflow_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Answer the run's client query (``content``), or decline it (``declined``: why)."""
    handle = client.get_workflow_handle(workflow_id)
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
    query = await _update(handle, AgentWorkflow.answer_query, reply)
    return {"done": "declined" if declined else "answered", "query_id": query.id}


async def send(client: Client, workflow_id: str, body: dict[str, Any]) -> dict[str, Any]:
    handle = client.get_workflow_handle(workflow_id)
    try:
        receipt = await threads.send_message(handle, str(body.get("text") or ""))
    except ValidationError as exc:
        raise HttpError(400, f"invalid message: {describe_errors(exc)}") from None
    except ThreadUnavailable as exc:
        raise HttpError(409, str(exc)) from None
    except RPCError as exc:
        raise HttpError(404, threads.missing(workflow_id, exc)) from None
    return {"done": "queued" if receipt.queued else "sent", "position": receipt.position}


async def close(client: Client, workflow_id: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(workflow_id)
    status: AgentStatus = await _update(handle, AgentWorkflow.close, None)
    return {"done": "closing", "queued": status.queued_messages}


async def _query(handle: WorkflowHandle[Any, Any], query: Any) -> Any:
    try:
        return await handle.query(query, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise HttpError(404, f"no run with id {handle.id!r}") from None
        raise HttpError(
            503, f"the run did not answer ({exc.message}); is a worker running?"
        ) from None
    except WorkflowQueryFailedError as exc:
        raise HttpError(503, f"the run could not answer: {exc}") from None


async def _update(handle: WorkflowHandle[Any, Any], update: Any, arg: Any) -> Any:
    try:
        if arg is None:
            return await handle.execute_update(update, rpc_timeout=UPDATE_TIMEOUT)
        return await handle.execute_update(update, arg, rpc_timeout=UPDATE_TIMEOUT)
    except WorkflowUpdateFailedError as exc:
        raise HttpError(409, f"the run refused it: {cause_of(exc)}") from None
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise HttpError(404, f"no run with id {handle.id!r}") from None
        if exc.status is RPCStatusCode.DEADLINE_EXCEEDED:
            raise HttpError(503, "the run did not answer; is a worker running?") from None
        raise HttpError(409, f"the run did not take it: {exc.message}") from None


def _json_or_text(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
