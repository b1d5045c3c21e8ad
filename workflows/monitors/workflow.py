"""Cron monitors: one long-lived ``MonitorWorkflow`` per monitor (id ``monitor-<slug>``).

The workflow keeps time with durable timers, never by polling: it sleeps until the next deadline
(next expected run + margin, or an open run's start + max runtime) and settles it when the timer
fires, also when the worker was down at that moment. Check-ins arrive as ``checkin`` signals,
which Temporal accepts and keeps while no worker runs. The rules live in
``treadle.workflows.monitor_ledger``; this module adds timers, messages and the event stream.

Events are published on a ``WorkflowStream`` (topic ``events``): a durable, offset-addressed log
inside the workflow that the HTTP service turns into server-sent events.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError

from treadle.workflows import telemetry
from treadle.workflows.base import describe_errors
from treadle.workflows.monitors.ledger import MonitorLedger, Refused, new_state
from treadle.workflows.monitors.models import (
    EVENTS_TOPIC,
    CheckInSignal,
    DeleteRequest,
    MonitorEvent,
    MonitorInput,
    MonitorView,
    StatusChange,
    ViewRequest,
    body_excerpt,
)

EVENTS_KEPT = 100
"""Events retained in the stream (and carried through continue-as-new) for late subscribers."""


# A ValidationError in workflow code means bad data (an input another client built without our
# models): fail the run with the message instead of retrying its task forever.
@workflow.defn(failure_exception_types=[ValidationError])
class MonitorWorkflow:
    """One cron monitor: check-ins in, missed runs and timeouts out, by durable timers."""

    @workflow.init
    def __init__(self, input: MonitorInput) -> None:
        self._input = input
        # Created when the client started the workflow, not when a worker first ran it: a ping
        # that waited in Temporal for the first worker still falls after the creation.
        created = workflow.info().workflow_start_time
        self._ledger = MonitorLedger(input.state or new_state(input.config, created))
        # The stream registers its own signal, update and query handlers; it must be built here.
        self._stream = WorkflowStream(prior_state=input.stream)
        self._events = self._stream.topic(EVENTS_TOPIC, type=MonitorEvent)
        self._waiting_until: datetime | None = None
        self._wake = False
        self._deleted: DeleteRequest | None = None

    @workflow.run
    async def run(self, input: MonitorInput) -> MonitorView:
        while self._deleted is None:
            self._publish(self._ledger.advance(workflow.now()))
            if self._history_is_long():
                # Carry the whole state; the stream hands its log and offsets over, and waits
                # until no handler (a subscriber's long poll included) is still running.
                # The stream's own continue_as_new spelled out, for one option: a monitor lives
                # for ever, so its next run starts on the Worker Deployment's current build and
                # an old build drains (docs/upgrades.md; unversioned workers: ignored).
                self._trim_stream()
                self._stream.detach_pollers()
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    MonitorInput(
                        config=input.config,
                        state=self._ledger.state,
                        stream=self._stream.get_state(),
                        continue_as_new_after_events=input.continue_as_new_after_events,
                    ),
                    initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
                )
            deadline = self._ledger.next_deadline()
            self._waiting_until, self._wake = deadline, False
            # A timeout means the deadline came (asyncio.TimeoutError is the builtin since 3.11):
            # the next turn settles it.
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._wake,
                    # None: no timer at all while paused or disabled, only the next message.
                    timeout=None if deadline is None else deadline - workflow.now(),
                    timeout_summary="next deadline (missed run or max runtime)",
                )
        self._publish([self._ledger.deleted(workflow.now(), self._deleted.reason)])
        # Release subscribers' long polls so the run can complete.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._view(ViewRequest())

    # ----------------------------------------------------------------------------------------
    # Check-ins. A signal, so a ping is accepted by Temporal while no worker runs. The body is
    # validated here rather than by the data converter (which would drop a malformed signal with
    # only a worker log line): a refused check-in is kept in the refusal log and published, and
    # the monitor carries on.
    # ----------------------------------------------------------------------------------------

    @workflow.signal
    def checkin(self, body: Any = None) -> None:
        """``{"status": "in_progress" | "ok" | "error", "output": ..., "exit_code": ...}``."""
        now = workflow.now()
        try:
            signal = CheckInSignal.model_validate({} if body is None else body)
            events = self._ledger.record(signal, now)
        except ValidationError as exc:
            events = self._refuse(describe_errors(exc), body, now)
        except Refused as exc:
            events = self._refuse(str(exc), body, now)
        self._publish(events)
        self._wake_if_needed()

    def _refuse(self, reason: str, body: Any, now: datetime) -> list[MonitorEvent]:
        workflow.logger.warning(
            "monitor.checkin.refused", extra={"slug": self._input.config.slug, "why": reason}
        )
        return self._ledger.refuse(reason, body_excerpt(body), now)

    # ----------------------------------------------------------------------------------------
    # Updates: synchronous answers for the CLI. Refusals are raised in the validators, so a
    # refused update leaves nothing in the history.
    # ----------------------------------------------------------------------------------------

    @workflow.update
    def set_status(self, change: StatusChange) -> MonitorView:
        """Pause, disable or resume the monitor (idempotent); returns it as it is now."""
        self._publish(self._ledger.set_status(change.status, workflow.now()))
        self._wake_if_needed()
        return self._view(ViewRequest(recent=0))

    @set_status.validator
    def _validate_set_status(self, change: StatusChange) -> None:
        self._refuse_if_deleted()

    @workflow.update
    def delete(self, request: DeleteRequest) -> MonitorView:
        """Stop monitoring: the workflow completes with the monitor's final view."""
        self._deleted = request
        self._wake = True
        return self._view(ViewRequest(recent=0))

    @delete.validator
    def _validate_delete(self, request: DeleteRequest) -> None:
        self._refuse_if_deleted()

    def _refuse_if_deleted(self) -> None:
        if self._deleted is not None:
            raise ApplicationError("the monitor is being deleted", type="MonitorDeleted")

    @workflow.query
    def view(self, request: ViewRequest) -> MonitorView:
        """Health, schedule, next expected run, counters, statistics and recent check-ins."""
        return self._view(request)

    # ----------------------------------------------------------------------------------------
    # Internals
    # ----------------------------------------------------------------------------------------

    def _view(self, request: ViewRequest) -> MonitorView:
        return self._ledger.view(request, workflow.now())

    def _publish(self, events: list[MonitorEvent]) -> None:
        for event in events:
            self._events.publish(event)
            telemetry.monitor_event(event.slug, event.type.value)  # replay-safe counters
            workflow.logger.info(
                "monitor.event",
                extra={"slug": event.slug, "type": event.type.value, "health": event.health.value},
            )
        if events:
            self._trim_stream()

    def _trim_stream(self) -> None:
        """Keep the newest ``EVENTS_KEPT`` items of the stream.

        Where the log starts and ends is read from the stream itself, not counted here: any client
        may publish to it through its signal, and those items would otherwise never be trimmed.
        (``get_state`` is the stream's public view of its log; the log is at most a few hundred
        small items, so taking it after a publish costs little.)
        """
        state = self._stream.get_state()
        if len(state.log) > EVENTS_KEPT:
            self._stream.truncate(state.base_offset + len(state.log) - EVENTS_KEPT)

    def _wake_if_needed(self) -> None:
        """Wake the main loop when its timer would fire too late, or history is long.

        A deadline that moved later needs no wake-up: the old timer fires, finds nothing due and
        sleeps again, which costs less history than cancelling a timer on every check-in.
        """
        deadline = self._ledger.next_deadline()
        earlier = deadline is not None and (
            self._waiting_until is None or deadline < self._waiting_until
        )
        if earlier or self._history_is_long():
            self._wake = True

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return (
            info.get_current_history_length() >= self._input.continue_as_new_after_events
            or info.is_continue_as_new_suggested()
        )


WORKFLOWS: list[type[Any]] = [MonitorWorkflow]
"""Workflow classes the worker registers for cron monitoring."""

__all__ = ["WORKFLOWS", "MonitorWorkflow"]
