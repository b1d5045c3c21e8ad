"""States, events and the one immutable transition table of the agent loop.

The table merges the states the three seed designs name (Loom, agentsm-rs, Nexora); the README
maps each seed's names to ours. Every legal move is declared here, once; anything else is a bug
and fails the run with a non-retryable ``InvalidTransition``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from temporalio.exceptions import ApplicationError


class State(enum.StrEnum):
    IDLE = "Idle"
    WAITING_FOR_USER_INPUT = "WaitingForUserInput"
    """A thread between turns: answered, waiting durably for its user's next message."""
    PLANNING = "Planning"
    ACTING = "Acting"
    PARALLEL_ACTING = "ParallelActing"
    WAITING_FOR_HUMAN = "WaitingForHuman"
    WAITING_FOR_CLIENT = "WaitingForClient"
    """Loom's server query: the model asked for something only the client has."""
    WAITING = "Waiting"
    """Parked on a durable timer by the ``wait`` tool, until it wakes on time or early."""
    OBSERVING = "Observing"
    POST_TOOLS_HOOK = "PostToolsHook"
    REFLECTING = "Reflecting"
    RECOVERING = "Recovering"
    PHASE_TRANSITION = "PhaseTransition"
    DONE = "Done"
    ERROR = "Error"
    HALTED = "Halted"
    CANCELLED = "Cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({State.DONE, State.ERROR, State.HALTED, State.CANCELLED})


class Event(enum.StrEnum):
    # Lifecycle
    START = "Start"
    # Threads: a conversation that waits for its user between turns (Loom)
    TURN_ANSWERED = "TurnAnswered"
    USER_MESSAGE = "UserMessage"
    THREAD_CLOSED = "ThreadClosed"
    IDLE_TIMEOUT = "IdleTimeout"
    INTERRUPTED = "Interrupted"
    """A user's message cut the model call in flight: the step is made again with it read."""
    # Planning outcomes
    LLM_TOOL_CALL = "LlmToolCall"
    LLM_PARALLEL_TOOL_CALLS = "LlmParallelToolCalls"
    LLM_FINAL_ANSWER = "LlmFinalAnswer"
    MAX_STEPS = "MaxSteps"
    LOW_CONFIDENCE = "LowConfidence"
    ANSWER_TOO_SHORT = "AnswerTooShort"
    ANSWER_INVALID = "AnswerInvalid"
    """A typed answer that does not validate against ``output_schema``: sent back."""
    TOOL_BLACKLISTED = "ToolBlacklisted"
    TOO_MANY_TOOL_CALLS = "TooManyToolCalls"
    HUMAN_APPROVAL_REQUIRED = "HumanApprovalRequired"
    FATAL_ERROR = "FatalError"
    BUDGET_EXCEEDED = "BudgetExceeded"
    # Human decisions (all pending calls of a step decided)
    HUMAN_APPROVED = "HumanApproved"
    HUMAN_MODIFIED = "HumanModified"
    HUMAN_APPROVED_PARALLEL = "HumanApprovedParallel"
    HUMAN_REJECTED = "HumanRejected"
    HUMAN_GUIDED = "HumanGuided"
    HUMAN_HALTED = "HumanHalted"
    # Loom's server query: asked in Acting (the ask_client tool, or a call detection made from
    # the model's text), answered or timed out, then Acting goes on with the other calls.
    CLIENT_QUERY = "ClientQuery"
    CLIENT_QUERY_DONE = "ClientQueryDone"
    """The query has its result: the answer, the client's refusal, or the timeout."""
    CLIENT_QUERY_DONE_PARALLEL = "ClientQueryDoneParallel"
    """The same, back to running the step's other calls concurrently."""
    # The wait tool: parked on a durable timer in Acting, then back to it (or ParallelActing).
    WAIT = "Wait"
    WOKE = "Woke"
    """The wait ended, on time or early (a user message, guidance, a wake signal)."""
    WOKE_PARALLEL = "WokeParallel"
    # Acting outcomes
    TOOL_SUCCESS = "ToolSuccess"
    TOOL_FAILURE = "ToolFailure"
    # Observing outcomes: Nexora's progress check runs after every observation
    CONTINUE = "Continue"
    FILES_CHANGED = "FilesChanged"
    NEEDS_REFLECTION = "NeedsReflection"
    STUCK = "Stuck"
    PHASE_COMPLETE = "PhaseComplete"
    # Post-tools hook, reflection, recovery, phases
    HOOK_DONE = "HookDone"
    REFLECT_DONE = "ReflectDone"
    RECOVERED = "Recovered"
    HUMAN_GUIDANCE_REQUIRED = "HumanGuidanceRequired"
    HALT = "Halt"
    PHASE_STARTED = "PhaseStarted"
    # Someone cancelled the run (``temporal workflow cancel``); legal from every live state.
    CANCEL = "Cancel"


