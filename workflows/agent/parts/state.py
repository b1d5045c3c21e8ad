"""``AgentRun``: everything one agent run knows between two steps, as one pydantic model.

The workflow holds one ``AgentRun`` and nothing else, so the whole run can be handed to
``workflow.continue_as_new`` (or exported) as a value: its input and chosen model, the current
state of the transition table, the conversation memory (with agentsm's ownership rules, which
still guard every write to it), Nexora's progress tracker, the append-only trace, and the few
flags the loop keeps between states.

Pure data plus small deterministic methods: the caller passes ``workflow.now()`` in.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from treadle.workflows.agent.messages import providers
from treadle.workflows.agent.messages.catalogue import StartPhaseArgs
from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.family import Family
from treadle.workflows.agent.messages.mcp import McpRelisting, McpToolList
from treadle.workflows.agent.messages.models import (
    AgentInput,
    PendingApproval,
    TokenUsage,
    TraceEntry,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import reflection
from treadle.workflows.agent.parts.memory import AgentMemory
from treadle.workflows.agent.parts.tracker import ProgressTracker
from treadle.workflows.agent.parts.waiting import WaitState
from treadle.workflows.base import WHOLE, Mutable


class ThreadState(Mutable):
    """A thread's (Loom's) place between turns."""

    inbox: list[str] = Field(default_factory=list)
    """The user's messages not yet answered, in the order they arrived."""
    closing: bool = False
    """``close`` was asked: the thread ends once it has answered what is in the inbox."""
    steering: list[str] = Field(default_factory=list)
    """Messages that join the running turn (``steer``, ``interrupt``), in the order they
    arrived: the model reads them before its next call; left over when the turn answers, they
    are the next turn's, before the inbox."""
    interrupt: bool = False
    """An ``interrupt`` message waits to cut the model call in flight (cleared when a call
    starts that reads it)."""
    idle_since: datetime | None = None
    """When the thread began waiting for its user (carried, so the idle timer survives
    continue-as-new)."""


class ClientQueryState(Mutable):
    """Loom's server query: what the run asked its client, and the answer so far."""

    query: ClientQuery | None = None
    """The query waiting for the client's answer (``WaitingForClient``)."""
    answer: ClientAnswer | None = None
    """The accepted answer to ``query``, until the call's observation is made of it."""
    asked: int = 0
    """Numbers the queries of the run: ``q1``, ``q2``..."""
    parallel: bool = False
    """The query was asked in ParallelActing: the step's other calls go on concurrently."""


class RecoveryState(Mutable):
    """What the run knows about being stuck (Nexora's recovery)."""

    stuck_reason: str | None = None
    """Why the tracker says the run is stuck, until Recovering or a human clears it."""
    hints_given: int = 0


class LoopFlags(Mutable):
    """What one state leaves for the next within a step."""

    pending_phase: StartPhaseArgs | None = None
    """A ``start_phase`` call seen this step, applied by PhaseTransition."""
    last_step_mutated: bool = False
    """The last step's tools may have changed files: the post-tools hook runs."""
    reflect_reason: str = ""
    """Why Reflecting runs next: ``low confidence`` or the reflection interval."""
    confidence_unavailable_noted: bool = False
    """The endpoint returned no log-probabilities, and the trace already says so."""


