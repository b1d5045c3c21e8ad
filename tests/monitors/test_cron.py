"""Schedule arithmetic: cron expressions in IANA time zones (daylight-saving changes included),
intervals, and clear errors for what cannot be a schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from treadle.workflows.cron import (
    ScheduleError,
    check_cron,
    check_timezone,
    next_cron_time,
    next_interval_time,
)
from treadle.workflows.monitors.models import CronSchedule

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def runs(expression: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    found = []
    for _ in range(count):
        after = next_cron_time(expression, timezone, after)
        found.append(after)
    return found


def test_a_utc_expression_gives_the_next_match_strictly_after_the_instant() -> None:
    """`*/15 * * * *` from 10:07 is 10:15, 10:30; from exactly 10:15 it is 10:30."""
    start = datetime(2025, 6, 1, 10, 7, tzinfo=UTC)
    assert runs("*/15 * * * *", "UTC", start, 2) == [
        datetime(2025, 6, 1, 10, 15, tzinfo=UTC),
        datetime(2025, 6, 1, 10, 30, tzinfo=UTC),
    ]
    on_the_dot = datetime(2025, 6, 1, 10, 15, tzinfo=UTC)
    assert next_cron_time("*/15 * * * *", "UTC", on_the_dot) == on_the_dot + timedelta(minutes=15)


def test_wall_clock_times_follow_the_zone_across_spring_forward_in_new_york() -> None:
    """`30 2 * * *` in New York: 02:30 EST, then 03:00 EDT on the day 02:30 does not exist (when
    the clock jumps, as Vixie cron and cronie run it), then 02:30 EDT."""
    start = datetime(2025, 3, 7, 12, tzinfo=NEW_YORK)
    found = runs("30 2 * * *", "America/New_York", start, 4)
    assert [t.astimezone(NEW_YORK).strftime("%m-%d %H:%M %Z") for t in found] == [
        "03-08 02:30 EST",
        "03-09 03:00 EDT",
        "03-10 02:30 EDT",
        "03-11 02:30 EDT",
    ]
    assert [t.strftime("%H:%M") for t in found] == ["07:30", "07:00", "06:30", "06:30"]
    assert all(t.tzinfo is UTC for t in found)


def test_a_repeated_wall_time_in_new_york_is_expected_once_at_its_first_occurrence() -> None:
    """`30 1 * * *` on 2 November 2025 (01:00-02:00 happens twice): 01:30 EDT only."""
    start = datetime(2025, 11, 1, 12, tzinfo=NEW_YORK)
    found = runs("30 1 * * *", "America/New_York", start, 2)
    assert [t.astimezone(NEW_YORK).strftime("%m-%d %H:%M %Z") for t in found] == [
        "11-02 01:30 EDT",
        "11-03 01:30 EST",
    ]
    # From inside the second 01:xx hour, the next run is the next day's.
    second_hour = datetime(2025, 11, 2, 6, 10, tzinfo=UTC)  # 01:10 EST
    assert next_cron_time("30 1 * * *", "America/New_York", second_hour) == found[1]


def test_every_fifteen_minutes_skips_the_missing_hour_and_lands_on_the_jump() -> None:
    """`*/20 * * * *` in New York on 9 March 2025: 01:40 EST, then 03:00 EDT (one run for the
    three missing 02:xx times), then 03:20 EDT."""
    start = datetime(2025, 3, 9, 6, 30, tzinfo=UTC)  # 01:30 EST
    found = runs("*/20 * * * *", "America/New_York", start, 3)
    assert [t.astimezone(NEW_YORK).strftime("%H:%M %Z") for t in found] == [
        "01:40 EST",
        "03:00 EDT",
        "03:20 EDT",
    ]


def test_nine_in_berlin_moves_an_hour_in_utc_when_summer_time_ends() -> None:
    """`0 9 * * *` in Berlin: 07:00 UTC in summer time, 08:00 UTC from 26 October 2025, with 25
    hours between the two runs around the change."""
    start = datetime(2025, 10, 24, 12, tzinfo=UTC)
    found = runs("0 9 * * *", "Europe/Berlin", start, 3)
    assert found == [
        datetime(2025, 10, 25, 7, tzinfo=UTC),
        datetime(2025, 10, 26, 8, tzinfo=UTC),
        datetime(2025, 10, 27, 8, tzinfo=UTC),
    ]
    assert all(t.astimezone(BERLIN).hour == 9 for t in found)
    assert found[1] - found[0] == timedelta(hours=25)


def test_names_ranges_lists_and_steps_are_standard_cron() -> None:
    """Weekday and month names, ranges, lists and steps are accepted and normalised."""
    assert check_cron("0  9 * * MON-FRI") == "0 9 * * MON-FRI"
    assert check_cron("0,30 8-18/2 1 jan,jul *") == "0,30 8-18/2 1 jan,jul *"
    friday_evening = datetime(2025, 6, 6, 18, tzinfo=UTC)  # a Friday
    monday = next_cron_time("0 9 * * MON-FRI", "UTC", friday_evening)
    assert monday == datetime(2025, 6, 9, 9, tzinfo=UTC)


def test_intervals_count_whole_periods_from_their_anchor() -> None:
    """An interval is anchor + k * minutes: the first one after the instant."""
    anchor = datetime(2025, 1, 1, tzinfo=UTC)
    assert next_interval_time(anchor, 60, anchor) == anchor + timedelta(hours=1)
    assert next_interval_time(anchor, 60, anchor + timedelta(minutes=59)) == anchor + timedelta(
        hours=1
    )
    assert next_interval_time(anchor, 60, anchor + timedelta(hours=1)) == anchor + timedelta(
        hours=2
    )
    three_days = anchor + timedelta(days=3, minutes=1)
    assert next_interval_time(anchor, 90, three_days) == anchor + timedelta(minutes=90 * 49)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * *", "has 3 field(s); it needs 5"),
        ("0 0 * * * *", "has 6 field(s); it needs 5"),
        ("@daily", "has 1 field(s); it needs 5"),
        ("61 * * * *", "out of range"),
        ("0 24 * * *", "out of range"),
        ("0 0 31 2 *", "never matches a date"),
        ("R * * * *", "minute field 'R' is not standard cron syntax"),
        ("0 0 L * *", "day of month field 'L' is not standard cron syntax"),
        ("0 0 * * 1#2", "day of week field '1#2' is not standard cron syntax"),
        ("*/0 * * * *", "step"),
    ],
)
def test_invalid_expressions_are_rejected_with_the_reason(expression: str, message: str) -> None:
    """Wrong field counts, out-of-range values, impossible dates and non-standard (or random)
    syntax raise ScheduleError naming the expression and what is wrong."""
    with pytest.raises(ScheduleError, match="cron expression") as caught:
        check_cron(expression)
    assert message in str(caught.value)
    assert repr(expression) in str(caught.value)


@pytest.mark.parametrize(
    "name",
    [
        "Mars/Olympus_Mons",
        "",
        "utc",
        "../../etc/passwd",
        "Europe/",
        "UTC\n",
        # Files ZoneInfo would load, but not names available_timezones() lists.
        "posix/Europe/Berlin",
        "right/UTC",
    ],
)
def test_unknown_time_zones_are_rejected_with_a_hint(name: str) -> None:
    """Anything that is not an IANA zone name raises ScheduleError suggesting real names."""
    with pytest.raises(ScheduleError, match="unknown time zone") as caught:
        check_timezone(name)
    assert "IANA name" in str(caught.value)
    with pytest.raises(ScheduleError, match="unknown time zone"):
        next_cron_time("0 9 * * *", name, datetime(2025, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("name", ["localtime", "posixrules", "Factory"])
def test_host_dependent_zone_files_are_refused(name: str) -> None:
    """`localtime` (the host's own zone), `posixrules` and `Factory` load as zones on many hosts
    but name no place: a schedule in them would expect runs at different times on different
    workers. They are refused with the reason, for schedules too."""
    with pytest.raises(ScheduleError) as caught:
        check_timezone(name)
    assert str(caught.value) == (
        f"time zone {name!r} depends on the host and names no place: use an IANA name such as "
        "'UTC', 'Europe/Berlin' or 'America/New_York'"
    )
    with pytest.raises(ValidationError, match=f"time zone '{name}' depends on the host"):
        CronSchedule(expression="0 9 * * *", timezone=name)


@pytest.mark.parametrize("name", ["UTC", "Etc/UTC", "Europe/Berlin", "US/Eastern", "GMT"])
def test_canonical_names_and_their_links_are_accepted(name: str) -> None:
    assert check_timezone(name).key == name


def test_schedules_need_aware_instants_and_positive_intervals() -> None:
    """A naive datetime or an interval under a minute is an error, not a guess."""
    with pytest.raises(ScheduleError, match="no time zone"):
        next_cron_time("0 9 * * *", "UTC", datetime(2025, 1, 1))
    with pytest.raises(ScheduleError, match="at least 1 minute"):
        next_interval_time(datetime(2025, 1, 1, tzinfo=UTC), 0, datetime(2025, 1, 1, tzinfo=UTC))
