"""The agent's memory and the ownership rules that keep it honest (agentsm).

Every field the loop mutates has declared writers and clearers. The workflow tells the memory which
state is running before each handler; a write from any other state raises ``OwnershipViolation``,
which fails the run (it is a bug in the loop, not something a retry can fix).

=====================  ===================================  =========================
field                  written by                           cleared by
=====================  ===================================  =========================
step                   Planning (only)                      never
retry_count            Planning (only)                      never
confidence_score       Planning (only)                      never
assistant_text,        Planning                             Observing, Reflecting
assistant_ref,
assistant_chars
current_tool_calls     Planning; WaitingForHuman (modify)   Observing
observations           Acting, ParallelActing;              Observing
                       WaitingForHuman (reject)
pending_approvals      Planning; WaitingForHuman            Observing
history                Observing (append tool turns);       never
                       Planning (append feedback turns);
                       WaitingForUserInput (append the
                       user's next message, in threads);
                       Recovering, WaitingForHuman (append
                       hints and guidance);
                       Reflecting (append its summary;
                       without a store, compress)
summarised_turns,      Reflecting                           never
view_from,
view_summary_at
pending_guidance       Recovering                           WaitingForHuman
human_guidance         WaitingForHuman (the guide signal)   WaitingForHuman
turn_start_step        WaitingForUserInput                  never
conversation_head,     Planning (after each model call)     Planning, Reflecting (when
conversation_sent,                                          the history is rewritten)
conversation_turns
final_answer           Planning                             never
error                  Planning; Recovering, WaitingForHuman never
                       (halting)
usage, usage_by_model  Planning, Reflecting                 never
=====================  ===================================  =========================

The trace is not a field here: any state appends to it, nothing clears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field, PrivateAttr
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.models import (
    ChatMessage,
    GuideSignal,
    ModelResponse,
    PendingApproval,
    TokenUsage,
    ToolCall,
    ToolOutcome,
    Turn,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.base import Mutable

S = State

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful software agent working inside a workspace directory. Use the tools to "
    "inspect and change files; every path is relative to the workspace. Tool results that start "
    "with 'ERROR:' describe what went wrong: read them and adapt. When the task is complete, "
    "reply with the final answer as plain text and no tool calls."
)


INTERRUPTED_MARK = "[interrupted by the user's message]"
"""Ends an interrupted reply in the record and in what the model is shown next: it reads what
it had said, and why it stopped."""


@dataclass(frozen=True)
class Ownership:
    writers: frozenset[State]
    clearers: frozenset[State] = frozenset()
    append_only: frozenset[State] = frozenset()
    """Writers that may only extend the current (tuple) value, never rewrite it."""


def _own(
    writers: set[State],
    clearers: frozenset[State] | set[State] = frozenset(),
    append_only: frozenset[State] | set[State] = frozenset(),
) -> Ownership:
    return Ownership(frozenset(writers), frozenset(clearers), frozenset(append_only))


OWNERSHIP: dict[str, Ownership] = {
    "step": _own({S.PLANNING}),
    "retry_count": _own({S.PLANNING}),
    "confidence_score": _own({S.PLANNING}),
    "assistant_text": _own({S.PLANNING}, {S.OBSERVING, S.REFLECTING}),
    "assistant_ref": _own({S.PLANNING}, {S.OBSERVING, S.REFLECTING}),
    "assistant_chars": _own({S.PLANNING}, {S.OBSERVING, S.REFLECTING}),
    "current_tool_calls": _own({S.PLANNING, S.WAITING_FOR_HUMAN}, {S.OBSERVING}),
    "observations": _own(
        {S.ACTING, S.PARALLEL_ACTING, S.WAITING_FOR_HUMAN, S.WAITING_FOR_CLIENT}, {S.OBSERVING}
    ),
    "pending_approvals": _own({S.PLANNING, S.WAITING_FOR_HUMAN}, {S.OBSERVING}),
    "history": _own(
        {
            S.OBSERVING,
            S.PLANNING,
            S.REFLECTING,
            S.RECOVERING,
            S.WAITING_FOR_HUMAN,
            S.WAITING_FOR_USER_INPUT,
        },
        append_only={
            S.OBSERVING,
            S.PLANNING,
            S.RECOVERING,
            S.WAITING_FOR_HUMAN,
            S.WAITING_FOR_USER_INPUT,
        },
    ),
    "turn_start_step": _own({S.WAITING_FOR_USER_INPUT}),
    "conversation_head": _own({S.PLANNING}, {S.PLANNING, S.REFLECTING}),
    "conversation_sent": _own({S.PLANNING}, {S.PLANNING, S.REFLECTING}),
    "conversation_turns": _own({S.PLANNING}, {S.PLANNING, S.REFLECTING}),
    "summarised_turns": _own({S.REFLECTING}),
    "view_from": _own({S.REFLECTING}),
    "view_summary_at": _own({S.REFLECTING}),
    "pending_guidance": _own({S.RECOVERING}, {S.WAITING_FOR_HUMAN}),
    "human_guidance": _own({S.WAITING_FOR_HUMAN}, {S.WAITING_FOR_HUMAN}),
    "final_answer": _own({S.PLANNING}),
    "error": _own({S.PLANNING, S.RECOVERING, S.WAITING_FOR_HUMAN}),
    # Acting counts what a sub-agent spent (``delegation``): the family has one budget.
    "usage": _own({S.PLANNING, S.REFLECTING, S.ACTING, S.PARALLEL_ACTING}),
    "usage_by_model": _own({S.PLANNING, S.REFLECTING, S.ACTING, S.PARALLEL_ACTING}),
    "prompt_estimate": _own({S.PLANNING}),
    "prompt_scale": _own({S.PLANNING}),
}


class OwnershipViolation(ApplicationError):
    """A state wrote a memory field it does not own."""

    def __init__(self, field: str, state: State, why: str) -> None:
        super().__init__(
            f"memory ownership violated: {state.value} {why} '{field}'",
            type="OwnershipViolation",
            non_retryable=True,
        )


def _is_clear(value: Any) -> bool:
    return value is None or value == () or value == 0


class AgentMemory(Mutable):
    """The whole world-state of one run; one model so continue-as-new can carry it later."""

    task: str
    task_type: str = "default"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT

    step: int = 0
    retry_count: int = 0
    """Low-confidence reconsiderations used."""
    confidence_score: float | None = None
    """The last response's confidence, when the endpoint reported one."""
    assistant_text: str | None = None
    assistant_ref: str | None = None
    """The whole of a long ``assistant_text``, stored (``ModelResponse.content_ref``)."""
    assistant_chars: int | None = None
    current_tool_calls: tuple[ToolCall, ...] = ()
    observations: tuple[ToolOutcome, ...] = ()
    pending_approvals: tuple[PendingApproval, ...] = ()
    history: tuple[Turn, ...] = ()
    conversation_head: str | None = None
    """Head of the conversation the store holds: what earlier model calls already sent."""
    conversation_sent: int = 0
    """How many messages that head holds."""
    conversation_turns: int = 0
    """How many turns of ``history`` it covers: the next call renders and sends only the turns
    after these (so a step costs the workflow the same at step 10 as at step 10,000)."""
    history_base: int = 2
    """Messages of the stored record before ``history``'s first turn (the system prompt and
    the task, then the turns a hand-over left to the store)."""
    summarised_turns: int = 0
    """Turns at the start of ``history`` that Reflecting summarised (with a store it
    summarises beside the record, never instead of it)."""
    view_from: int = 0
    """The model is shown the record from this message on (after the system prompt and the
    task): what comes before it, Reflecting summarised. 0: from the start."""
    view_summary_at: int = 0
    """The record's message holding Reflecting's latest summary: shown first (after the task),
    then the record from ``view_from`` on without it. 0: none."""
    turns_stored: int = 0
    """Turns of the conversation that only the store holds now: a hand-over by reference
    (``AgentRun.handed_over``) keeps in ``history`` only the turns no model call has sent yet,
    the rest being the stored record ``conversation_head`` names."""
    turn_start_step: int = 0
    """The step a thread's current turn began after; ``max_steps`` counts from here."""
    final_answer: str | None = None
    error: str | None = None
    usage: TokenUsage = TokenUsage()
    pending_guidance: str | None = None
    """Why a stuck run waits for a human (recovery strategy ask_human)."""
    human_guidance: GuideSignal | None = None
    usage_by_model: dict[str, TokenUsage] = Field(default_factory=dict)
    prompt_estimate: int = 0
    """The last budget check's estimate of its request's prompt tokens (``planning``)."""
    prompt_scale: int = 100
    """How far the provider's tokenizer counts above that estimate, in percent (at least 100),
    learnt from the replies that reported real usage: the budget check scales by it."""

    _state: State = PrivateAttr(default=State.IDLE)

    def enter(self, state: State) -> None:
        """Tell the memory which state's handler runs next (the engine does this)."""
        self._state = state

    def __setattr__(self, name: str, value: Any) -> None:
        rule = OWNERSHIP.get(name)
        if rule is not None:
            self._check(name, rule, value)
        super().__setattr__(name, value)

    def _check(self, name: str, rule: Ownership, value: Any) -> None:
        state = self._state
        if _is_clear(value):
            already_clear = _is_clear(getattr(self, name))
            if state in rule.clearers or (already_clear and state in rule.writers):
                return
            raise OwnershipViolation(name, state, "may not clear")
        if state not in rule.writers:
            raise OwnershipViolation(name, state, "may not write")
        if state in rule.append_only:
            old = getattr(self, name)
            if tuple(value[: len(old)]) != tuple(old):
                raise OwnershipViolation(name, state, "may only append to")

    def said(self, response: ModelResponse | None) -> None:
        """Remember what the model said (``None``: forget it), with its stored whole."""
        self.assistant_text = response.content if response is not None else None
        self.assistant_ref = response.content_ref if response is not None else None
        self.assistant_chars = response.content_chars if response is not None else None

    def turn(self, **fields: Any) -> Turn:
        """A turn of this step holding what the model said (its stored whole too)."""
        return Turn(
            step=self.step,
            assistant_text=self.assistant_text,
            assistant_ref=self.assistant_ref,
            assistant_chars=self.assistant_chars,
            **fields,
        )

    def build_messages(self) -> tuple[ChatMessage, ...]:
        """System prompt, the task, then each completed turn with its tool results."""
        base = (
            ChatMessage(role="system", content=self.system_prompt),
            ChatMessage(role="user", content=self.task),
        )
        return base + self.messages_of(self.history)

    @staticmethod
    def messages_of(turns: tuple[Turn, ...]) -> tuple[ChatMessage, ...]:
        """The chat messages of some turns, in order (a turn renders the same every time, so
        the messages of later turns extend those of earlier ones)."""
        messages: list[ChatMessage] = []
        for turn in turns:
            if turn.user_message is not None:
                messages.append(ChatMessage(role="user", content=turn.user_message))
            if turn.interrupted:
                said = turn.assistant_text
                messages.append(
                    ChatMessage(
                        role="assistant",
                        content=f"{said}\n{INTERRUPTED_MARK}" if said else INTERRUPTED_MARK,
                        interrupted=True,
                    )
                )
            elif turn.outcomes or turn.assistant_text is not None:
                messages.append(
                    ChatMessage(
                        role="assistant",
                        content=turn.assistant_text,
                        tool_calls=tuple(o.call for o in turn.outcomes),
                        content_ref=turn.assistant_ref,
                        content_chars=turn.assistant_chars,
                    )
                )
            messages.extend(
                ChatMessage(
                    role="tool",
                    tool_call_id=o.call.id,
                    content=o.observation,
                    content_ref=o.observation_ref,
                    content_chars=o.observation_chars,
                )
                for o in turn.outcomes
            )
            if turn.note:
                messages.append(ChatMessage(role="user", content=turn.note))
        return tuple(messages)
