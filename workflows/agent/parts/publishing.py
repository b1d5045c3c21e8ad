"""What a run shows while it runs: the trace line of each move, the live stream (``events``),
its search attributes (AgentState / AgentStep / AgentModel) and the Web UI's current details.

None of it decides anything: the loop calls ``Publisher`` after it moved. Publishing on the
stream adds no history event; search-attribute changes are held back and sent together before
the run waits (``send_attributes``), so the transitions between two waits cost one upsert. A
step's own moves (``Planning`` <-> ``Acting``, ``PostToolsHook`` for a run with hooks, its
``AgentStep``) are sent with the next change a user searches for, before a hand-over and at the
end, and otherwise at most once per ``STEP_ATTRIBUTES_EVERY`` of workflow time: a fast step
costs no upsert, and the exact step is always in ``status``, the live view and the Web UI's
details. (``Acting`` is sent only after a wait a user searches for: an approval's tools run as
``Acting``, never as ``WaitingForHuman``.)

A run started with what it shows first (``search_attributes.start_attributes``,
``AgentRun.lean_start``) sends no value visibility already shows: its start costs no upsert. And one
that answers from a step of its own (``Planning``, ``Acting``, ``PostToolsHook``) ends on its
close status: ``Completed`` with a step state is ``Done`` (a run that halts, fails or is
cancelled still sends its end state, and one that ends from a wait sends ``Done``), so a simple
run costs Temporal Cloud no upsert at all. Runs started without them upsert as they always did.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages import events
from treadle.workflows.agent.messages import search_attributes as sa
from treadle.workflows.agent.messages.config import AgentConfig
from treadle.workflows.agent.messages.events import AgentEvent, EventKind
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import status
from treadle.workflows.agent.parts.outages import Outage
from treadle.workflows.agent.parts.state import AgentRun

STEP_ATTRIBUTES_EVERY = timedelta(
    seconds=AgentConfig.model_fields["step_attributes_every_seconds"].default
)
"""The default of ``AgentConfig.step_attributes_every_seconds``: at most one upsert of a step's
own moves per 5 minutes of workflow time. Each upsert is a
billed Temporal Cloud action, and a step that waits on a real model takes seconds: at 10 s a
step, a 10 s pace cost 1.14 actions a step (``bench.actions``), this costs one every 30 steps.
So ``AgentStep`` in visibility may lag by up to 5 minutes of a run's stepping (a search such as
``AgentStep > 10`` finds the run at the latest 5 minutes after it got there, at once when it
waits, hands over or ends). A run's state a user searches for never waits for it, and the
exact step is always in ``status``, the live view and the Web UI's details."""

_HELD_STATES = frozenset(
    {State.ACTING.value, State.PARALLEL_ACTING.value, State.POST_TOOLS_HOOK.value}
)
"""A step's own moves after its model call (its tools, its hooks): always held, for the next
change worth sending to carry."""
_STEP_STATES = _HELD_STATES | {State.PLANNING.value}
_STEP_ATTRIBUTES = frozenset({sa.AGENT_STATE.name, sa.AGENT_STEP.name})


