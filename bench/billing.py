"""What Temporal Cloud bills, counted from a run's history and from the server's own counters.

Cloud's billable actions (https://docs.temporal.io/cloud/actions) are of two sorts here:

- those a **history** records (``count_history``, over every history ``run_histories`` finds: a
  run's continue-as-new chain and its children's): a workflow started (the client's start, each
  continue-as-new; a child's start is two actions, on its parent's
  ``StartChildWorkflowExecutionInitiated``, and not again on the child's own start), each
  activity scheduled and each retry of it, each timer started, each signal received, each update
  accepted, each search-attribute upsert (not one of ``TemporalChangeVersion`` alone, which Cloud
  exempts), the markers of one workflow task as one action (local activities', and
  ``workflow.patched``'s, which the server's own counter bills alike) plus each local activity
  retry, workflow-options updates and Nexus operations. A retried activity attempt leaves no
  event of its own: the activity's one ``ActivityTaskStarted`` is written when it closes, and its
  ``attempt`` says how many attempts there were;
- those **no history** holds, read from the server's Prometheus metrics (``read_counters``):
  ``RecordActivityTaskHeartbeat`` and ``...ById`` requests, the heartbeats that reached the
  server, and ``QueryWorkflow`` requests. The server's own ``action`` counter (its estimate of
  Cloud's actions, by action type) is read beside them, as a check.

Rejected updates are billed and written nowhere; nothing here counts them.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

PRICE_PER_MILLION_ACTIONS_USD = 50.0
"""Temporal Cloud's list price: Pay-As-You-Go, the first 5M actions of a month on the Business,
Enterprise and Mission Critical plans and every action on the Developer plan ($45 to $25 a
million above that, by volume). https://docs.temporal.io/cloud/pricing#payg-action-pricing,
read on 2026-12-02."""
PRICE_SOURCE = "docs.temporal.io/cloud/pricing (Pay-As-You-Go, first 5M a month), read 2026-12-02"


class Kind(StrEnum):
    """The kinds of billable action (the benchmark's table groups them in five columns)."""

    ACTIVITY = "activity attempts"
    HEARTBEAT = "heartbeats"
    SIGNAL = "signals"
    TIMER = "timers"
    START = "workflow starts"
    CHILD = "child workflow starts"
    UPDATE = "updates"
    UPSERT = "search attribute upserts"
    MARKERS = "markers (local activities, patches)"
    QUERY = "queries"
    OTHER = "other"


CHANGE_VERSION = "TemporalChangeVersion"
"""The search attribute ``workflow.patched`` upserts; Cloud does not bill an upsert of it alone."""


@dataclass
class Tally:
    """Billable actions by kind; activity attempts by activity type and signals by name (where
    those kinds go); upserts of ``TemporalChangeVersion`` alone, which Cloud does not bill."""

    actions: Counter[Kind] = field(default_factory=Counter)
    attempts: Counter[str] = field(default_factory=Counter)
    signals: Counter[str] = field(default_factory=Counter)
    exempt_upserts: int = 0

    def add(self, other: Tally) -> None:
        self.actions.update(other.actions)
        self.attempts.update(other.attempts)
        self.signals.update(other.signals)
        self.exempt_upserts += other.exempt_upserts

    @property
    def total(self) -> int:
        return sum(self.actions.values())


def count_history(events: Iterable[HistoryEvent]) -> Tally:
    """The billable actions one run's history records (heartbeats and queries are in none)."""
    tally = Tally()
    activity_types: dict[int, str] = {}
    marker_tasks: set[int] = set()
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            # A child's first run was billed on its parent's initiation (two actions there);
            # its continue-as-new runs, like anyone's, are starts of their own.
            child = started.HasField("parent_workflow_execution")
            if not child or started.continued_execution_run_id:
                tally.actions[Kind.START] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            activity_types[event.event_id] = name
            tally.actions[Kind.ACTIVITY] += 1
            tally.attempts[name] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            # Written once, when the activity closes, with the attempt that closed it: the
            # attempts before it failed or timed out and were retried without an event.
            attrs = event.activity_task_started_event_attributes
            retries = max(0, attrs.attempt - 1)
            tally.actions[Kind.ACTIVITY] += retries
            tally.attempts[activity_types.get(attrs.scheduled_event_id, "?")] += retries
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            tally.actions[Kind.TIMER] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            tally.actions[Kind.SIGNAL] += 1
            tally.signals[event.workflow_execution_signaled_event_attributes.signal_name] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            tally.actions[Kind.UPDATE] += 1
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if set(fields.indexed_fields) - {CHANGE_VERSION}:
                tally.actions[Kind.UPSERT] += 1
            else:
                tally.exempt_upserts += 1
        elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            tally.actions[Kind.CHILD] += 2  # the intent recorded, and the start
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            # All of one workflow task's markers are one action: its local activities' (and
            # ``workflow.patched``'s, which the server's own counter bills alike).
            marker_tasks.add(
                event.marker_recorded_event_attributes.workflow_task_completed_event_id
            )
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            metering = event.workflow_task_completed_event_attributes.metering_metadata
            tally.actions[Kind.MARKERS] += metering.nonfirst_local_activity_execution_attempts
        elif kind in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED,
            EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED,
            EventType.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED,
        ):
            tally.actions[Kind.OTHER] += 1
    tally.actions[Kind.MARKERS] += len(marker_tasks)
    return tally


