"""Infrastructure a call waits out instead of failing: the store (a directory or S3) that cannot
be reached now. Pure data and functions; ``calls`` does the waiting.

An activity that finds the store unreachable fails at once with a non-retryable
``ApplicationError`` of type ``StoreUnavailable`` (``treadle.activities.errors``), so none of the
call's attempts is spent on it. The run then shows ``waiting: <store> is unreachable since
<time>`` (``status``, the stream, the Web UI details), waits in one ``wait_for_store``
activity that Temporal retries with backoff until the store answers (a retry's failure adds no
history event, so a days-long outage costs a handful), and makes the same call again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio.exceptions import ActivityError, ApplicationError

from treadle.workflows.base import Frozen

STORE_UNAVAILABLE = "StoreUnavailable"
"""The ``ApplicationError`` type an activity raises when the store cannot be reached now."""

FIRST_PROBE = timedelta(seconds=1)
"""The store is asked again this soon after it first failed to answer ..."""
LONGEST_PROBE_INTERVAL = timedelta(seconds=60)
"""... then twice as late each time, at most this long apart."""


class StoreProbe(Frozen):
    """Input of ``wait_for_store``: the store the call found unreachable, as it named itself."""

    where: str


class StoreAnswered(Frozen):
    """Result of ``wait_for_store``: the worker's store answered."""

    where: str


class Outage(Frozen):
    """A store a call waits for: where it is, since when, and what the call was told."""

    where: str
    since: datetime
    reason: str

    def describe(self) -> str:
        """``the store at … is unreachable since …`` (what ``status`` shows after ``waiting:``)."""
        return (
            f"{self.where} is unreachable since {self.since:%Y-%m-%d %H:%M:%S} UTC ({self.reason})"
        )


def unreachable_store(exc: ActivityError) -> str | None:
    """The store an activity found unreachable (its ``describe()``); ``None`` for any other
    failure, which is the call's own."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError) or cause.type != STORE_UNAVAILABLE:
        return None
    where = cause.details[0] if cause.details else None
    return where if isinstance(where, str) and where else "the store"


def pause(waits: int) -> timedelta:
    """How long a call that found the store unreachable again, right after it answered, waits
    before asking it (``waits`` times before): a store that answers the probe but fails the
    call must not make a loop as fast as activities run."""
    seconds = FIRST_PROBE.total_seconds() * 2 ** min(waits - 1, 10)
    return min(timedelta(seconds=seconds), LONGEST_PROBE_INTERVAL)