class Publisher:
    """One run's trace, stream, search attributes and Web UI details."""

    def __init__(self, run: AgentRun, prior: WorkflowStreamState | None) -> None:
        self._run = run
        # The live stream (its own signal, update and queries); its tail and offsets come
        # along on continue-as-new. Built in the workflow's init, so its handlers exist first.
        self.stream = WorkflowStream(prior_state=prior)
        self._events = self.stream.topic(events.EVENTS_TOPIC, type=AgentEvent)
        self._pending_attributes: dict[str, SearchAttributeUpdate[Any]] = {}
        self._sent_at = workflow.now()
        """When this run last upserted (its start: a hand-over has just sent exact values)."""
        self.outage: Outage | None = None
        """The store a call waits for now (``calls``); not carried: a replay sets it again."""
        self.outbox: list[AgentEvent] = []
        """A sub-agent's events not yet reported to its parent (``child_reports``), newest
        ``events.REPORTED_EVENTS`` only; not carried: the next run of the chain starts empty."""
        self.outbox_dropped = 0
        """Events left out of the outbox since the last report, to say how many."""
        self.reported_at: datetime | None = None
        """When this run (a sub-agent) last reported to its parent (``child_reports``)."""
        self.reports_sent = 0
        """How many reports it sent (the pace slows as they add up)."""

    def record(self, state: State, event: str, data: str) -> None:
        """One trace line (at ``workflow.now()``)."""
        self._run.record(state, event, data, workflow.now())

    def emit(self, kind: EventKind, text: str = "", **fields: Any) -> None:
        """Publish one event on the run's live stream (see ``events``)."""
        run = self._run
        self.publish(
            AgentEvent(
                kind=kind,
                step=run.memory.step,
                state=run.state.value,
                at=workflow.now(),
                text=text,
                run=run.runs,
                **fields,
            )
        )

    def publish(self, event: AgentEvent) -> None:
        """Publish one event as it is (``emit``'s, or a child's a parent tags and passes on)."""
        # Bounded, so the stream (kept in memory, its tail carried across continue-as-new)
        # stays small whatever the model writes: the whole text is in status and the trace.
        self._events.publish(events.bounded(event))
        sub = self._run.input.config.subagents
        if sub is not None and sub.depth > 0:  # a sub-agent: its parent's stream shows it too
            self.outbox.append(event)
            if len(self.outbox) > events.REPORTED_EVENTS:
                self.outbox_dropped += len(self.outbox) - events.REPORTED_EVENTS
                del self.outbox[: -events.REPORTED_EVENTS]
        # Keep the newest items only (the activity's token batches count too); offsets go on.
        end = self.stream_end()
        if end > events.EVENTS_KEPT:
            self.stream.truncate(end - events.EVENTS_KEPT)

    def stream_end(self) -> int:
        """The stream's next offset, from its own offset query (what a watcher would see)."""
        handler = workflow.get_query_handler(events.OFFSET_QUERY)
        if handler is None:
            raise ApplicationError(
                f"the workflow stream registered no {events.OFFSET_QUERY} query",
                non_retryable=True,
            )
        return int(handler())

    def upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        """Keep AgentState / AgentStep / AgentModel current: the changes wait (the newest value
        of each wins) until the run is about to wait or end (``send_attributes``)."""
        if not self._run.input.config.search_attributes:
            return
        for update in updates:
            self._pending_attributes[update.key.name] = update

    def send_attributes(self, *, exact: bool = False) -> None:
        """Send the held changes, unless they are only a step's own moves (``_held``);
        ``exact``: the run is about to hand over or end, so visibility must hold every value."""
        pending = self._pending_attributes
        if not pending or self._held(pending, exact):
            return
        if self._run.lean_start:
            self._drop_shown(pending)  # after ``_held``, which reads the whole change
            if not pending:
                return
        workflow.upsert_search_attributes(list(pending.values()))
        self._sent_at = workflow.now()
        pending.clear()

    def _drop_shown(self, pending: dict[str, SearchAttributeUpdate[Any]]) -> None:
        """Leave out what visibility shows already, and a step state's ``Done`` (the run ends
        on its close status): only for a run started with what it shows first."""
        shown = workflow.info().typed_search_attributes
        for name, update in list(pending.items()):
            if shown.get(update.key) == update.value:
                del pending[name]
        state = pending.get(sa.AGENT_STATE.name)
        if (
            state is not None
            and state.value == State.DONE.value
            and shown.get(sa.AGENT_STATE) in _STEP_STATES
            and not set(pending) - _STEP_ATTRIBUTES
        ):
            pending.clear()

    def _held(self, pending: dict[str, SearchAttributeUpdate[Any]], exact: bool) -> bool:
        """Whether these changes are only a step's own moves (``Planning`` <-> ``Acting`` or
        ``PostToolsHook``, the step counted), held: always on the way to the tools or the
        hooks, before a model call until ``STEP_ATTRIBUTES_EVERY`` has passed since the last
        upsert, never when ``exact``."""
        state = pending.get(sa.AGENT_STATE.name)
        # What visibility holds: this run's upserts, and what a hand-over carried to it.
        shown = workflow.info().typed_search_attributes.get(sa.AGENT_STATE)
        if (
            exact
            or state is None
            or state.value not in _STEP_STATES
            or shown not in _STEP_STATES
            or set(pending) - _STEP_ATTRIBUTES
        ):
            return False
        if state.value in _HELD_STATES:
            return True
        every = timedelta(seconds=self._run.input.config.step_attributes_every_seconds)
        return workflow.now() - self._sent_at < every

    def show(self) -> None:
        """The Web UI's current details: where the run is, in a few lines of markdown."""
        workflow.set_current_details(status.details(self._run, workflow.now(), self.outage))

    def store_outage(self, outage: Outage | None) -> None:
        """A call waits for the store or a worker (``outage``), or it answered (``None``): one
        trace line and one stream event each way, and the Web UI details say it."""
        before, self.outage = self.outage, outage
        state = self._run.state
        if outage is not None and before is None:
            self.record(state, "WaitingForWorker" if outage.worker else "WaitingForStore",
                        outage.describe())  # fmt: skip
            self.emit("outage", f"waiting: {outage.describe()}", ok=False)
        elif outage is None and before is not None:
            answered = (
                "a worker took the call" if before.worker else f"{before.where} answers again"
            )
            self.record(state, "WorkerAnswered" if before.worker else "StoreAnswered", answered)
            self.emit("outage", answered, ok=True)
        self.show()
