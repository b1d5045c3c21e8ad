"""Treadle as an MCP server (``treadle serve mcp``): an MCP client — Claude Desktop, an IDE,
another agent — starts runs and threads, follows them, answers their questions and decides their
calls, through ``AgentClient`` and the HTTP API's own checks (``treadle.web.api.actions``), so
it meets the same rules and refusals as every other client.

Tools: ``start_run``, ``run_status``, ``follow_run`` (the events after an offset, waiting a
little for new ones), ``approve``, ``reject``, ``answer``, ``send_message``, ``list_runs``.
Over stdio it is the client's own process; over streamable HTTP it sits behind the same guard
as the API (``treadle.web.guard``: a token off loopback, loopback host names, no other origin
unless named) with the same body limit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from starlette.types import ASGIApp

from treadle.client import AgentClient, AgentClientError
from treadle.stream import StreamItem
from treadle.web.api import MAX_BODY_BYTES, actions
from treadle.web.api.bodies import Answer, StartRun
from treadle.web.guard import Guard, check_access, cors
from treadle.web.http import HttpError
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import AgentConfig

__all__ = ["mcp_http_app", "mcp_server"]

T = TypeVar("T")

FOLLOW_WAIT_SECONDS = 20.0
"""How long ``follow_run`` waits for a new event by default (an MCP call should answer)."""
FOLLOW_MAX_EVENTS = 200
_STOP_AT = {"approval_needed", "client_query", "guidance_needed", "ended", "answer"}
"""Events after which ``follow_run`` answers at once: someone may have to act."""

READ = ToolAnnotations(read_only_hint=True)
ACT = ToolAnnotations(read_only_hint=False, destructive_hint=False)


async def _tool(doing: Awaitable[T]) -> T:
    """The call's answer; a refusal as the tool's error, with its reason."""
    try:
        return await doing
    except HttpError as exc:
        raise ToolError(exc.message) from None


def mcp_server(agents: AgentClient, *, task_queue: str, model: str) -> MCPServer[Any]:
    """The MCP server over ``agents``; runs it starts go to ``task_queue``, with ``model`` when
    ``start_run`` names none (``treadle serve mcp``: its ``--model``, else the queue's)."""
    default_model = model
    server: MCPServer[Any] = MCPServer(
        "treadle",
        instructions=(
            "Durable AI agent runs on Temporal. start_run starts one (a thread with "
            "thread=true); follow_run reads what it does; when it waits for a person, approve or "
            "reject its call, or answer its question."
        ),
        log_level="WARNING",
    )

    @server.tool(annotations=ACT)
    async def start_run(
        task: str,
        model: str | None = None,
        thread: bool = False,
        require_approval: list[str] | None = None,
        workspace: str | None = None,
        max_steps: int | None = None,
    ) -> dict[str, Any]:
        """Start an agent run (a thread with thread=true: it waits for the next message after
        each answer). model: provider:model, default the server's. require_approval: tools
        whose calls wait for a person (write_file...)."""
        config: dict[str, Any] = {"require_approval": require_approval or []}
        if max_steps is not None:
            config["max_steps"] = max_steps
        try:
            request = StartRun(
                task=task,
                model=model,
                thread=thread,
                workspace=workspace,
                config=AgentConfig.model_validate(config),
            )
        except ValueError as exc:
            raise ToolError(f"invalid run: {exc}") from None
        started = await _tool(actions.start(agents, task_queue, request, default_model))
        return started.model_dump(mode="json")

    @server.tool(annotations=READ)
    async def run_status(run_id: str) -> dict[str, Any]:
        """The run's state, step, task, the calls and question waiting, its answer or error."""
        status = await _tool(actions.asked(agents.status(run_id)))
        return status.model_dump(
            mode="json",
            include={
                "state",
                "step",
                "task",
                "thread",
                "pending_approvals",
                "client_query",
                "final_answer",
                "error",
                "stuck",
                "queued_messages",
            },
            exclude_none=True,
        )

    @server.tool(annotations=READ)
    async def follow_run(
        run_id: str, after: int = 0, wait_seconds: float = FOLLOW_WAIT_SECONDS
    ) -> dict[str, Any]:
        """The run's events from offset `after` on; waits up to wait_seconds for new ones and
        answers at once when the run needs someone or ends. Call again with after=next."""
        events: list[dict[str, Any]] = []
        next_offset = after
        over = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, min(wait_seconds, 60.0))):
                async for item in _watch(agents, run_id, after):
                    next_offset = item.offset + 1
                    if not isinstance(item.value, AgentEvent):
                        continue  # the model's tokens: the model event carries its text
                    events.append(_event(item))
                    over = item.value.kind == "ended"
                    if item.value.kind in _STOP_AT or len(events) >= FOLLOW_MAX_EVENTS:
                        break
        return {"events": events, "next": next_offset, "over": over}

    @server.tool(annotations=ACT)
    async def approve(run_id: str, call_id: str | None = None) -> dict[str, Any]:
        """Approve the call waiting (call_id: needed when several wait)."""
        decided = await _tool(
            actions.asked(agents.approve(run_id, call_id=call_id, decided_by="mcp"))
        )
        return {"done": decided.done, "call_id": decided.call_id, "tool": decided.tool}

    @server.tool(annotations=ACT)
    async def reject(run_id: str, reason: str, call_id: str | None = None) -> dict[str, Any]:
        """Reject the call waiting; the model reads the reason."""
        decided = await _tool(
            actions.asked(agents.reject(run_id, reason, call_id=call_id, decided_by="mcp"))
        )
        return {"done": decided.done, "call_id": decided.call_id, "tool": decided.tool}

    @server.tool(annotations=ACT)
    async def answer(run_id: str, query_id: str, content: str) -> dict[str, Any]:
        """Answer the question the run asks (query_id from run_status's client_query)."""
        given = Answer(query_id=query_id, content=content, decided_by="mcp")
        answered = await _tool(actions.answer(agents, run_id, given))
        return answered.model_dump(mode="json")

    @server.tool(annotations=ACT)
    async def send_message(run_id: str, text: str, mode: str | None = None) -> dict[str, Any]:
        """Send a thread its next message; mode (queue, steer, interrupt, reject) says what it
        does while a turn runs (default: the thread's own policy)."""
        sent = await _tool(actions.send(agents, run_id, text, None, mode))
        return sent.model_dump(mode="json")

    @server.tool(annotations=READ)
    async def list_runs(state: str | None = None) -> list[dict[str, Any]]:
        """The newest runs and threads; state: WaitingForHuman, WaitingForClient,
        WaitingForUserInput, running, done or error."""
        rows = await _tool(actions.asked(agents.list_runs(state)))
        return [row.model_dump(mode="json", exclude_none=True) for row in rows]

    return server


