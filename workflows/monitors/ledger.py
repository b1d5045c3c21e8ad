"""A monitor's bookkeeping: check-ins, health, deadlines and statistics.

Pure functions of the state and of the instants they are given, so the rules are unit-tested
without Temporal and replay exactly; ``MonitorWorkflow`` adds the timers, signals, queries and the
event stream around them.

The rules:

- Health is unknown until the first result; then the latest result decides: ok -> healthy
  (consecutive failures reset), error -> failing, missed -> missed, timeout -> timeout. An
  in-progress check-in is not a result and leaves health alone.
- A run is expected at ``next_expected``; without a check-in by ``next_expected + margin`` the
  monitor writes one ``missed`` check-in (source system). While it is already missed, later
  periods without a check-in write nothing more: ``next_expected`` just moves on, and the next
  check-in (or an error / timeout in between) ends the episode.
- A check-in satisfies the expected run when it comes at or after it (up to a minute early, for
  clock skew, on schedules slower than two minutes); ``next_expected`` then moves to the run after
  it. Interval schedules count from the latest run's start.
- An in-progress check-in older than the max runtime becomes a ``timeout`` in place.
- Before a check-in is applied, every deadline up to its time is settled first, so the order in
  which Temporal delivers a late signal and a fired timer does not change the outcome.
- Paused and disabled monitors expect nothing; resuming expects the next scheduled run.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Literal

from treadle.workflows.monitors.models import (
    EVENT_OUTPUT_BYTES,
    FULL_OUTPUT_CHECKINS,
    HOURS_KEPT,
    OLD_OUTPUT_BYTES,
    RECENT_CHECKINS,
    REFUSALS_KEPT,
    CheckIn,
    CheckInSignal,
    CheckInSource,
    CheckInStatus,
    Health,
    HourCounts,
    IntervalSchedule,
    MonitorConfig,
    MonitorEvent,
    MonitorEventType,
    MonitorState,
    MonitorStats,
    MonitorStatus,
    MonitorView,
    Refusal,
    ViewRequest,
    WindowStats,
    truncate_output,
)

EARLY_TOLERANCE = timedelta(minutes=1)
"""How early a check-in may come and still count for the next expected run (clock skew)."""

WINDOWS: dict[Literal["day", "week", "month"], timedelta] = {
    "day": timedelta(days=1),
    "week": timedelta(days=7),
    "month": timedelta(days=30),
}

_HEALTH_OF = {
    CheckInStatus.OK: Health.HEALTHY,
    CheckInStatus.ERROR: Health.FAILING,
    CheckInStatus.MISSED: Health.MISSED,
    CheckInStatus.TIMEOUT: Health.TIMEOUT,
}
_EVENT_OF = {
    CheckInStatus.IN_PROGRESS: MonitorEventType.CHECKIN_STARTED,
    CheckInStatus.OK: MonitorEventType.CHECKIN_OK,
    CheckInStatus.ERROR: MonitorEventType.CHECKIN_ERROR,
    CheckInStatus.MISSED: MonitorEventType.MONITOR_MISSED,
    CheckInStatus.TIMEOUT: MonitorEventType.MONITOR_TIMEOUT,
}
_STATUS_EVENT = {
    MonitorStatus.ACTIVE: MonitorEventType.MONITOR_RESUMED,
    MonitorStatus.PAUSED: MonitorEventType.MONITOR_PAUSED,
    MonitorStatus.DISABLED: MonitorEventType.MONITOR_DISABLED,
}


class Refused(Exception):
    """A check-in the monitor does not accept; the message says why."""


def new_state(config: MonitorConfig, now: datetime) -> MonitorState:
    """A monitor created at ``now``: health unknown, the first run expected by the schedule."""
    return MonitorState(
        config=config,
        created_at=now,
        active_since=now,
        clock=now,
        next_expected=config.schedule.next_after(now, anchor=now),
    )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class MonitorLedger:
    """The rules above, applied to one ``MonitorState`` (which it changes in place)."""

    def __init__(self, state: MonitorState) -> None:
        self.state = state

    # ----------------------------------------------------------------------------------------
    # Deadlines
    # ----------------------------------------------------------------------------------------

    def missed_deadline(self) -> datetime | None:
        s = self.state
        if s.status is not MonitorStatus.ACTIVE or s.next_expected is None:
            return None
        return s.next_expected + s.config.margin

    def timeout_deadline(self) -> datetime | None:
        s = self.state
        limit = s.config.max_runtime
        run = self._open_run()
        if s.status is not MonitorStatus.ACTIVE or limit is None or run is None:
            return None
        return (run.started_at or run.created_at) + limit

    def next_deadline(self) -> datetime | None:
        """When the monitor must next look at the time (the workflow's timer), if ever."""
        deadlines = [d for d in (self.missed_deadline(), self.timeout_deadline()) if d is not None]
        return min(deadlines, default=None)

    def advance(self, until: datetime) -> list[MonitorEvent]:
        """Settle every deadline up to ``until``, oldest first."""
        events: list[MonitorEvent] = []
        while True:
            timeout, missed = self.timeout_deadline(), self.missed_deadline()
            if timeout is not None and timeout <= until and (missed is None or timeout <= missed):
                events += self._time_out(max(timeout, self.state.active_since))
            elif missed is not None and missed <= until:
                events += self._miss(max(missed, self.state.active_since), until, timeout)
            else:
                break
        self.state.clock = max(self.state.clock, until)
        return events

    def _miss(self, at: datetime, until: datetime, timeout: datetime | None) -> list[MonitorEvent]:
        s = self.state
        expected = s.next_expected
        if expected is None:  # missed_deadline() said otherwise; nothing to miss
            return []
        schedule, margin = s.config.schedule, s.config.margin
        if s.health is Health.MISSED:
            # Already missed: skip, in one step, every run whose deadline falls before the next
            # moment that matters; they would only repeat the same miss.
            horizon = until if timeout is None or timeout > until else timeout
            s.next_expected = schedule.next_after(max(expected, horizon - margin), anchor=expected)
            return []
        s.next_expected = schedule.next_after(expected, anchor=expected)
        checkin = self._add(
            status=CheckInStatus.MISSED,
            source=CheckInSource.SYSTEM,
            created_at=at,
            expected_at=expected,
            output=(
                f"missed: no check-in for the run expected at {_iso(expected)} by "
                f"{_iso(expected + margin)} ({s.config.margin_minutes} min margin)"
            ),
        )
        return self._result(checkin, at)

    def _time_out(self, at: datetime) -> list[MonitorEvent]:
        s = self.state
        run = self._open_run()
        if run is None or s.config.max_runtime_minutes is None:
            return []  # timeout_deadline() said otherwise; nothing runs
        started = run.started_at or run.created_at
        checkin = run.model_copy(
            update={
                "status": CheckInStatus.TIMEOUT,
                "source": CheckInSource.SYSTEM,
                "finished_at": at,
                "duration_seconds": (at - started).total_seconds(),
                "output": (
                    f"timeout: started at {_iso(started)}, no ok or error check-in within the "
                    f"{s.config.max_runtime_minutes} min max runtime"
                ),
                "output_truncated": False,
            }
        )
        self._replace(checkin)
        s.open_run = None
        return self._result(checkin, at)

    # ----------------------------------------------------------------------------------------
    # Check-ins
    # ----------------------------------------------------------------------------------------

    def record(self, signal: CheckInSignal, now: datetime) -> list[MonitorEvent]:
        """Apply a check-in received at ``now``; ``Refused`` leaves the state untouched."""
        s = self.state
        if s.status is MonitorStatus.DISABLED:
            raise Refused("the monitor is disabled; resume it to accept check-ins")
        if signal.ping_key is not None and not hmac.compare_digest(
            signal.ping_key.encode(), s.config.ping_key.encode()
        ):
            raise Refused("wrong ping key")
        at = now if signal.sent_at is None else min(signal.sent_at, now)
        at = max(at, s.clock)  # never before what the monitor has already settled
        events = self.advance(at)
        output, truncated = (None, False)
        if signal.output is not None:
            output, truncated = truncate_output(signal.output)

        if signal.status is CheckInStatus.IN_PROGRESS:
            checkin = self._add(
                status=CheckInStatus.IN_PROGRESS,
                source=signal.source,
                created_at=at,
                started_at=at,
                exit_code=signal.exit_code,
                output=output,
                output_truncated=truncated,
            )
            s.open_run = checkin.id
            s.last_checkin_at = at
            self._expect_after(at)
            return [*events, self._event(MonitorEventType.CHECKIN_STARTED, at, checkin)]

        run = self._open_run()
        if run is not None:
            started = run.started_at or run.created_at
            checkin = run.model_copy(
                update={
                    "status": signal.status,
                    "source": signal.source,
                    "finished_at": at,
                    "duration_seconds": signal.duration_seconds
                    if signal.duration_seconds is not None
                    else (at - started).total_seconds(),
                    "exit_code": signal.exit_code,
                    "output": output if output is not None else run.output,
                    "output_truncated": truncated if output is not None else run.output_truncated,
                }
            )
            self._replace(checkin)
            s.open_run = None
        else:
            started_at = (
                at - timedelta(seconds=signal.duration_seconds)
                if signal.duration_seconds is not None
                else None
            )
            checkin = self._add(
                status=signal.status,
                source=signal.source,
                created_at=at,
                started_at=started_at,
                finished_at=at,
                duration_seconds=signal.duration_seconds,
                exit_code=signal.exit_code,
                output=output,
                output_truncated=truncated,
            )
            self._expect_after(started_at or at)
        s.last_checkin_at = at
        return [*events, *self._result(checkin, at)]

    def refuse(self, reason: str, body: str, now: datetime) -> list[MonitorEvent]:
        """Keep a refused check-in in the refusal log."""
        s = self.state
        s.refusals = [*s.refusals, Refusal(at=now, reason=reason, body=body)][-REFUSALS_KEPT:]
        s.refused_total += 1
        return [self._event(MonitorEventType.CHECKIN_REFUSED, now, None, reason)]

    def set_status(self, status: MonitorStatus, now: datetime) -> list[MonitorEvent]:
        """Pause, disable or resume (idempotent). Resuming expects the next scheduled run."""
        s = self.state
        events = self.advance(now)
        if status is s.status:
            return events
        s.status = status
        if status is MonitorStatus.ACTIVE:
            s.active_since = now
            s.next_expected = s.config.schedule.next_after(now, anchor=now)
            message = f"resumed; next run expected at {_iso(s.next_expected)}"
        else:
            s.next_expected = None
            message = status.value
        return [*events, self._event(_STATUS_EVENT[status], now, None, message)]

    def deleted(self, now: datetime, reason: str | None) -> MonitorEvent:
        return self._event(MonitorEventType.MONITOR_DELETED, now, None, reason or "deleted")

    def _expect_after(self, start: datetime) -> None:
        """A run started at ``start``: move ``next_expected`` past the run it satisfies."""
        s = self.state
        expected = s.next_expected
        if s.status is not MonitorStatus.ACTIVE or expected is None:
            return
        schedule = s.config.schedule
        if isinstance(schedule, IntervalSchedule):
            s.next_expected = max(expected, schedule.next_after(start, anchor=start))
            return
        if start < expected:
            following = schedule.next_after(expected)
            tolerance = min(EARLY_TOLERANCE, (following - expected) / 2)
            if expected - start > tolerance:
                return  # an extra run ahead of the expected one: still expect that one
        s.next_expected = schedule.next_after(max(start, expected))

    def _result(self, checkin: CheckIn, at: datetime) -> list[MonitorEvent]:
        """Count a check-in that reached a final status and let it decide the health."""
        s = self.state
        before = s.health
        if checkin.status is CheckInStatus.OK:
            s.consecutive_failures = 0
        else:
            s.total_failures += 1
            s.consecutive_failures += 1
        s.health = _HEALTH_OF[checkin.status]
        self._count_hour(checkin)
        events = [self._event(_EVENT_OF[checkin.status], at, checkin)]
        if s.health is Health.HEALTHY and before not in (Health.HEALTHY, Health.UNKNOWN):
            events.append(
                self._event(
                    MonitorEventType.MONITOR_HEALTHY, at, checkin, f"recovered from {before}"
                )
            )
        return events

    # ----------------------------------------------------------------------------------------
    # The check-in log
    # ----------------------------------------------------------------------------------------

    def _add(self, **fields: object) -> CheckIn:
        s = self.state
        checkin = CheckIn.model_validate({"id": s.next_id, **fields})
        s.next_id += 1
        s.total_checkins += 1
        recent = [*s.recent, checkin]
        if len(recent) > FULL_OUTPUT_CHECKINS:
            index = len(recent) - FULL_OUTPUT_CHECKINS - 1
            recent[index] = _shorten(recent[index])
        s.recent = recent[-RECENT_CHECKINS:]
        return checkin

    def _replace(self, checkin: CheckIn) -> None:
        s = self.state
        s.recent = [checkin if c.id == checkin.id else c for c in s.recent]

    def _open_run(self) -> CheckIn | None:
        s = self.state
        if s.open_run is None:
            return None
        for checkin in reversed(s.recent):
            if checkin.id == s.open_run:
                return checkin
        return None  # pushed out of the kept log by 500 newer check-ins: forget it

    def _count_hour(self, checkin: CheckIn) -> None:
        s = self.state
        completed = checkin.completed_at.astimezone(UTC)
        hour = completed.replace(minute=0, second=0, microsecond=0)
        field = checkin.status.value
        hours = list(s.hours)
        for index in range(len(hours) - 1, -1, -1):
            if hours[index].hour == hour:
                counts = hours[index]
                hours[index] = counts.model_copy(update={field: getattr(counts, field) + 1})
                break
            if hours[index].hour < hour:
                hours.insert(index + 1, HourCounts.model_validate({"hour": hour, field: 1}))
                break
        else:
            hours.insert(0, HourCounts.model_validate({"hour": hour, field: 1}))
        oldest = hours[-1].hour - timedelta(hours=HOURS_KEPT)
        s.hours = [h for h in hours if h.hour > oldest]

    def _event(
        self,
        kind: MonitorEventType,
        at: datetime,
        checkin: CheckIn | None,
        message: str | None = None,
    ) -> MonitorEvent:
        s = self.state
        if checkin is not None and checkin.output is not None:
            excerpt, cut = truncate_output(checkin.output, EVENT_OUTPUT_BYTES)
            checkin = checkin.model_copy(
                update={"output": excerpt, "output_truncated": checkin.output_truncated or cut}
            )
        if message is None:
            message = _summary(kind, checkin)
        return MonitorEvent(
            type=kind,
            slug=s.config.slug,
            at=at,
            health=s.health,
            consecutive_failures=s.consecutive_failures,
            message=message,
            checkin=checkin,
        )

    # ----------------------------------------------------------------------------------------
    # Views and statistics
    # ----------------------------------------------------------------------------------------

    def view(self, request: ViewRequest, now: datetime) -> MonitorView:
        s, c = self.state, self.state.config
        return MonitorView(
            slug=c.slug,
            name=c.name,
            schedule=c.schedule,
            schedule_text=c.schedule.describe(),
            margin_minutes=c.margin_minutes,
            max_runtime_minutes=c.max_runtime_minutes,
            status=s.status,
            health=s.health,
            ping_key=c.ping_key,
            created_at=s.created_at,
            next_expected=s.next_expected,
            missed_after=self.missed_deadline(),
            open_run=self._open_run(),
            last_checkin_at=s.last_checkin_at,
            total_checkins=s.total_checkins,
            total_failures=s.total_failures,
            consecutive_failures=s.consecutive_failures,
            stats=stats(s.hours, s.recent, request.as_of or now),
            recent=tuple(reversed(s.recent[-request.recent :])) if request.recent else (),
            refusals=tuple(s.refusals),
            refused_total=s.refused_total,
        )


def stats(hours: Iterable[HourCounts], recent: Iterable[CheckIn], now: datetime) -> MonitorStats:
    """Day, week and month statistics at ``now``."""
    hours, recent = list(hours), list(recent)
    return MonitorStats(
        day=window_stats("day", hours, recent, now),
        week=window_stats("week", hours, recent, now),
        month=window_stats("month", hours, recent, now),
    )


def window_stats(
    window: Literal["day", "week", "month"],
    hours: list[HourCounts],
    recent: list[CheckIn],
    now: datetime,
) -> WindowStats:
    """Counts from every hour that overlaps the window; durations of the kept ok / error runs."""
    start = now - WINDOWS[window]
    inside = [h for h in hours if h.hour + timedelta(hours=1) > start and h.hour <= now]
    ok = sum(h.ok for h in inside)
    error = sum(h.error for h in inside)
    missed = sum(h.missed for h in inside)
    timeout = sum(h.timeout for h in inside)
    durations = sorted(
        c.duration_seconds
        for c in recent
        if c.status in (CheckInStatus.OK, CheckInStatus.ERROR)
        and c.duration_seconds is not None
        and start < c.completed_at <= now
    )
    results = ok + error + missed + timeout
    return WindowStats(
        window=window,
        success=ok,
        failure=error,
        missed=missed,
        timeout=timeout,
        p50_seconds=percentile(durations, 50),
        p95_seconds=percentile(durations, 95),
        uptime_percent=round(100 * ok / results, 2) if results else None,
    )


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of sorted ``values`` (one of the values, never interpolated)."""
    if not values:
        return None
    rank = max(1, math.ceil(p / 100 * len(values)))
    return values[rank - 1]


def _summary(kind: MonitorEventType, checkin: CheckIn | None) -> str:
    """An event's one-line message: what happened, without the output."""
    if checkin is None:
        return kind.value
    run = f"run #{checkin.id}"
    took = "" if checkin.duration_seconds is None else f" after {checkin.duration_seconds:.1f} s"
    if kind is MonitorEventType.CHECKIN_STARTED:
        return f"{run} started"
    if kind is MonitorEventType.CHECKIN_OK:
        return f"{run} ok{took}"
    if kind is MonitorEventType.CHECKIN_ERROR:
        code = "" if checkin.exit_code is None else f" with exit code {checkin.exit_code}"
        return f"{run} failed{code}{took}"
    return checkin.output or kind.value  # missed / timeout: the monitor's own explanation


def _shorten(checkin: CheckIn) -> CheckIn:
    if checkin.output is None:
        return checkin
    excerpt, cut = truncate_output(checkin.output, OLD_OUTPUT_BYTES)
    if not cut:
        return checkin
    return checkin.model_copy(update={"output": excerpt, "output_truncated": True})
