"""Treadle as an A2A agent (``treadle serve a2a``), on the official ``a2a-sdk``: an agent card,
``message/send`` and ``message/stream`` mapped onto threads, through ``AgentClient`` and the HTTP
API's own checks.

An A2A **context** is one Treadle thread (workflow id ``a2a-<context id>``): the first message of
a context starts it, and each later message of the context that opens a new task is the thread's
next message (its ``send`` update, the A2A message id its update id: a message sent twice is
one). A task is one turn: its answer is the task's artifact, and the thread waits, durably, for
the context's next message, with everything said before in its conversation. While the turn
waits for a person (a call to approve) or for its client (a question), the task is
``input-required`` with what waits in words; the next message on the task answers it —
``approve``, anything else rejects the call with that text as the reason, or it is the
question's answer. One task of a context works at a time: a new task while another one still
works or waits is rejected, saying which to answer (``mode: reject``). A thread that ends (an
error, cancelled) fails the task. Cancelling a task cancels its context's thread. It sits behind
the API's guard (token off loopback, loopback host names, no other origin unless named, the body
limit).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
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

from treadle.client import AgentClient, AgentClientError, RunNotFound
from treadle.client.describe import describe_query
from treadle.web.api import MAX_BODY_BYTES, actions
from treadle.web.api.bodies import StartRun
from treadle.web.guard import Guard, check_access, cors
from treadle.web.http import HttpError
from treadle.workflows.agent.messages.events import MAX_EVENT_TEXT, AgentEvent
from treadle.workflows.agent.messages.models import AgentConfig, MidTurn

__all__ = ["ThreadExecutor", "a2a_app", "agent_card"]

MESSAGE_PREFIX = 200
"""How much of a task's message identifies it on the thread's stream (a ``message`` event
carries its first 2,000 characters)."""


def agent_card(url: str) -> AgentCard:
    """The agent card: a Treadle thread per context, a turn per task, streaming, text in and
    out."""
    return AgentCard(
        name="Treadle",
        description=(
            "Durable AI agent threads on Temporal. Each context is one conversation (a Treadle "
            "thread): a new message in the same context continues it, with everything said "
            "before. A task is one turn; it asks for approval of the calls that need it "
            "(input-required: reply 'approve', or why not) and answers. One task of a context "
            "works at a time."
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
                id="converse",
                name="Work on a conversation's tasks",
                description=(
                    "A durable agent that reads and writes its workspace; the messages of one "
                    "context are one conversation it remembers"
                ),
                tags=["agent", "durable", "temporal", "conversation"],
                examples=["Write notes.md about this project.", "Now add the tests to it."],
            )
        ],
    )


@dataclass
class _Turn:
    """Where a task's turn is read from the thread's stream."""

    thread_id: str
    offset: int
    """The stream's offset to read on from."""
    awaited: str | None
    """The start of the task's message until the thread's stream shows it taken (its
    ``message`` event); ``None`` once it has (or the message started the thread): from then on
    the next answer is the task's."""

    def taken_by(self, event: AgentEvent) -> bool:
        """``event`` is the thread taking the task's message."""
        awaited = self.awaited
        return awaited is not None and event.kind == "message" and event.text.startswith(awaited)