S, E = State, Event

TRANSITIONS: Mapping[tuple[State, Event], State] = MappingProxyType(
    {
        (S.IDLE, E.START): S.PLANNING,
        # Planning: one model call, then decide.
        (S.PLANNING, E.LLM_TOOL_CALL): S.ACTING,
        (S.PLANNING, E.LLM_PARALLEL_TOOL_CALLS): S.PARALLEL_ACTING,
        (S.PLANNING, E.LLM_FINAL_ANSWER): S.DONE,
        # A thread answers a turn and waits for its user's next message.
        (S.PLANNING, E.TURN_ANSWERED): S.WAITING_FOR_USER_INPUT,
        (S.WAITING_FOR_USER_INPUT, E.USER_MESSAGE): S.PLANNING,
        (S.WAITING_FOR_USER_INPUT, E.THREAD_CLOSED): S.DONE,
        (S.WAITING_FOR_USER_INPUT, E.IDLE_TIMEOUT): S.DONE,
        # A user's message interrupted the model call: plan again, reading it.
        (S.PLANNING, E.INTERRUPTED): S.PLANNING,
        (S.PLANNING, E.MAX_STEPS): S.ERROR,
        (S.PLANNING, E.LOW_CONFIDENCE): S.REFLECTING,
        (S.PLANNING, E.ANSWER_TOO_SHORT): S.PLANNING,
        (S.PLANNING, E.ANSWER_INVALID): S.PLANNING,
        (S.PLANNING, E.TOOL_BLACKLISTED): S.PLANNING,
        (S.PLANNING, E.TOO_MANY_TOOL_CALLS): S.PLANNING,
        (S.PLANNING, E.HUMAN_APPROVAL_REQUIRED): S.WAITING_FOR_HUMAN,
        (S.PLANNING, E.FATAL_ERROR): S.ERROR,
        (S.PLANNING, E.BUDGET_EXCEEDED): S.ERROR,
        # Replies with nothing in them (no text, no tool call), several in a row: stuck.
        (S.PLANNING, E.STUCK): S.RECOVERING,
        # Waiting for a human: durable, for as long as it takes.
        (S.WAITING_FOR_HUMAN, E.HUMAN_APPROVED): S.ACTING,
        (S.WAITING_FOR_HUMAN, E.HUMAN_MODIFIED): S.ACTING,
        (S.WAITING_FOR_HUMAN, E.HUMAN_APPROVED_PARALLEL): S.PARALLEL_ACTING,
        (S.WAITING_FOR_HUMAN, E.HUMAN_REJECTED): S.OBSERVING,
        # ... or for guidance on a stuck run (recovery strategy ask_human).
        (S.WAITING_FOR_HUMAN, E.HUMAN_GUIDED): S.PLANNING,
        (S.WAITING_FOR_HUMAN, E.HUMAN_HALTED): S.HALTED,
        # Client queries: a durable wait with a timeout, whose result is the call's observation.
        (S.ACTING, E.CLIENT_QUERY): S.WAITING_FOR_CLIENT,
        (S.PARALLEL_ACTING, E.CLIENT_QUERY): S.WAITING_FOR_CLIENT,
        (S.WAITING_FOR_CLIENT, E.CLIENT_QUERY_DONE): S.ACTING,
        (S.WAITING_FOR_CLIENT, E.CLIENT_QUERY_DONE_PARALLEL): S.PARALLEL_ACTING,
        # The wait tool: a durable timer, ended early by a message, guidance or a wake signal.
        (S.ACTING, E.WAIT): S.WAITING,
        (S.PARALLEL_ACTING, E.WAIT): S.WAITING,
        (S.WAITING, E.WOKE): S.ACTING,
        (S.WAITING, E.WOKE_PARALLEL): S.PARALLEL_ACTING,
        # Acting: tool failures are data, so both outcomes go to Observing.
        (S.ACTING, E.TOOL_SUCCESS): S.OBSERVING,
        (S.ACTING, E.TOOL_FAILURE): S.OBSERVING,
        (S.PARALLEL_ACTING, E.TOOL_SUCCESS): S.OBSERVING,
        (S.PARALLEL_ACTING, E.TOOL_FAILURE): S.OBSERVING,
        # Observing: commit results to history, then check progress.
        (S.OBSERVING, E.CONTINUE): S.PLANNING,
        (S.OBSERVING, E.FILES_CHANGED): S.POST_TOOLS_HOOK,
        (S.OBSERVING, E.NEEDS_REFLECTION): S.REFLECTING,
        (S.OBSERVING, E.STUCK): S.RECOVERING,
        (S.OBSERVING, E.PHASE_COMPLETE): S.PHASE_TRANSITION,
        # Post-tools hook (Loom): infrastructure work after mutating tools, then the next call.
        (S.POST_TOOLS_HOOK, E.HOOK_DONE): S.PLANNING,
        (S.POST_TOOLS_HOOK, E.NEEDS_REFLECTION): S.REFLECTING,
        # Reflection (agentsm): compress history, then plan again.
        (S.REFLECTING, E.REFLECT_DONE): S.PLANNING,
        # Recovery (Nexora): hint the model, ask a human, or halt.
        (S.RECOVERING, E.RECOVERED): S.PLANNING,
        (S.RECOVERING, E.HUMAN_GUIDANCE_REQUIRED): S.WAITING_FOR_HUMAN,
        (S.RECOVERING, E.HALT): S.HALTED,
        # Phases (Nexora): starting phase n+1 completes phase n and resets tracking.
        (S.PHASE_TRANSITION, E.PHASE_STARTED): S.PLANNING,
        (S.PHASE_TRANSITION, E.FILES_CHANGED): S.POST_TOOLS_HOOK,
    }
    | {(state, E.CANCEL): S.CANCELLED for state in State if not state.is_terminal}
)
"""``(state, event) -> state``. Built once at import, read-only afterwards."""


