"""Infrastructure a call waits out instead of failing: the store (a directory or S3) that cannot
be reached now, and a model call's worker that stopped answering. Pure data and functions;
``calls`` does the waiting.

An activity that finds the store unreachable fails at once with a non-retryable
``ApplicationError`` of type ``StoreUnavailable`` (``treadle.activities.errors``), so none of the
call's attempts is spent on it. The run then shows ``waiting: <store> is unreachable since
<time>`` (``status``, the stream, the Web UI details), waits in one ``wait_for_store``
activity that Temporal retries with backoff until the store answers (a retry's failure adds no
history event, so a days-long outage costs a handful), and makes the same call again.

A model call whose heartbeat timed out (its worker died, or was too busy to beat in time) is
made again at once, as a new try that spends none of the call's ``model_max_attempts``: the run
shows ``waiting: a worker stopped answering …`` until one answers. Only the provider's own
errors spend tries, each after the provider's backoff (``retry_delay``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

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
    """What a call waits for: the store (where it is) or a worker (``lost`` tries made again
    since), since when, and what the call was told."""

    where: str
    since: datetime
    reason: str
    lost: int = 0
    """Tries whose worker stopped answering; 0 for a store that cannot be reached."""

    @property
    def worker(self) -> bool:
        return self.lost > 0

    def describe(self) -> str:
        """What ``status`` shows after ``waiting:``."""
        since = f"{self.since:%Y-%m-%d %H:%M:%S} UTC"
        if self.worker:
            again = "made again" if self.lost == 1 else f"made again {self.lost} times"
            return f"a worker stopped answering {self.where} at {since} ({self.reason}); {again}"
        return f"{self.where} is unreachable since {since} ({self.reason})"


MODEL_RETRY_CAP = timedelta(seconds=60)
"""The longest wait between two tries of a model call, a provider's ``Retry-After`` included."""
PROVIDER_FIRST_RETRY = timedelta(seconds=1)
"""A provider's retryable error with no delay of its own waits this long, then twice as long
each time (1, 2, 4 ... s), up to ``MODEL_RETRY_CAP``."""


WORKER_SHUTDOWN = "WorkerShutdown"
"""The failure type of an attempt a worker handed back as it shut down (SIGTERM)."""
NOT_STARTED = frozenset({WORKER_SHUTDOWN, "AttemptGivenUp", "SentMarkUnconfirmed"})
"""Failure types of attempts that ran nothing of the call (``treadle.activities.sent_marks``):
handed back at shutdown, begun by a worker too busy to begin it in time, or unable to have the
server confirm the call was marked sent."""


def worker_lost(exc: ActivityError) -> bool:
    """The try's worker stopped answering (its heartbeat timed out: a dead or starved worker)
    or gave the attempt back without running anything: no failure of the call."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return cause.type in NOT_STARTED
    return isinstance(cause, TimeoutError) and cause.type is TimeoutType.HEARTBEAT


def lost_worker(before: Outage | None, exc: ActivityError, now: datetime) -> Outage:
    """The wait for a worker after one more lost try (``before``: the call's, if any)."""
    if before is None:
        what = f"during {exc.activity_type or 'the call'}"
        return Outage(where=what, since=now, reason="no heartbeat in time", lost=1)
    return before.model_copy(update={"lost": before.lost + 1})


def retry_delay(exc: ActivityError, failed: int) -> timedelta | None:
    """How long after its ``failed``-th provider failure a model call is tried again: the
    delay the activity set (the provider's ``Retry-After``, else its backoff), else the
    backoff; ``None`` when the failure is not to be retried (a refusal, a missing key)."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        if cause.non_retryable:
            return None
        if cause.next_retry_delay is not None:
            return min(cause.next_retry_delay, MODEL_RETRY_CAP)
    seconds = PROVIDER_FIRST_RETRY.total_seconds() * 2 ** min(failed - 1, 10)
    return min(timedelta(seconds=seconds), MODEL_RETRY_CAP)


def repeatable_fingerprint(exc: ActivityError) -> str | None:
    """The fingerprint a provider's failure carries when the same error again would mean the
    request itself is at fault (``ModelRequest.repeated``)."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError) or not cause.details:
        return None
    first = cause.details[0]
    return first if isinstance(first, str) and first.startswith(FINGERPRINT_PREFIX) else None


FINGERPRINT_PREFIX = "model-error:"
"""What a provider failure's fingerprint (its first detail) starts with."""


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