class AgentRun(Mutable):
    """The whole state of one run; the workflow class is the loop that moves it.

    Carried across continue-as-new (bounded, the conversation by reference to its stored
    record: ``handed_over``; whole without a store: ``carried``) and whole by ``treadle
    import``: ``input`` and the
    chosen ``model``; ``state`` in the transition table and ``started_at``; ``memory`` (the
    conversation, the step's calls and approvals, usage); Nexora's ``tracker``; the ``trace``
    tail with ``last_event`` and ``trace_earlier``; ``flags`` one state leaves for the next;
    ``recovery`` (stuck reason, hints given); ``client`` (the client query and its answer);
    ``mcp`` (the listed MCP tools) and ``mcp_relist`` (the servers listed again);
    ``loaded_tools`` (the worker's own tools, listed); ``thread`` (inbox, closing, idle since);
    ``runs`` (which run of the chain this is).
    """

    input: AgentInput
    model: str
    """``provider:model`` chosen once per run: ``models[task_type]``, ``models["default"]``,
    then ``input.model``."""
    served_by: str | None = None
    """The model that answered the last model call: ``model``, or a fallback that took it."""
    state: State = State.IDLE
    started_at: datetime
    memory: AgentMemory
    """The conversation, the current step's calls and approvals, usage: owned field by field."""
    tracker: ProgressTracker
    """Nexora's tracker: recorded by Observing, phases moved by PhaseTransition, reset by
    Recovering and by a human's guidance."""
    trace: list[TraceEntry] = Field(default_factory=list)
    """Append-only: every state's significant actions."""
    last_event: str | None = None
    """The last trace entry as one line, for ``status``."""
    trace_earlier: int = 0
    """Trace entries left behind at earlier continue-as-new hand-overs."""

    flags: LoopFlags = Field(default_factory=LoopFlags)
    recovery: RecoveryState = Field(default_factory=RecoveryState)
    client: ClientQueryState = Field(default_factory=ClientQueryState)
    mcp: McpToolList | None = None
    """The MCP tools of ``config.mcp_servers``, listed before the run's first model call and
    carried across continue-as-new; a tool that vanished from its server is dropped."""
    mcp_relist: McpRelisting | None = None
    """The servers ``mcp`` misses, listed again at later steps (``agent.mcp_listing``);
    ``None``: none to list again (or a run recorded before the listings again)."""
    loaded_tools: tuple[str, ...] | None = None
    """The tools the worker loaded from your own modules, as listed before the run's first
    model call (recorded, carried across continue-as-new); ``None``: not listed yet."""
    thread: ThreadState = Field(default_factory=ThreadState)
    waiting: WaitState = Field(default_factory=WaitState)
    """A ``wait`` call parking the run on a timer (``Waiting``)."""
    runs: int = 1
    """Which run of its continue-as-new chain this is (the workflow id stays the same)."""
    lean_start: bool = False
    """The chain's first run was started as Treadle's clients start runs, with what it shows
    first (``search_attributes.start_attributes``): it pays Temporal Cloud for what changes only. It
    upserts no value visibility shows, ends ``Done`` on its close status (``publishing``), and
    lists the worker's loaded tools with its first model call instead of a local activity's
    marker (``planning.model_request``). Read from the first run's start event and carried, so
    every replay decides the same; ``False`` for a run started without them, which does all
    three as runs always did, and so replays as it was recorded."""
    workspace_snapshot: str | None = None
    """The key of the workspace's latest snapshot manifest in the store (``snapshots``)."""
    family: Family = Field(default_factory=Family)
    """The sub-agents this run started (``delegate``), running and ended."""
    parent_gone: str | None = None
    """A sub-agent that found its parent closed when it reported (no server cancels a child
    that may outlive its parent's runs): why; it ends at its next step."""

    def carried(self, trace_tail: int, max_bytes: int) -> AgentRun:
        """This run as the next run of the chain starts from: the trace's tail (with a count
        of what was left behind), and, if the conversation has grown past ``max_bytes``, its
        older turns compacted into one summary turn (deterministic, no model call)."""
        dropped = max(0, len(self.trace) - trace_tail)
        memory = self.memory
        if len(memory.model_dump_json(context=WHOLE)) > max_bytes and len(memory.history) > 2:
            keep = max(2, len(memory.history) // 4)
            older, recent = memory.history[:-keep], memory.history[-keep:]
            summary = reflection.summary_turn(
                older, reflection.compact(older), reflection.unresolved_errors(older, recent)
            )
            # model_copy writes no field through the ownership checks: this is a hand-over
            # between two runs, not a state writing to the memory.
            memory = memory.model_copy(
                update={
                    "history": (summary, *recent),
                    "conversation_head": None,
                    "conversation_sent": 0,
                    "conversation_turns": 0,
                }
            )
        return self.model_copy(
            update={
                "trace": self.trace[dropped:],
                "trace_earlier": self.trace_earlier + dropped,
                "memory": memory,
                "runs": self.runs + 1,
            }
        )

    def handed_over(self, trace_tail: int, files: int) -> AgentRun:
        """This run as the next run of its chain starts from, when the store holds the
        conversation (``memory.conversation_head``): every carried list is bounded, so a
        hand-over costs the same at step 100 as at step 100,000.

        The conversation is carried by reference: ``history`` keeps only the turns no model
        call has sent yet (the rest is the stored record the head names, counted in
        ``turns_stored``), nothing is compacted, and the record stays whole for ``export``.
        The trace keeps its last ``trace_tail`` entries (the rest counted in
        ``trace_earlier``); the tracker keeps its latest ``files`` written files (the rest
        counted) and reads."""
        m = self.memory
        sent = min(m.conversation_turns, len(m.history))
        # model_copy writes no field through the ownership checks: this is a hand-over
        # between two runs, not a state writing to the memory.
        memory = m.model_copy(
            update={
                "history": m.history[sent:],
                "conversation_turns": 0,
                "turns_stored": m.turns_stored + sent,
                "history_base": m.history_base + len(m.messages_of(m.history[:sent])),
                "summarised_turns": max(0, m.summarised_turns - sent),
            }
        )
        dropped = max(0, len(self.trace) - trace_tail)
        return self.model_copy(
            update={
                "trace": self.trace[dropped:],
                "trace_earlier": self.trace_earlier + dropped,
                "memory": memory,
                "tracker": bounded_tracker(self.tracker, files),
                "runs": self.runs + 1,
            }
        )

    @classmethod
    def begin(cls, input: AgentInput, now: datetime) -> AgentRun:
        """A fresh run of ``input``, started at ``now``."""
        config = input.config
        return cls(
            input=input,
            model=providers.select(config.models, input.task_type, input.model),
            started_at=now,
            memory=AgentMemory(
                task=input.task,
                task_type=input.task_type,
                **({"system_prompt": config.system_prompt} if config.system_prompt else {}),
            ),
            tracker=ProgressTracker(config=config.progress),
            workspace_snapshot=input.workspace_snapshot,
        )

    def record(self, state: State, event: str, data: str, now: datetime) -> None:
        """Append one trace entry (any state may; nothing ever removes one)."""
        self.last_event = f"{event}: {data}" if data else event
        self.trace.append(
            TraceEntry(
                step=self.memory.step, state=state.value, event=event, data=data, timestamp=now
            )
        )

    def spend(self, model: str, usage: TokenUsage) -> None:
        """Add one call's usage to the run's totals and to its model's (the cost ledger)."""
        m = self.memory
        m.usage = m.usage + usage
        m.usage_by_model = {
            **m.usage_by_model,
            model: m.usage_by_model.get(model, TokenUsage()) + usage,
        }

    def reflection_due(self) -> bool:
        """agentsm's reflection every N steps; notes why Reflecting runs when it is due."""
        every = self.input.config.reflect_every_n_steps
        due = bool(every) and self.memory.step % (every or 1) == 0
        if due:
            self.flags.reflect_reason = f"every {every} steps"
        return due

    def waiting_approvals(self) -> tuple[PendingApproval, ...]:
        """Calls a human still has to decide, while the run waits for them."""
        if self.state is not State.WAITING_FOR_HUMAN:
            return ()
        return tuple(p for p in self.memory.pending_approvals if p.decision is None)


def bounded_tracker(tracker: ProgressTracker, files: int) -> ProgressTracker:
    """The tracker with its latest ``files`` written files (the others counted in
    ``files_modified_earlier``) and reads; its other lists are bounded by their config."""
    written = list(tracker.files_modified.items())
    dropped = max(0, len(written) - files)
    if not dropped and len(tracker.seen_reads) <= files:
        return tracker
    return tracker.model_copy(
        update={
            "files_modified": dict(written[dropped:]),
            "files_modified_earlier": tracker.files_modified_earlier + dropped,
            "seen_reads": dict(list(tracker.seen_reads.items())[-files:]),
        }
    )