class InvalidTransition(ApplicationError):
    """A ``(state, event)`` pair the table does not declare: a bug, so the run fails."""

    def __init__(self, state: State, event: Event) -> None:
        super().__init__(
            f"no transition is declared for ({state.value}, {event.value})",
            type="InvalidTransition",
            non_retryable=True,
        )
        self.state = state
        self.event = event


def next_state(state: State, event: Event) -> State:
    """Look up the move; raise ``InvalidTransition`` for an undeclared pair."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(state, event) from None


SEED_STATES: Mapping[str, Mapping[str, State]] = MappingProxyType(
    {
        "Loom": MappingProxyType(
            {
                "WaitingForUserInput": S.WAITING_FOR_USER_INPUT,
                "CallingLlm": S.PLANNING,
                "ProcessingLlmResponse": S.PLANNING,
                "ExecutingTools": S.ACTING,
                "PostToolsHook": S.POST_TOOLS_HOOK,
                "Error": S.ERROR,
                "ShuttingDown": S.CANCELLED,
            }
        ),
        "agentsm": MappingProxyType(
            {
                "Idle": S.IDLE,
                "Planning": S.PLANNING,
                "Acting": S.ACTING,
                "ParallelActing": S.PARALLEL_ACTING,
                "WaitingForHuman": S.WAITING_FOR_HUMAN,
                "Observing": S.OBSERVING,
                "Reflecting": S.REFLECTING,
                "Done": S.DONE,
                "Error": S.ERROR,
            }
        ),
        "Nexora": MappingProxyType(
            {
                "Idle": S.IDLE,
                "ProcessingPrompt": S.PLANNING,
                "StreamingResponse": S.PLANNING,
                "ExecutingTool": S.ACTING,
                "AwaitingPermission": S.WAITING_FOR_HUMAN,
                "ErrorRecovery": S.RECOVERING,
                "ProgressCheck": S.OBSERVING,
                "PhaseTransition": S.PHASE_TRANSITION,
                "Halted": S.HALTED,
            }
        ),
    }
)
"""Each seed design's state names -> ours (the README carries the same table)."""
