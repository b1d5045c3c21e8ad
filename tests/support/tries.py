"""A model call's tries, read from a run's history.

The run makes each try of a model call an activity of one attempt (``calls._model_tries``): a
failed try is an ``ActivityTaskFailed`` of ``call_model``, and the wait before the next one (the
provider's backoff or ``Retry-After``) a timer the run starts right after it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory


@dataclass(frozen=True)
class FailedTry:
    message: str
    """The failure's message (the provider's error, as the activity put it)."""
    waited: timedelta | None
    """The timer the run started before the next try; ``None`` when none followed (the last
    try, or one made again at once)."""


def failed_model_tries(history: WorkflowHistory) -> list[FailedTry]:
    """Every failed try of ``call_model`` in ``history``, in order."""
    scheduled: set[int] = set()
    tries: list[FailedTry] = []
    waiting_after: int | None = None
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "call_model":
                scheduled.add(event.event_id)
            waiting_after = None
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failed = event.activity_task_failed_event_attributes
            if failed.scheduled_event_id in scheduled:
                tries.append(FailedTry(failed.failure.message, None))
                waiting_after = len(tries) - 1
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED and waiting_after is not None:
            wait = event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
            tries[waiting_after] = FailedTry(tries[waiting_after].message, wait)
            waiting_after = None
    return tries
