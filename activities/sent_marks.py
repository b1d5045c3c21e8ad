"""Sent marks: an effect that must not happen twice is marked before it starts, and a later
attempt of the same activity that finds the mark says "outcome unknown" instead of repeating it.

A Temporal activity attempt can be lost after its effect: its worker is killed after the
command ran but before the result reached the server, or the worker is alive but so busy that
the attempt's heartbeat timed out, and the server scheduled the next attempt while the first one
was still finishing. The next attempt must not run a command, an MCP call that is not safe to
repeat, or a file edit again: its effect is done, or may be.

So before the effect, the attempt records a heartbeat whose details name the call
(``{"treadle_sent": CALL_ID}``), and waits until the worker's SDK has sent it: at once when it is
the attempt's first heartbeat (the SDK sends a first one without delay), else once the SDK's
throttle since the one before has passed (``THROTTLE_SHARE`` of the heartbeat timeout, at most
a minute, on a worker left at the SDK's default; TreadlePlugin's workers send each beat).
Temporal keeps an activity's last heartbeat details for its next attempt, whichever worker runs
it (``activity.info().heartbeat_details``). An attempt that finds its call named
there does nothing and tells the model the outcome is unknown (``outcome_unknown``).

A lost attempt on a worker that is alive but busy usually finishes its effect anyway (its
result just reaches a server that no longer waits for it), and the next attempt is often given
to the same worker. So the worker keeps its latest attempts of such calls (``run_once``): a
later attempt of the same activity waits for the earlier one while it runs and takes what it
returned; an attempt the server gave up while its effect ran is not cut short (the next one
takes its outcome); an attempt the server gave up before the worker even began it does not
start. Only an earlier attempt this worker does not know (another worker's, or one that was
cancelled or failed) makes the outcome unknown.

What it costs: one heartbeat (a billed Temporal Cloud action) per call that is not safe to
repeat, and about a tenth of a second before its effect (up to the throttle when the attempt
beat already, as an MCP call after a slow server start does). Tools safe to repeat (reading,
listing, writing a whole file, a custom tool declared ``idempotent`` or not ``mutating``) are not
marked. A worker killed in the tenth of a second between the mark and its delivery leaves no
mark: that window is what remains, and the only one.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from treadle.activities.heartbeat import beat, carry, heartbeating, last_beat

__all__ = ["SENT_MARK", "mark_sent", "outcome_unknown", "run_once", "sent_before"]

T = TypeVar("T")

SENT_MARK = "treadle_sent"
"""Key of the heartbeat detail that names a call whose effect may have happened."""
THROTTLE_SHARE = 0.8
MAX_THROTTLE_SECONDS = 60.0
"""The SDK sends an attempt's heartbeats at most every ``THROTTLE_SHARE`` of its heartbeat
timeout (and at most a minute apart, its default ``max_heartbeat_throttle_interval``); a later
one waits for its turn."""
DELIVERY_SECONDS = 0.1
"""How long a heartbeat the SDK sends at once is given to leave the worker."""
KEPT_ATTEMPTS = 1024
"""The latest attempts of calls not safe to repeat this worker keeps, for a later attempt of
the same activity to take their outcome (``run_once``)."""

_attempts: OrderedDict[tuple[str, str, str], tuple[int, asyncio.Future[Any]]] = OrderedDict()
"""This worker's attempts of calls not safe to repeat, by activity (workflow id, run id,
activity id: the same for every attempt), each with its attempt number, the latest last."""


def _activity_key() -> tuple[str, str, str]:
    info = activity.info()
    return (info.workflow_id or "", info.workflow_run_id or "", info.activity_id)


async def run_once(
    call_id: str, run: Callable[[], Awaitable[T]], unknown: Callable[[], Awaitable[T]]
) -> T:
    """``run()`` once for ``call_id``, whatever becomes of this attempt.

    - An earlier attempt of the same activity that this worker ran (or runs) is waited for,
      heartbeating, and its outcome is this one's;
    - else an earlier attempt marked the call sent (another worker's, or one that died):
      ``unknown()``, nothing run;
    - else an attempt the server has given up before it even began here (the worker was too
      busy to start it within its heartbeat timeout) does not start the effect: it fails, and
      the attempt after it runs the call;
    - else the call is marked sent and run. An attempt the server gives up while it runs (its
      heartbeat came too late: the SDK cancels it as no longer found, or timed out) is not
      cut short: its effect runs to its end, for the next attempt to take. Any other
      cancellation (the run's, a worker shutting down) stops it."""
    if not activity.in_activity():
        return await run()
    key = _activity_key()
    attempt = activity.info().attempt
    kept = _attempts.get(key)
    earlier = kept[1] if kept is not None and kept[0] != attempt else None
    if earlier is not None:
        async with heartbeating():
            await asyncio.wait({earlier})  # this attempt's own cancellation goes through
        if earlier.cancelled() or earlier.exception() is not None:
            return await unknown()  # cancelled or failed: whether its effect happened is unknown
        activity.logger.info("tool.outcome_taken_from_earlier_attempt call_id=%s", call_id)
        result: T = earlier.result()
        return result
    if sent_before(call_id):
        return await unknown()
    if _started_too_late():
        raise ApplicationError(
            "this attempt began after the server gave it up (the worker was busy): not run",
            type="AttemptGivenUp",
        )
    await mark_sent(call_id)
    effect = asyncio.ensure_future(run())
    effect.add_done_callback(_retrieved)
    _attempts[key] = (attempt, effect)
    while len(_attempts) > KEPT_ATTEMPTS:
        _attempts.popitem(last=False)
    try:
        return await asyncio.shield(effect)
    except asyncio.CancelledError:
        if not _given_up():
            effect.cancel()
        raise


LATE_MARGIN = timedelta(seconds=1)
"""How far past its heartbeat timeout an attempt that never beat must be before it is taken
for given up (room for the worker's clock against the server's)."""


def _started_too_late() -> bool:
    """The server started this attempt longer ago than its heartbeat timeout (and a margin),
    and it has not beaten: the server has given it up and may be running the next."""
    info = activity.info()
    timeout = info.heartbeat_timeout
    if not timeout or last_beat() is not None or info.started_time < KNOWN_SINCE:
        return False  # no timeout to miss, beaten already, or no start time (a test's info)
    return datetime.now(UTC) - info.started_time > timeout + LATE_MARGIN


KNOWN_SINCE = datetime(2000, 1, 1, tzinfo=UTC)
"""Start times before this are none at all (``ActivityEnvironment`` gives the epoch)."""


def _given_up() -> bool:
    """Whether this attempt is cancelled because the server no longer waits for it."""
    details = activity.cancellation_details()
    return details is not None and (details.not_found or details.timed_out)


def _retrieved(effect: asyncio.Future[Any]) -> None:
    """Mark a finished effect's failure as seen: no later attempt may come to ask for it."""
    if not effect.cancelled():
        effect.exception()


def sent_before(call_id: str) -> bool:
    """Whether an earlier attempt of this activity marked ``call_id`` as sent."""
    if not activity.in_activity():
        return False
    return any(
        isinstance(detail, dict) and detail.get(SENT_MARK) == call_id
        for detail in activity.info().heartbeat_details
    )


async def mark_sent(call_id: str, *details: Any) -> dict[str, str]:
    """Record that ``call_id``'s effect starts now (with ``details`` beside the mark) and wait
    until the worker has sent it. Every later beat of the attempt carries the mark too (a
    heartbeat replaces the details before it: ``heartbeat.carry``). Returns the mark."""
    mark = {SENT_MARK: call_id}
    if not activity.in_activity():
        return mark
    before = last_beat()
    carry(mark)
    beat(*details)
    wait = DELIVERY_SECONDS
    timeout = activity.info().heartbeat_timeout
    if before is not None and timeout:
        throttle = min(timeout.total_seconds() * THROTTLE_SHARE, MAX_THROTTLE_SECONDS)
        wait += max(0.0, before + throttle - time.monotonic())
    await asyncio.sleep(wait)
    return mark


def outcome_unknown(tool: str) -> str:
    """What the model reads when a call that is not safe to repeat may have run already."""
    return (
        f"outcome unknown: an earlier attempt of this {tool} call was lost after it started "
        "(its worker died or stopped answering), so it was not run again; check its effect "
        "before calling again"
    )
