"""Schedule arithmetic for cron monitors: when is the next run expected?

Pure and deterministic: every function is given the instant it reasons from and nothing reads the
clock, so ``MonitorWorkflow`` can call it inside the sandbox (the worker passes this module
through). Results are aware UTC datetimes.

Cron expressions are the classic five fields (minute, hour, day of month, month, day of week;
numbers, ``*``, ranges, lists, steps, and month / weekday names), matched against the wall clock of
an IANA time zone. Daylight-saving changes follow what Vixie cron and cronie do with a crontab:

- a wall time that does not exist (the hour skipped when clocks go forward) is expected at the
  instant the clock jumps, so ``30 2 * * *`` in America/New_York runs at 03:00 EDT that day;
- a wall time that happens twice (the hour repeated when clocks go back) is expected once, at its
  first occurrence.

Interval schedules are plain UTC arithmetic: every N minutes from an anchor.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

__all__ = [
    "ScheduleError",
    "check_cron",
    "check_timezone",
    "next_cron_time",
    "next_interval_time",
]

FIELDS = ("minute", "hour", "day of month", "month", "day of week")

_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
_DAYS = "sun|mon|tue|wed|thu|fri|sat"


def _field_pattern(value: str) -> re.Pattern[str]:
    item = rf"(?:\*|{value}(?:-{value})?)(?:/\d+)?"
    return re.compile(rf"{item}(?:,{item})*", re.IGNORECASE)  # matched with fullmatch


# Only standard syntax: croniter also knows extensions (L, W, #, and R for *random*, which would
# make a workflow nondeterministic), so each field is checked before croniter sees it.
_FIELD_PATTERNS = (
    _field_pattern(r"\d+"),
    _field_pattern(r"\d+"),
    _field_pattern(r"\d+"),
    _field_pattern(rf"(?:\d+|{_MONTHS})"),
    _field_pattern(rf"(?:\d+|{_DAYS})"),
)

_REFERENCE = datetime(2000, 1, 1)
"""Where a new expression is first evaluated, to prove it ever matches."""

_MAX_CANDIDATES = 1_000
"""Cron times skipped at most while looking for one after an instant (repeated hours skip a few)."""


class ScheduleError(ValueError):
    """An invalid cron expression or an unknown time zone; the message says which and why.

    A ``ValueError``, so pydantic validators may raise it and show the message as is.
    """


def check_cron(expression: str) -> str:
    """The expression with single spaces between its five fields; ``ScheduleError`` if invalid."""
    fields = expression.split()
    if len(fields) != len(FIELDS):
        raise ScheduleError(
            f"cron expression {expression!r} has {len(fields)} field(s); it needs 5: "
            "minute hour day-of-month month day-of-week (e.g. '30 2 * * *')"
        )
    for name, field, pattern in zip(FIELDS, fields, _FIELD_PATTERNS, strict=True):
        if not pattern.fullmatch(field):
            raise ScheduleError(
                f"cron expression {expression!r}: {name} field {field!r} is not standard cron "
                "syntax (numbers, *, ranges a-b, lists a,b, steps /n, month and weekday names)"
            )
    normalized = " ".join(fields)
    try:
        croniter(normalized, _REFERENCE).get_next(datetime)
    except CroniterBadDateError:
        raise ScheduleError(f"cron expression {expression!r} never matches a date") from None
    except (CroniterError, ValueError, KeyError) as exc:
        raise ScheduleError(f"cron expression {expression!r}: {_reason(exc)}") from None
    return normalized


_HOST_ZONES = frozenset({"localtime", "posixrules", "Factory"})
"""Files in a tz database that are not a place: the host's own zone, the host's default rules,
a placeholder. A schedule in one of them would mean different times on different hosts."""

_ZONE_HINT = "use an IANA name such as 'UTC', 'Europe/Berlin' or 'America/New_York'"


@functools.cache
def _zone_names() -> frozenset[str]:
    """The IANA zone names this host knows (its tz database and the tzdata package); read once."""
    return frozenset(available_timezones()) - _HOST_ZONES


def check_timezone(name: str) -> ZoneInfo:
    """The IANA time zone called ``name``; ``ScheduleError`` if there is none.

    Only names ``zoneinfo.available_timezones()`` lists count, without the host-dependent
    ``localtime``, ``posixrules`` and ``Factory``: ``ZoneInfo`` would also load those, or any file
    path under the tz database, with a meaning that depends on the host.
    """
    if name in _HOST_ZONES:
        raise ScheduleError(
            f"time zone {name!r} depends on the host and names no place: {_ZONE_HINT}"
        )
    if name not in _zone_names():
        raise ScheduleError(f"unknown time zone {name!r}: {_ZONE_HINT}")
    try:
        # The tz database is read from disk (or the tzdata package) once per name and cached.
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown time zone {name!r}: {_ZONE_HINT}") from None


def next_cron_time(expression: str, timezone: str, after: datetime) -> datetime:
    """The first time strictly after ``after`` at which the expression expects a run (UTC)."""
    zone = check_timezone(timezone)
    after_utc = _aware(after).astimezone(UTC)
    wall = after_utc.astimezone(zone).replace(tzinfo=None)
    candidates = croniter(check_cron(expression), wall)
    for _ in range(_MAX_CANDIDATES):
        at = _wall_to_utc(candidates.get_next(datetime), zone)
        if at > after_utc:
            return at
    raise ScheduleError(f"cron expression {expression!r} has no run after {after_utc.isoformat()}")


def next_interval_time(anchor: datetime, minutes: int, after: datetime) -> datetime:
    """The first ``anchor + k * minutes`` (k >= 1) strictly after ``after`` (UTC)."""
    if minutes < 1:
        raise ScheduleError(f"an interval must be at least 1 minute, not {minutes}")
    step = timedelta(minutes=minutes)
    anchor_utc = _aware(anchor).astimezone(UTC)
    after_utc = _aware(after).astimezone(UTC)
    first = anchor_utc + step
    if first > after_utc:
        return first
    return anchor_utc + ((after_utc - anchor_utc) // step + 1) * step


def _wall_to_utc(wall: datetime, zone: ZoneInfo) -> datetime:
    """Where a local wall time falls in UTC: its first occurrence, or the end of a DST gap."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first  # exists; when it happens twice, fold=0 is the first time
    # In a gap, fold=0 reads the wall time with the offset from before the jump (a UTC instant
    # after it) and fold=1 with the offset from after (an instant before it): the jump lies
    # between. Find it to the second.
    low = int(wall.replace(tzinfo=zone, fold=1).timestamp())  # before the jump
    high = int(first.timestamp())  # after it
    offset_after = first.astimezone(zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset_after:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def _aware(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ScheduleError(f"{moment.isoformat()} has no time zone; schedules need aware times")
    return moment


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    # croniter prefixes messages with the expression in brackets; it is already in ours.
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    if "out of range" in text:
        return (
            "a value is out of range (minute 0-59, hour 0-23, day of month 1-31, month 1-12, "
            "day of week 0-7)"
        )
    return text or type(exc).__name__
