"""A fork: a new run or thread that goes on from step N of another (``treadle fork``).

Its conversation is the original's up to the end of step N by reference to the stored record
(``ForkPoint``: the head the next step's model call sent; no message is copied), optionally
followed by a new user message; its workspace is step N's snapshot (the client checks it out);
its config is the original's unless the caller gives another. It starts in Planning at step N,
so its first model call is step N + 1's with what the original's was, plus the new message.
The original is never touched: it is only read (its history and the store).

Pure: the client builds the fork's input and run here, and starts it with the run as its
``resume`` (as ``treadle import`` does).
"""

from __future__ import annotations

from datetime import datetime

from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    ForkOrigin,
    ForkPoint,
    Turn,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.state import AgentRun

__all__ = ["fork"]


def fork(
    original: AgentInput,
    origin: str,
    at: ForkPoint,
    *,
    workspace: str,
    snapshot: str | None,
    now: datetime,
    message: str | None = None,
    model: str | None = None,
    config: AgentConfig | None = None,
) -> tuple[AgentInput, AgentRun]:
    """The fork's input (the original's, with its lineage, workspace and any override) and the
    run it starts as."""
    agent_input = original.model_copy(
        update={
            "workspace": workspace,
            "resume": None,
            "stream": None,
            "forked_from": ForkOrigin(workflow_id=origin, step=at.step),
            "model": model or original.model,
            "config": config or original.config,
        }
    )
    run = AgentRun.begin(agent_input, now)
    history = (Turn(step=at.step, user_message=message),) if message else ()
    # model_copy: the ownership rules guard a running loop's states, not a fork's making.
    memory = run.memory.model_copy(
        update={
            "history": history,
            "step": at.step,
            "turn_start_step": at.step,
            "conversation_head": at.conversation,
            "conversation_sent": at.conversation_messages,
            "conversation_turns": 0,
            "history_base": at.conversation_messages,
            "turns_stored": at.step,
            "view_from": at.view_from,
            "view_summary_at": at.view_summary_at,
        }
    )
    run = run.model_copy(
        update={"memory": memory, "state": State.PLANNING, "workspace_snapshot": snapshot}
    )
    said = f"; then the message: {message[:200]}" if message else ""
    run.record(State.PLANNING, "Forked", f"from {origin} at step {at.step}{said}", now)
    return agent_input, run