class ThreadExecutor(AgentExecutor):
    """Each A2A context a thread, each task a turn; its waits ``input-required``; its answer
    the task's."""

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
        self._turns: dict[str, _Turn] = {}
        """Each task's turn, by task id (a task resumed reads on from where it stopped)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        thread_id = f"a2a-{context_id}"
        text = context.get_user_input()
        first = context.current_task is None
        try:
            if first:
                history = [context.message] if context.message is not None else []
                await event_queue.enqueue_event(
                    new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
                )
                message_id = context.message.message_id if context.message is not None else None
                self._turns[task_id] = await self._open(thread_id, text, message_id)
            else:
                await self._reply(thread_id, text)
                if task_id not in self._turns:  # a task this server did not open (restarted)
                    status = await actions.asked(self.agents.status(thread_id))
                    self._turns[task_id] = _Turn(thread_id, status.stream_offset, awaited=None)
        except HttpError as exc:
            message = updater.new_agent_message([new_text_part(exc.message)])
            if not first:
                await updater.requires_input(message)  # still waiting: say why not, ask again
            elif exc.status == 409:
                await updater.reject(message)  # the context's thread is busy, or has ended
            else:
                await updater.failed(message)
            return
        await updater.start_work()
        await self._follow(task_id, updater)

    async def _open(self, thread_id: str, text: str, message_id: str | None) -> _Turn:
        """The task's turn: the context's thread started with ``text``, or sent it as its next
        message (refused while another turn runs)."""
        try:
            status = await self.agents.status(thread_id)
        except RunNotFound:
            config = AgentConfig(require_approval=self.require_approval)
            request = StartRun(
                task=text,
                model=self.model,
                id=thread_id,
                thread=True,
                workspace=self.workspace,
                config=config,
            )
            await actions.start(self.agents, self.task_queue, request, self.model)
            return _Turn(thread_id, offset=0, awaited=None)
        except AgentClientError as exc:
            raise actions.http_error(exc) from None
        if status.state.is_terminal:
            raise HttpError(
                409, f"this context's thread has ended ({status.state.value}): start a new context"
            )
        update_id = f"a2a-{message_id}" if message_id else None
        try:
            # reject: a turn that runs (or waits for its person) is another task's
            await actions.asked(
                self.agents.send(thread_id, text, update_id=update_id, mode=MidTurn.REJECT)
            )
        except HttpError as exc:
            working = [task for task, turn in self._turns.items() if turn.thread_id == thread_id]
            if exc.status != 409 or not working:
                raise
            raise HttpError(409, f"{exc.message} (answer task {working[0]}, or wait)") from None
        return _Turn(thread_id, offset=status.stream_offset, awaited=text[:MESSAGE_PREFIX])

    async def _reply(self, thread_id: str, text: str) -> None:
        """The person's answer to what the thread's turn waits for."""
        status = await actions.asked(self.agents.status(thread_id))
        if status.pending_approvals:
            call = status.pending_approvals[0].call_id
            if text.strip().lower().rstrip(".!") in ("approve", "approved", "yes", "ok"):
                await actions.asked(self.agents.approve(thread_id, call_id=call, decided_by="a2a"))
            else:
                reason = text.strip() or "rejected"
                await actions.asked(
                    self.agents.reject(thread_id, reason, call_id=call, decided_by="a2a")
                )
        elif status.client_query is not None:
            query = status.client_query.id
            await actions.asked(self.agents.answer_query(thread_id, query, text, decided_by="a2a"))
        else:
            state = status.state.value
            raise HttpError(409, f"the thread waits for nothing from you now ({state})")

    async def _follow(self, task_id: str, updater: TaskUpdater) -> None:
        """Read the thread until the task's turn needs someone (input-required), answers (the
        task completes) or the thread ends (the task fails)."""
        turn = self._turns[task_id]
        stream = self.agents.watch(turn.thread_id, from_offset=turn.offset)
        async with contextlib.aclosing(stream):
            async for item in stream:
                turn.offset = item.offset + 1
                event = item.value
                if not isinstance(event, AgentEvent) or event.subagent is not None:
                    continue
                if turn.taken_by(event):
                    turn.awaited = None
                if event.kind == "ended":
                    why = f"the thread ended {event.state}: {event.text}"
                    await updater.failed(updater.new_agent_message([new_text_part(why)]))
                    break
                if turn.awaited is not None:
                    continue  # another message's turn, before this task's message was taken
                asking = _asking(event)
                if asking is not None:
                    await updater.requires_input(updater.new_agent_message([new_text_part(asking)]))
                    return
                if event.kind == "answer":
                    answer = await self._whole(turn.thread_id, event.text)
                    await updater.add_artifact([new_text_part(answer)], name="answer")
                    await updater.complete()
                    break
            else:  # the stream ended with neither (a thread terminated from outside)
                why = "the thread's stream ended before the turn answered"
                await updater.failed(updater.new_agent_message([new_text_part(why)]))
        del self._turns[task_id]

    async def _whole(self, thread_id: str, text: str) -> str:
        """The turn's answer: the event's text, or, when the stream cut it, the thread's."""
        if len(text) <= MAX_EVENT_TEXT:
            return text
        status = await actions.asked(self.agents.status(thread_id))
        return status.final_answer or text

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        with contextlib.suppress(HttpError):
            await actions.asked(self.agents.cancel(f"a2a-{context.context_id}"))
        self._turns.pop(context.task_id or "", None)
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
    executor = ThreadExecutor(agents, task_queue=task_queue, model=model, workspace=workspace)
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
