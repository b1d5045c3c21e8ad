"""Treadle as an A2A agent (``treadle serve a2a``), on the official ``a2a-sdk``: an agent card,
``message/send`` and ``message/stream`` mapped onto runs, through ``AgentClient`` and the HTTP
API's own checks.

An A2A task is one run (workflow id ``a2a-<task id>``): the task's first message is the run's
task. While the run waits for a person (a call to approve) or for its client (a question), the
task is ``input-required`` with what waits in words; the next message on the task answers it —
``approve``, anything else rejects the call with that text as the reason, or it is the question's
answer. The run's end completes the task, its answer as the artifact (or fails it with the
error). Cancelling the task cancels the run. It sits behind the API's guard (token off loopback,
loopback host names, no other origin unless named, the body limit).

A2A contexts onto Treadle threads (one context, one conversation) is the next step; today a
context's tasks are separate runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette
from starlette.types import ASGIApp

from treadle.client import AgentClient
from treadle.client.describe import describe_query
from treadle.web.api import MAX_BODY_BYTES, actions
from treadle.web.api.bodies import StartRun
from treadle.web.guard import Guard, check_access, cors
from treadle.web.http import HttpError
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import AgentConfig

__all__ = ["RunExecutor", "a2a_app", "agent_card"]


def agent_card(url: str) -> AgentCard:
    """The agent card: a Treadle run per task, streaming, text in and out."""
    return AgentCard(
        name="Treadle",
        description=(
            "Durable AI agent runs on Temporal: give it a task; it asks for approval of the calls "
            "that need it (input-required: reply 'approve', or why not) and answers."
        ),
        version="0.1.0",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="run",
                name="Run an agent task",
                description="A task for a durable agent that reads and writes its workspace",
                tags=["agent", "durable", "temporal"],
                examples=["Write notes.md about this project."],
            )
        ],
    )


class RunExecutor(AgentExecutor):
    """Each A2A task a run; its waits ``input-required``; its end the task's."""

    def __init__(
        self,
        agents: AgentClient,
        *,
        task_queue: str,
        model: str,
        require_approval: Sequence[str] = ("write_file", "edit_file", "run_command"),
        workspace: str | None = None,
    ) -> None:
        self.agents = agents
        self.task_queue = task_queue
        self.model = model
        self.require_approval = tuple(require_approval)
        self.workspace = workspace
        self._offsets: dict[str, int] = {}
        """Where each run's stream was read to (a task resumed goes on from there)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        run_id = f"a2a-{task_id}"
        text = context.get_user_input()
        try:
            if context.current_task is None:
                history = [context.message] if context.message is not None else []
                await event_queue.enqueue_event(
                    new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
                )
                config = AgentConfig(require_approval=self.require_approval)
                request = StartRun(
                    task=text, model=self.model, id=run_id, workspace=self.workspace, config=config
                )
                await actions.start(self.agents, self.task_queue, request)
            else:
                await self._reply(run_id, text)
        except HttpError as exc:
            message = updater.new_agent_message([new_text_part(exc.message)])
            if context.current_task is None:
                await updater.failed(message)
            else:
                await updater.requires_input(message)  # still waiting: say why not, ask again
            return
        await updater.start_work()
        await self._follow(run_id, updater)

    async def _reply(self, run_id: str, text: str) -> None:
        """The person's answer to what the run waits for."""
        status = await actions.asked(self.agents.status(run_id))
        if status.pending_approvals:
            call = status.pending_approvals[0].call_id
            if text.strip().lower().rstrip(".!") in ("approve", "approved", "yes", "ok"):
                await actions.asked(self.agents.approve(run_id, call_id=call, decided_by="a2a"))
            else:
                reason = text.strip() or "rejected"
                await actions.asked(
                    self.agents.reject(run_id, reason, call_id=call, decided_by="a2a")
                )
        elif status.client_query is not None:
            query = status.client_query.id
            await actions.asked(self.agents.answer_query(run_id, query, text, decided_by="a2a"))
        else:
            raise HttpError(409, f"the run waits for nothing from you now ({status.state.value})")

    async def _follow(self, run_id: str, updater: TaskUpdater) -> None:
        """Read the run until it needs someone (input-required) or ends (the task's end)."""
        stream = self.agents.watch(run_id, from_offset=self._offsets.get(run_id, 0))
        async with contextlib.aclosing(stream):
            async for item in stream:
                self._offsets[run_id] = item.offset + 1
                event = item.value
                if not isinstance(event, AgentEvent) or event.subagent is not None:
                    continue
                asking = _asking(event)
                if asking is not None:
                    await updater.requires_input(updater.new_agent_message([new_text_part(asking)]))
                    return
                if event.kind == "ended":
                    if event.state == "Done":
                        await updater.add_artifact([new_text_part(event.text)], name="answer")
                        await updater.complete()
                    else:
                        why = f"the run ended {event.state}: {event.text}"
                        await updater.failed(updater.new_agent_message([new_text_part(why)]))
                    return

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        with contextlib.suppress(HttpError):
            await actions.asked(self.agents.cancel(f"a2a-{context.task_id}"))
        await updater.cancel()


def _asking(event: AgentEvent) -> str | None:
    """What the run asks of a person, in words; ``None`` for an event that asks nothing."""
    if event.kind == "approval_needed":
        return (
            f"The run wants to call {event.text} (call {event.call_id}). Reply 'approve', or "
            "why not (the model reads it)."
        )
    if event.kind == "client_query":
        asked = describe_query(event.query) if event.query is not None else event.text
        return f"The run asks: {asked}. Reply with the answer."
    if event.kind == "guidance_needed":
        return f"The run is stuck: {event.text}."
    return None


def a2a_app(
    agents: AgentClient,
    *,
    url: str,
    task_queue: str,
    model: str,
    token: str | None = None,
    loopback: bool = True,
    origins: Sequence[str] = (),
    workspace: str | None = None,
) -> tuple[ASGIApp, AgentCard]:
    """The agent's app (card at ``/.well-known/agent-card.json``, JSON-RPC at ``/``) behind the
    API's guard, and its card (whose interface URL a server on port 0 sets once it listens)."""
    check_access(token, loopback)
    card = agent_card(url)
    executor = RunExecutor(agents, task_queue=task_queue, model=model, workspace=workspace)
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    routes: list[Any] = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
    app = Guard(
        Starlette(routes=routes),
        token=token,
        loopback=loopback,
        origins=origins,
        max_body=MAX_BODY_BYTES,
    )
    return cors(app, origins), card
