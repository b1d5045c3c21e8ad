"""Threads (Loom): which messages and closes a thread takes (pure checks for the ``send`` and
``close`` update validators: a refusal rejects the update before anything reaches history),
and a thread in Loom's JSON shape, exported and rebuilt."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from pydantic_core import PydanticSerializationError
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.models import (
    RESULT_TRACE_ENTRIES,
    AgentInput,
    LoomAgentState,
    LoomConversation,
    StoredRecord,
    ThreadExport,
    ThreadSettings,
    ToolOutcome,
    Trace,
    Turn,
    UserMessage,
)
from treadle.workflows.agent.messages.state_machine import Event, State
from treadle.workflows.agent.parts import midturn, status
from treadle.workflows.agent.parts.state import AgentRun


def _refuse(why: str) -> ApplicationError:
    return ApplicationError(why, type="MessageRefused", non_retryable=True)


def check_message(run: AgentRun, message: UserMessage) -> None:
    """A thread that is open takes a non-empty message that can be written to history."""
    if not run.input.thread:
        raise _refuse("this run is not a thread: it ends at its answer (start one with --thread)")
    if run.thread.closing or run.state.is_terminal:
        raise _refuse("the thread is closed")
    if not message.text.strip():
        raise _refuse("the message is empty")
    try:
        message.model_dump_json()
    except PydanticSerializationError:
        raise _refuse("the message contains text that is not valid Unicode") from None


async def wait_for_user(run: AgentRun, hand_over_if_due: Callable[[], Awaitable[None]]) -> Event:
    """WaitingForUserInput (Loom): a thread between turns waits durably for its user's next
    message (a timer for the idle timeout, no polling), then starts the next turn. Waiting is
    a safe point to continue as new (``hand_over_if_due``)."""
    m = run.memory
    left = midturn.carry_over(run)
    if left:
        run.record(
            run.state,
            "MessagesCarried",
            f"{left} steered message(s) open the next turn",
            workflow.now(),
        )
    if not run.thread.inbox and not run.thread.closing:
        await hand_over_if_due()
        if run.thread.idle_since is None:
            run.thread.idle_since = workflow.now()
        workflow.set_current_details(status.details(run, workflow.now()))
        idle = run.input.config.thread_idle_timeout_seconds
        waited = (workflow.now() - run.thread.idle_since).total_seconds()
        try:
            await workflow.wait_condition(
                lambda: bool(run.thread.inbox) or run.thread.closing,
                timeout=max(idle - waited, 0.001),
            )
        except TimeoutError:
            run.record(run.state, "IdleTimeout", f"no message for {idle:g}s", workflow.now())
            return Event.IDLE_TIMEOUT
    if not run.thread.inbox:
        return Event.THREAD_CLOSED
    text = run.thread.inbox.pop(0)
    run.thread.idle_since = None
    m.history = (*m.history, Turn(step=m.step, user_message=text))
    m.turn_start_step = m.step
    return Event.USER_MESSAGE


def check_close(run: AgentRun) -> None:
    if not run.input.thread:
        raise _refuse("this run is not a thread (cancel a run instead)")
    if run.thread.closing or run.state.is_terminal:
        raise _refuse("the thread is already closed")


# --------------------------------------------------------------------------------------------
# Loom's JSON shape: export a thread, and rebuild one from it.
# --------------------------------------------------------------------------------------------

LOOM_KIND: dict[State, str] = {
    State.IDLE: "waiting_for_user_input",
    State.WAITING_FOR_USER_INPUT: "waiting_for_user_input",
    State.DONE: "waiting_for_user_input",
    State.PLANNING: "calling_llm",
    State.OBSERVING: "processing_llm_response",
    State.REFLECTING: "processing_llm_response",
    State.RECOVERING: "processing_llm_response",
    State.PHASE_TRANSITION: "processing_llm_response",
    State.ACTING: "executing_tools",
    State.PARALLEL_ACTING: "executing_tools",
    State.WAITING_FOR_HUMAN: "executing_tools",
    State.WAITING_FOR_CLIENT: "executing_tools",
    State.WAITING: "executing_tools",
    State.POST_TOOLS_HOOK: "post_tools_hook",
    State.ERROR: "error",
    State.HALTED: "error",
    State.CANCELLED: "shutting_down",
}
"""Our state -> Loom's ``agent_state.kind`` (Loom has fewer states; see the README's table)."""

NOT_RUN = (
    "ERROR: not run: the thread was imported before this call ran; call it again if it is "
    "still needed"
)


class ImportRefused(ValueError):
    """A thread file whose conversation cannot be continued (a clear, one-line reason)."""


EXPORT_INLINE_CHARS = 1_000_000
"""A conversation longer than this is answered by reference to its record (a query's answer
must stay well under the 4 MB a gRPC message may carry)."""


def export(run: AgentRun) -> ThreadExport:
    """The thread as Loom's ``agent_state`` + ``conversation.messages``. Contents stored by
    reference are previews here (the workflow never reads the store), and a conversation the
    store's record holds is named by ``record`` (see ``ThreadExport``): ``treadle export``
    reads both back from the store."""
    m = run.memory
    pending = m.current_tool_calls if run.state in (State.WAITING_FOR_HUMAN, State.ACTING) else ()
    messages = m.build_messages()
    record = None
    if m.conversation_head is not None:
        after = len(m.messages_of(m.history[m.conversation_turns :]))
        record = StoredRecord(head=m.conversation_head, messages=m.conversation_sent, after=after)
        if m.turns_stored or sum(len(x.content or "") for x in messages) > EXPORT_INLINE_CHARS:
            # The run no longer holds (or should not answer with) the whole conversation:
            # the record does; here only what it does not hold yet.
            messages = messages[:2] + messages[len(messages) - after :]
    return ThreadExport(
        agent_state=LoomAgentState(
            kind=LOOM_KIND[run.state],
            pending_tool_calls=pending,
        ),
        conversation=LoomConversation(messages=messages),
        treadle=ThreadSettings(
            model=run.input.model, task_type=run.input.task_type, config=run.input.config
        ),
        record=record,
        workspace=run.workspace_snapshot,
    )


def rebuild(thread: ThreadExport, workspace: str, now: datetime) -> tuple[AgentInput, AgentRun]:
    """A new thread's input, carrying the exported conversation as its memory.

    The first user message is the task; each later user message, assistant reply and tool
    result becomes a turn. A call that never got its result is answered with an ``ERROR:`` (it
    is not run again blindly). The thread then waits for its user if it last answered, else the
    model answers what is open.
    """
    if thread.record is not None:
        raise ImportRefused(
            "it names the thread's record in the store instead of holding its conversation "
            "(the export query's answer): write the file with treadle export"
        )
    messages = list(thread.conversation.messages)
    system = messages.pop(0).content if messages[0].role == "system" else None
    if not messages or messages[0].role != "user" or not messages[0].content:
        raise ImportRefused("the conversation must start with the user's first message")
    task = messages.pop(0).content or ""
    settings = thread.treadle
    config = settings.config
    if system and system != config.system_prompt:
        config = config.model_copy(update={"system_prompt": system})
    agent_input = AgentInput(
        task=task,
        model=settings.model,
        workspace=workspace,
        task_type=settings.task_type,
        thread=True,
        config=config,
    )
    turns: list[Turn] = []
    step = 0
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role == "user":
            turns.append(Turn(step=step, user_message=message.content or ""))
        elif message.role == "assistant":
            step += 1
            results: dict[str, ToolOutcome] = {}
            while index < len(messages) and messages[index].role == "tool":
                result = messages[index]
                index += 1
                call = next((c for c in message.tool_calls if c.id == result.tool_call_id), None)
                if call is None:
                    raise ImportRefused(
                        f"a tool result answers {result.tool_call_id!r}, which no call asked for"
                    )
                text = result.content or ""
                results[call.id] = ToolOutcome.of(call, text, success=not text.startswith("ERROR:"))
            outcomes = tuple(
                results.get(c.id) or ToolOutcome.of(c, NOT_RUN, success=False)
                for c in message.tool_calls
            )
            turns.append(Turn(step=step, assistant_text=message.content, outcomes=outcomes))
        else:
            raise ImportRefused(f"message {index + 1} ({message.role}) is out of place")
    run = AgentRun.begin(agent_input, now)
    last = turns[-1] if turns else None
    answered = last is not None and last.assistant_text is not None and not last.outcomes
    memory = run.memory.model_copy(
        update={
            "history": tuple(turns),
            "step": step,
            "turn_start_step": step,
            "final_answer": last.assistant_text if answered and last else None,
        }
    )
    # model_copy: the ownership rules guard a running loop's states, not a thread's import.
    run = run.model_copy(
        update={
            "memory": memory,
            "state": State.WAITING_FOR_USER_INPUT if answered else State.PLANNING,
            "workspace_snapshot": thread.workspace,
        }
    )
    run.record(run.state, "Imported", f"{len(thread.conversation.messages)} messages", now)
    return agent_input, run


def readable_when_closed(run: AgentRun, stream_end: int) -> dict[str, Any]:
    """What a run's result carries so the run is read when closed, without a worker to replay
    it: its last status, its trace's tail and (its conversation in the store) its export. A
    sub-agent's result goes to its parent's history, which keeps its own account of it."""
    subagents = run.input.config.subagents
    if subagents is not None and subagents.depth > 0:
        return {}
    dropped = max(0, len(run.trace) - RESULT_TRACE_ENTRIES)
    return {
        "final": status.status(run, workflow.now(), stream_end, None),
        "trace": Trace(entries=tuple(run.trace[dropped:]), earlier=run.trace_earlier + dropped),
        "export": export(run) if run.memory.conversation_head is not None else None,
    }