async def _watch(agents: AgentClient, run_id: str, after: int) -> AsyncIterator[StreamItem]:
    """The run's items from ``after``; the client's errors as the tool's."""
    stream = agents.watch(run_id, from_offset=after)
    async with contextlib.aclosing(stream):
        try:
            async for item in stream:
                yield item
        except AgentClientError as exc:
            raise ToolError(actions.http_error(exc).message) from None


def _event(item: StreamItem) -> dict[str, Any]:
    event = item.value
    assert isinstance(event, AgentEvent)
    shown = {"offset": item.offset, "kind": event.kind, "step": event.step, "state": event.state,
             "text": event.text, "tool": event.tool, "call_id": event.call_id}  # fmt: skip
    return {k: v for k, v in shown.items() if v not in (None, "")}


def mcp_http_app(
    server: MCPServer[Any],
    *,
    token: str | None,
    loopback: bool,
    origins: Sequence[str] = (),
    max_body: int = MAX_BODY_BYTES,
) -> ASGIApp:
    """The server over streamable HTTP at ``/mcp``, behind the API's guard and body limit.
    Its session manager must run around it (``server.session_manager.run()``)."""
    check_access(token, loopback)
    app = server.streamable_http_app(max_request_body_size=max_body)
    guarded = Guard(app, token=token, loopback=loopback, origins=origins, max_body=max_body)
    return cors(guarded, origins)
