"""A message that arrives while a thread's turn runs: queued, steered into the turn,
interrupting it, or refused (``MidTurn``; the thread's ``mid_turn``, or the message's own
``mode``).

Nothing here loses a message or repeats an effect:

- ``queue``: the inbox, answered in order after the turn, each as a turn of its own;
- ``steer``: ``ThreadState.steering``; Planning reads it into the conversation before its next
  model call (``join_turn``); what the turn did not read before it answered opens the next
  turn (``carry_over``), before the inbox;
- ``interrupt``: as ``steer``, and the model call in flight is cut (``interrupting``): what it
  had said is kept, marked interrupted, and the step is made again with the message read.
  Tools that run finish (their effects and observations are kept); calls that wait for an
  approval are not run (``ERROR: not run``, as a rejection says);
- ``reject``: refused in the update's validator, so nothing reaches the history.

A message that arrives while the thread waits for its user starts the next turn, whatever its
mode. Pure checks and writes on ``AgentRun``; the handler and the loop call them.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.decisions import ApprovalDecision
from treadle.workflows.agent.messages.models import MidTurn, SendReceipt, Turn, UserMessage
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.state import AgentRun

__all__ = [
    "INTERRUPT_REASON",
    "carry_over",
    "check",
    "interrupted_turn",
    "join_turn",
    "mode_of",
    "take",
    "turn_runs",
]

INTERRUPT_REASON = "not run: the user's message interrupted the turn"
"""A call that waited for approval when an ``interrupt`` came: its rejection's reason."""


def turn_runs(run: AgentRun) -> bool:
    """A turn is under way (not waiting for its user, not ended)."""
    return run.state is not State.WAITING_FOR_USER_INPUT and not run.state.is_terminal


def mode_of(run: AgentRun, message: UserMessage) -> MidTurn:
    return message.mode or run.input.config.mid_turn


def check(run: AgentRun, message: UserMessage) -> None:
    """``reject``: a running turn refuses the message, with where it is."""
    if mode_of(run, message) is MidTurn.REJECT and turn_runs(run):
        raise ApplicationError(
            f"the thread is busy: a turn is running (step {run.memory.step}, "
            f"{run.state.value}); send it again once the thread answers, or with mode "
            "queue, steer or interrupt",
            type="MessageRefused",
            non_retryable=True,
        )


def take(run: AgentRun, message: UserMessage) -> tuple[SendReceipt, str]:
    """Put ``message`` where its mode says; the receipt, and the trace line saying where."""
    thread, step = run.thread, run.memory.step
    mode = mode_of(run, message)
    if not turn_runs(run) or mode is MidTurn.QUEUE:
        queued = turn_runs(run) or bool(thread.inbox)
        thread.inbox.append(message.text)
        where = f"queued at {len(thread.inbox)}" if queued else "received"
        receipt = SendReceipt(
            queued=queued,
            position=len(thread.inbox),
            state=run.state,
            mode=MidTurn.QUEUE if queued else None,
            step=step,
        )
        return receipt, where
    thread.steering.append(message.text)
    where = f"{mode.value}: joins the turn before step {step + 1}"
    if mode is MidTurn.INTERRUPT:
        thread.interrupt = True
        where += _interrupting(run)
    receipt = SendReceipt(
        queued=False, position=len(thread.steering), state=run.state, mode=mode, step=step
    )
    return receipt, where


def _interrupting(run: AgentRun) -> str:
    """What an interrupt does to the state the turn is in (the trace says it)."""
    if run.state is State.PLANNING:
        return " (the model call in flight is cut)"
    if run.state is State.WAITING_FOR_HUMAN and run.memory.pending_guidance is None:
        undecided = [p for p in run.memory.pending_approvals if p.decision is None]
        memory = run.memory
        memory.pending_approvals = tuple(
            p.model_copy(
                update={
                    "decision": ApprovalDecision.REJECTED,
                    "reason": INTERRUPT_REASON,
                    "decided_by": "interrupt",
                }
            )
            if p.decision is None
            else p
            for p in memory.pending_approvals
        )
        return f" ({len(undecided)} call(s) waiting for approval not run)"
    if run.state in (State.ACTING, State.PARALLEL_ACTING, State.POST_TOOLS_HOOK):
        return " (the running tools finish; their effects are kept)"
    return ""


def join_turn(run: AgentRun) -> tuple[str, ...]:
    """Planning, before its model call: the messages steered into the turn become part of the
    conversation (they are read now), and an interrupt is served."""
    thread, m = run.thread, run.memory
    joined = tuple(thread.steering)
    if joined:
        m.history = (*m.history, *(Turn(step=m.step, user_message=t) for t in joined))
        thread.steering.clear()
    thread.interrupt = False
    return joined


def carry_over(run: AgentRun) -> int:
    """The turn answered before reading some steered messages: they open the next turn,
    ahead of the inbox (they were meant for the turn that just answered). How many."""
    thread = run.thread
    left = len(thread.steering)
    if left:
        thread.inbox[0:0] = thread.steering
        thread.steering.clear()
    thread.interrupt = False
    return left


def interrupted_turn(run: AgentRun, said: str) -> Turn:
    """The step whose model call was cut: what the model had said so far, marked."""
    return Turn(step=run.memory.step, assistant_text=said or None, interrupted=True)
