"""Sent marks: an effect that must not happen twice is marked before it starts, and a later
attempt of the same activity that finds the mark says "outcome unknown" instead of repeating it.

A Temporal activity attempt can be lost after its effect: its worker is killed after the
command ran but before the result reached the server, or the worker is alive but so busy that
the attempt's heartbeat timed out, and the server scheduled the next attempt while the first one
was still finishing. The next attempt must not run a command, an MCP call that is not safe to
repeat, or a file edit again: its effect is done, or may be.

So before the effect, the attempt records a heartbeat whose details name the call
(``{"treadle_sent": CALL_ID}``) and waits until the server holds it: it reads the run's pending
activity back (``DescribeWorkflowExecution``, not a billed action) until that attempt's details
carry the mark. The SDK sends a first heartbeat at once and a later one when its throttle since
the one before has passed (``THROTTLE_SHARE`` of the heartbeat timeout, at most a minute, on a
worker left at the SDK's default; TreadlePlugin's workers send each beat); a busy worker may
take longer still, so no fixed wait is trusted. A mark the server does not confirm within
``CONFIRM_SECONDS`` fails the attempt before its effect (``SentMarkUnconfirmed``, retried).
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

What it costs: one heartbeat (a billed Temporal Cloud action) and one or a few reads of the
run's description (not billed) per call that is not safe to repeat, and the heartbeat's round
trip before its effect (up to the throttle when the attempt beat already, as an MCP call after a
slow server start does). Tools safe to repeat (reading, listing, writing a whole file, a custom
tool declared ``idempotent`` or not ``mutating``) are not marked. Since the effect starts only
once the server holds the mark, a worker killed at any point leaves either no effect or a mark.
An attempt whose mark was confirmed late, after it had already given up (the server reachable
again only then), leaves a mark with no effect: the model is told the outcome is unknown,
which is true of what the next attempt can know.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from treadle.activities.heartbeat import beat, carry, heartbeating, last_beat

__all__ = [
    "SENT_MARK",
    "call_activity_id",
    "mark_sent",
    "outcome_unknown",
    "run_once",
    "sent_before",
    "sent_mark_in",
]

T = TypeVar("T")

SENT_MARK = "treadle_sent"
"""Key of the heartbeat detail that names a call whose effect may have happened."""
THROTTLE_SHARE = 0.8
MAX_THROTTLE_SECONDS = 60.0
"""The SDK sends an attempt's heartbeats at most every ``THROTTLE_SHARE`` of its heartbeat
timeout (and at most a minute apart, its default ``max_heartbeat_throttle_interval``); a later
one waits for its turn."""
CONFIRM_SECONDS = 60.0
"""How long an attempt waits for the server to hold its sent mark (beyond the SDK's throttle)
before it fails without its effect: a server unreachable that long is an outage the attempt's
retries wait out."""
CONFIRM_FIRST_READ_SECONDS = 0.02
CONFIRM_READ_EVERY_SECONDS = 0.5
"""The first read of the run's description comes this soon after the beat leaves; later ones
back off to every half second."""
KEPT_ATTEMPTS = 1024
"""The latest attempts of calls not safe to repeat this worker keeps, for a later attempt of
the same activity to take their outcome (``run_once``)."""


@dataclasses.dataclass
class _Attempt:
    """One attempt of a call not safe to repeat on this worker: which (its activity's id and
    attempt number), and its effect once started (``None`` while it marks the call sent, and
    for good if it never got further)."""

    which: tuple[str, int]
    effect: asyncio.Future[Any] | None = None


_attempts: OrderedDict[tuple[str, str, str], _Attempt] = OrderedDict()
"""This worker's attempts of calls not safe to repeat, by activity (workflow id, run id,
activity id: the same for every attempt), the latest last."""


_first_activity: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "treadle_first_activity", default=None
)
"""The activity this call was first made as, when the workflow made it again as a new one
(``run_once``'s ``follows``), for what the call's attempts share: its command's processes."""


def call_activity_id() -> str:
    """The id of the activity this call was first made as: the running one's, unless the
    workflow made the call again after every attempt of the first lost its worker."""
    return _first_activity.get() or activity.info().activity_id


def _activity_key() -> tuple[str, str, str]:
    info = activity.info()
    return (info.workflow_id or "", info.workflow_run_id or "", call_activity_id())


async def run_once(
    call_id: str,
    run: Callable[[], Awaitable[T]],
    unknown: Callable[[], Awaitable[T]],
    *,
    follows: str | None = None,
    marked: bool = False,
) -> T:
    """``run()`` once for ``call_id``, whatever becomes of this attempt.

    - An earlier attempt of the same activity that this worker ran (or runs) is waited for,
      heartbeating, and its outcome is this one's;
    - else an earlier attempt marked the call sent (another worker's, or one that died):
      ``unknown()``, nothing run; an earlier attempt of this worker's that was given up before
      its effect started does not count (this worker knows nothing ran);
    - else an attempt the server has given up before it even began here (the worker was too
      busy to start it within its heartbeat timeout) does not start the effect: it fails, and
      the attempt after it runs the call;
    - else the call is marked sent and run. An attempt the server gives up while it runs (its
      heartbeat came too late: the SDK cancels it as no longer found, or timed out) is not
      cut short: its effect runs to its end, for the next attempt to take. Any other
      cancellation (the run's, a worker shutting down) stops it.

    ``follows`` and ``marked`` come from the workflow when it made the call again as a new
    activity after every attempt of the one before lost its worker: ``follows`` is the id of
    the activity the call was first made as (its attempts and those of every activity after it
    are this call's earlier attempts), ``marked`` says the last one had marked the call sent."""
    if not activity.in_activity():
        return await run()
    _first_activity.set(follows)  # the call's attempts, in every activity, share one key
    key = _activity_key()
    info = activity.info()
    this = _Attempt((info.activity_id, info.attempt))
    kept = _attempts.get(key)
    earlier = kept if kept is not None and kept.which != this.which else None
    if earlier is not None and earlier.effect is not None:
        effect = this.effect = earlier.effect  # an attempt after this one takes it over too
        _attempts[key] = this
        carry({SENT_MARK: call_id})  # this attempt's beats must not wipe the mark out
        async with heartbeating():
            await asyncio.wait({effect})  # this attempt's own cancellation goes through
        if effect.cancelled() or effect.exception() is not None:
            return await unknown()  # cancelled or failed: whether its effect happened is unknown
        activity.logger.info("tool.outcome_taken_from_earlier_attempt call_id=%s", call_id)
        result: T = effect.result()
        return result
    # An earlier attempt here that never started its effect (given up while it marked the call
    # sent) left a mark with nothing behind it: this worker knows, so the call runs now.
    if earlier is None and (marked or sent_before(call_id)):
        return await unknown()
    if _started_too_late():
        raise ApplicationError(
            "this attempt began after the server gave it up (the worker was busy): not run",
            type="AttemptGivenUp",
        )
    _attempts[key] = this  # an earlier attempt still marking sees it is superseded
    while len(_attempts) > KEPT_ATTEMPTS:
        _attempts.popitem(last=False)
    await mark_sent(call_id)
    if _attempts.get(key) is not this:
        raise ApplicationError(
            "a later attempt of this call took over while it was marked sent: not run",
            type="AttemptGivenUp",
        )
    effect = asyncio.ensure_future(run())
    effect.add_done_callback(_retrieved)
    this.effect = effect
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
    return any(_names(detail, call_id) for detail in activity.info().heartbeat_details)


async def mark_sent(call_id: str, *details: Any) -> dict[str, str]:
    """Record that ``call_id``'s effect starts now (with ``details`` beside the mark) and wait
    until the server holds it. Every later beat of the attempt carries the mark too (a
    heartbeat replaces the details before it: ``heartbeat.carry``). Returns the mark.

    Raises ``SentMarkUnconfirmed`` (retryable; nothing was run) when the server does not
    confirm the mark within the throttle and ``CONFIRM_SECONDS``."""
    mark = {SENT_MARK: call_id}
    if not activity.in_activity():
        return mark
    before = last_beat()
    carry(mark)
    beat(*details)
    wait = 0.0
    timeout = activity.info().heartbeat_timeout
    if before is not None and timeout:
        throttle = min(timeout.total_seconds() * THROTTLE_SHARE, MAX_THROTTLE_SECONDS)
        wait = max(0.0, before + throttle - time.monotonic())
    await asyncio.sleep(wait + CONFIRM_FIRST_READ_SECONDS)
    if not await _server_holds(call_id, CONFIRM_SECONDS):
        raise ApplicationError(
            f"the server did not confirm within {CONFIRM_SECONDS:.0f}s that call {call_id} "
            "was marked sent: not run",
            type="SentMarkUnconfirmed",
        )
    return mark


async def _server_holds(call_id: str, within: float) -> bool:
    """Whether the server's record of this attempt carries ``call_id``'s sent mark, read again
    (backing off) until it does or ``within`` seconds pass. With no client to read it (an
    activity run by ``ActivityEnvironment``) or no heartbeats to carry it (a local activity)
    there is nothing to confirm: ``True``."""
    info = activity.info()
    try:
        client = activity.client()
    except RuntimeError:
        return True
    if info.is_local or info.workflow_id is None:
        return True  # no heartbeats kept, or no run to read them from
    handle = client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    pause = CONFIRM_FIRST_READ_SECONDS
    while True:
        try:
            described = await handle.describe(rpc_timeout=timedelta(seconds=10))
        except RPCError as err:
            activity.logger.warning("sent_mark.confirm_read_failed call_id=%s: %s", call_id, err)
        else:
            for pending in described.raw_description.pending_activities:
                if pending.activity_id != info.activity_id or pending.attempt != info.attempt:
                    continue
                held = await client.data_converter.decode(pending.heartbeat_details.payloads)
                if any(_names(detail, call_id) for detail in held):
                    return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(pause)
        pause = min(pause * 2, CONFIRM_READ_EVERY_SECONDS)


def sent_mark_in(failure: BaseException, call_id: str) -> bool:
    """Whether an activity that failed with ``failure`` (its last attempt's heartbeat timed
    out) had marked ``call_id`` sent: its last heartbeat's details, as the workflow reads them
    from history (deterministic: no I/O)."""
    cause = getattr(failure, "cause", None)
    details = getattr(cause, "last_heartbeat_details", ())
    return any(_names(detail, call_id) for detail in details)


def _names(detail: Any, call_id: str) -> bool:
    return isinstance(detail, dict) and detail.get(SENT_MARK) == call_id


def outcome_unknown(tool: str) -> str:
    """What the model reads when a call that is not safe to repeat may have run already."""
    return (
        f"outcome unknown: an earlier attempt of this {tool} call was lost after it started "
        "(its worker died or stopped answering), so it was not run again; check its effect "
        "before calling again"
    )