async def run_histories(client: Client, workflow_id: str, run_id: str) -> list[list[HistoryEvent]]:
    """The histories of a run, of the runs it continued as, and of its children's chains."""
    histories: list[list[HistoryEvent]] = []
    chains = [(workflow_id, run_id)]
    while chains:
        chain_id, next_run = chains.pop()
        while next_run:
            handle = client.get_workflow_handle(chain_id, run_id=next_run)
            events = list((await handle.fetch_history()).events)
            histories.append(events)
            next_run = ""
            for event in events:
                if event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                    child = event.child_workflow_execution_started_event_attributes
                    execution = child.workflow_execution
                    chains.append((execution.workflow_id, execution.run_id))
                elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                    attrs = event.workflow_execution_continued_as_new_event_attributes
                    next_run = attrs.new_execution_run_id
    return histories


# ----------------------------------------------------------------------------------------------
# The server's own counters
# ----------------------------------------------------------------------------------------------

HEARTBEAT_OPERATIONS = frozenset({"RecordActivityTaskHeartbeat", "RecordActivityTaskHeartbeatById"})
QUERY_OPERATION = "QueryWorkflow"
SETTLE_SECONDS = 0.5
"""Counters are read until three readings this far apart agree: the server counts a workflow
task's actions after it answered it, later still on a loaded machine."""
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ServerCounters:
    """What the server counted in one namespace so far: its frontend's heartbeat and query
    requests, and its own ``action`` counter by action type."""

    heartbeats: float = 0.0
    queries: float = 0.0
    actions: tuple[tuple[str, float], ...] = ()

    @property
    def action_total(self) -> float:
        return sum(value for _, value in self.actions)

    def since(self, before: ServerCounters) -> ServerCounters:
        earlier = dict(before.actions)
        return ServerCounters(
            self.heartbeats - before.heartbeats,
            self.queries - before.queries,
            tuple(
                (kind, value - earlier.get(kind, 0.0))
                for kind, value in self.actions
                if value != earlier.get(kind, 0.0)
            ),
        )


def samples(text: str) -> Iterable[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: (name, labels, value)."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:  # a comment, a blank line
            continue
        labels = {m["key"]: m["value"] for m in _LABEL.finditer(match["labels"] or "")}
        yield match["name"], labels, float(match["value"])


def server_counters(text: str, namespace: str) -> ServerCounters:
    """The counters of ``namespace`` in the server's metrics page."""
    heartbeats = queries = 0.0
    actions: dict[str, float] = {}
    for name, labels, value in samples(text):
        if labels.get("namespace") != namespace or labels.get("service_name") != "frontend":
            continue
        operation = labels.get("operation", "")
        if name == "service_requests" and operation in HEARTBEAT_OPERATIONS:
            heartbeats += value
        elif name == "service_requests" and operation == QUERY_OPERATION:
            queries += value
        elif name == "action":
            kind = labels.get("action_type", operation)
            actions[kind] = actions.get(kind, 0.0) + value
    return ServerCounters(heartbeats, queries, tuple(sorted(actions.items())))


async def read_counters(http: httpx.AsyncClient, url: str, namespace: str) -> ServerCounters:
    """The server's counters once they stand still (three readings ``SETTLE_SECONDS`` apart)."""
    previous: ServerCounters | None = None
    same = 0
    for _ in range(60):
        response = await http.get(url)
        response.raise_for_status()
        counters = server_counters(response.text, namespace)
        same = same + 1 if counters == previous else 0
        if same == 2:
            return counters
        previous = counters
        await asyncio.sleep(SETTLE_SECONDS)
    raise RuntimeError(f"the server's counters at {url} did not settle")
