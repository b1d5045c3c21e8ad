"""Monitor rules without Temporal: slugs, check-in bodies, output truncation, health, deadlines
and statistics (``treadle.workflows.monitor_models`` and ``treadle.workflows.monitor_ledger``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from treadle.workflows.monitors.ledger import MonitorLedger, Refused, new_state, percentile
from treadle.workflows.monitors.models import (
    FULL_OUTPUT_CHECKINS,
    MAX_OUTPUT_BYTES,
    RECENT_CHECKINS,
    CheckInSignal,
    CheckInSource,
    CheckInStatus,
    Health,
    MonitorConfig,
    MonitorEventType,
    MonitorStatus,
    ViewRequest,
    ping_key_digest,
    split_ping_key,
    truncate_output,
)

T0 = datetime(2025, 6, 2, 0, 0, tzinfo=UTC)
SECRET = "s3cret-SECRET_s3cret"


def config(slug: str = "nightly", **fields: Any) -> MonitorConfig:
    fields.setdefault("schedule", {"kind": "interval", "minutes": 60})
    return MonitorConfig.model_validate({"slug": slug, "ping_key": f"{slug}.{SECRET}", **fields})


def ledger(**fields: Any) -> MonitorLedger:
    return MonitorLedger(new_state(config(**fields), T0))


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def report(status: str, **fields: Any) -> CheckInSignal:
    return CheckInSignal.model_validate({"status": status, **fields})


def types(events: list[Any]) -> list[str]:
    return [e.type.value for e in events]


# --------------------------------------------------------------------------------------------
# The monitor model
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", ["abc", "nightly-backup", "db_sync_2", "a" + "b" * 49])
def test_slugs_of_three_to_fifty_lowercase_characters_are_accepted(slug: str) -> None:
    """A lowercase letter first, then a-z, 0-9, '-' or '_', 3 to 50 characters in all."""
    assert config(slug).slug == slug


@pytest.mark.parametrize(
    "slug",
    ["ab", "a" * 51, "1abc", "-abc", "_abc", "Nightly", "night.ly", "night ly", "nüght", "abc\n"],
)
def test_other_slugs_are_refused_with_the_rule(slug: str) -> None:
    """Too short, too long, not starting with a letter, upper case, dots, spaces, non-ASCII, a
    trailing newline."""
    with pytest.raises(ValidationError, match="3-50 characters, a lowercase letter first"):
        config(slug)


def test_a_monitor_defaults_its_name_and_margin_and_checks_its_schedule() -> None:
    """Name falls back to the slug, margin to 5 minutes; a bad cron or zone is refused."""
    c = config(schedule={"kind": "cron", "expression": "30 2 * * *", "timezone": "Europe/Berlin"})
    assert (c.name, c.margin_minutes, c.max_runtime_minutes) == ("nightly", 5, None)
    assert c.schedule.describe() == "cron '30 2 * * *' (Europe/Berlin)"
    assert config(name="Nightly backup").name == "Nightly backup"
    with pytest.raises(ValidationError, match="never matches a date"):
        config(schedule={"kind": "cron", "expression": "0 0 30 2 *"})
    with pytest.raises(ValidationError, match="unknown time zone 'Nowhere/Town'"):
        config(schedule={"kind": "cron", "expression": "0 0 * * *", "timezone": "Nowhere/Town"})
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        config(schedule={"kind": "interval", "minutes": 0})


def test_the_ping_key_carries_the_slug_and_a_secret() -> None:
    """A key is `<slug>.<secret>`: it must name its own monitor; its digest is what the memo
    keeps."""
    assert split_ping_key(f"nightly.{SECRET}") == ("nightly", SECRET)
    for bad in (
        "nightly",
        f"nightly.{SECRET}.x",
        "nightly.short",
        f"NIGHTLY.{SECRET}",
        "",
        f"nightly.{SECRET}\n",
        f"nightly\n.{SECRET}",
    ):
        assert split_ping_key(bad) is None
    with pytest.raises(ValidationError, match=r"ping_key must be 'nightly\.<secret"):
        config(ping_key=f"nightly.{SECRET}\n")
    with pytest.raises(ValidationError, match=r"ping_key must be 'nightly\.<secret"):
        MonitorConfig.model_validate(
            {"slug": "nightly", "schedule": {"kind": "interval", "minutes": 5}, "ping_key": "x.y"}
        )
    memo = config().memo()
    assert memo["ping_key_sha256"] == ping_key_digest(f"nightly.{SECRET}")
    assert SECRET not in str(memo)


def test_output_is_cut_to_ten_kib_on_a_utf8_boundary() -> None:
    """Multi-byte characters straddling the 10 KiB limit are dropped whole, never split."""
    assert truncate_output("short") == ("short", False)
    exactly = "a" * MAX_OUTPUT_BYTES
    assert truncate_output(exactly) == (exactly, False)
    for char in ("é", "€", "🙂"):  # 2, 3 and 4 bytes
        text = "a" * (MAX_OUTPUT_BYTES - 1) + char * 3
        cut, truncated = truncate_output(text)
        assert truncated
        assert cut == "a" * (MAX_OUTPUT_BYTES - 1)
        assert len(cut.encode()) <= MAX_OUTPUT_BYTES
    mixed = "€" * 5000  # 15,000 bytes: 3,413 whole euro signs fit in 10,240
    cut, truncated = truncate_output(mixed)
    assert truncated and cut == "€" * 3413 and len(cut.encode()) == 10_239


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"status": "missed"}, "written by the monitor itself"),
        ({"status": "timeout"}, "written by the monitor itself"),
        ({"status": "done"}, "Input should be"),
        ({"status": "ok", "source": "system"}, "reserved"),
        ({"status": "ok", "exit_code": 2}, "an ok check-in cannot have exit code 2"),
        ({"status": "ok", "source": "ping"}, "must carry the monitor's ping_key"),
        ({"status": "ok", "colour": "red"}, "Extra inputs are not permitted"),
        ({"status": "ok", "sent_at": "2025-06-02T00:00:00"}, "timezone"),
    ],
)
def test_check_in_bodies_are_validated(body: dict[str, Any], message: str) -> None:
    """Only in_progress, ok and error can be reported, by ping, sdk or manual, consistently."""
    with pytest.raises(ValidationError, match=message):
        CheckInSignal.model_validate(body)


# --------------------------------------------------------------------------------------------
# Health and counters
# --------------------------------------------------------------------------------------------


def test_health_is_unknown_until_a_result_then_the_latest_result_decides() -> None:
    """in_progress leaves health unknown; ok -> healthy, error -> failing; ok resets the
    consecutive failures but not the totals."""
    book = ledger()
    assert book.state.health is Health.UNKNOWN
    assert types(book.record(report("in_progress"), at(1))) == ["checkin.started"]
    assert book.state.health is Health.UNKNOWN
    assert types(book.record(report("error", exit_code=3), at(2))) == ["checkin.error"]
    book.record(report("error"), at(3))
    s = book.state
    assert (s.health, s.consecutive_failures, s.total_failures, s.total_checkins) == (
        Health.FAILING,
        2,
        2,
        2,  # the in_progress run was completed in place as an error: one check-in
    )
    assert types(book.record(report("ok"), at(4))) == ["checkin.ok", "monitor.healthy"]
    assert (s.health, s.consecutive_failures, s.total_failures, s.total_checkins) == (
        Health.HEALTHY,
        0,
        2,
        3,
    )


def test_an_in_progress_run_is_completed_in_place_with_its_duration() -> None:
    """start at minute 1, ok at minute 4 with output: one check-in, 180 s, source of the ok."""
    book = ledger()
    book.record(report("in_progress", source="ping", ping_key=f"nightly.{SECRET}"), at(1))
    book.record(report("ok", source="manual", output="done", exit_code=0), at(4))
    [run] = book.state.recent
    assert run.status is CheckInStatus.OK and run.source is CheckInSource.MANUAL
    assert (run.started_at, run.finished_at, run.duration_seconds) == (at(1), at(4), 180.0)
    assert (run.output, run.exit_code) == ("done", 0)
    assert book.state.open_run is None


def test_a_missed_run_is_written_once_per_episode_and_next_expected_moves_on() -> None:
    """No check-in by 01:00 + 5 min: one missed check-in; three silent days add none; the next
    expected run keeps moving; an ok heals it, and the next silence is a new miss."""
    book = ledger()
    assert book.next_deadline() == at(65)
    assert book.advance(at(64)) == []
    events = book.advance(at(65))
    assert types(events) == ["monitor.missed"]
    missed = events[0].checkin
    assert missed is not None and missed.source is CheckInSource.SYSTEM
    assert missed.expected_at == at(60) and missed.created_at == at(65)
    assert "no check-in for the run expected at 2025-06-02 01:00:00 UTC" in (missed.output or "")
    assert book.state.next_expected == at(120)

    assert book.advance(at(3 * 24 * 60)) == []
    s = book.state
    assert [c.status for c in s.recent] == [CheckInStatus.MISSED]
    assert (s.health, s.total_failures, s.consecutive_failures) == (Health.MISSED, 1, 1)
    assert s.next_expected is not None and s.next_expected > at(3 * 24 * 60 - 5)

    late = at(3 * 24 * 60 + 10)
    assert types(book.record(report("ok"), late)) == ["checkin.ok", "monitor.healthy"]
    assert (s.health, s.consecutive_failures) == (Health.HEALTHY, 0)
    assert s.next_expected == late + timedelta(hours=1)
    assert types(book.advance(late + timedelta(minutes=65))) == ["monitor.missed"]
    assert [c.status for c in s.recent].count(CheckInStatus.MISSED) == 2


def test_an_in_progress_run_past_its_max_runtime_becomes_a_timeout_in_place() -> None:
    """start at minute 10 with a 30 min max runtime: at minute 40 the run is a timeout (system)."""
    book = ledger(max_runtime_minutes=30)
    book.record(report("in_progress"), at(10))
    assert book.next_deadline() == at(40)
    events = book.advance(at(41))
    assert types(events) == ["monitor.timeout"]
    [run] = book.state.recent
    assert run.status is CheckInStatus.TIMEOUT and run.source is CheckInSource.SYSTEM
    assert (run.started_at, run.finished_at, run.duration_seconds) == (at(10), at(40), 1800.0)
    assert "no ok or error check-in within the 30 min max runtime" in (run.output or "")
    assert (book.state.health, book.state.open_run) == (Health.TIMEOUT, None)
    # The job finishes after all: a separate ok, which heals the monitor.
    assert types(book.record(report("ok"), at(45))) == ["checkin.ok", "monitor.healthy"]
    assert len(book.state.recent) == 2


def test_deadlines_before_a_check_in_are_settled_first_whatever_the_delivery_order() -> None:
    """A check-in sent after the deadline (it waited in Temporal while no worker ran) finds the
    miss already written; one sent before the deadline counts as on time."""
    late = ledger()
    late.record(report("ok", sent_at=at(70)), at(300))
    assert [c.status for c in late.state.recent] == [CheckInStatus.MISSED, CheckInStatus.OK]
    assert late.state.recent[1].created_at == at(70)

    on_time = ledger()
    on_time.record(report("ok", sent_at=at(62)), at(300))
    assert [c.status for c in on_time.state.recent] == [CheckInStatus.OK]
    assert on_time.state.next_expected == at(122)


def test_a_cron_check_in_a_little_early_counts_for_the_coming_run() -> None:
    """A check-in up to a minute before the expected run (clock skew) satisfies it; an ad-hoc
    run an hour early does not."""
    book = ledger(schedule={"kind": "cron", "expression": "0 3 * * *"})
    assert book.state.next_expected == at(180)
    book.record(report("ok"), at(120))
    assert book.state.next_expected == at(180)
    book.record(report("ok"), at(179.5))
    assert book.state.next_expected == at(180 + 24 * 60)


def test_paused_monitors_expect_nothing_and_resume_from_the_next_run() -> None:
    """Paused: no deadline, no miss for days, check-ins still recorded; resumed: next run."""
    book = ledger()
    assert types(book.set_status(MonitorStatus.PAUSED, at(30))) == ["monitor.paused"]
    assert book.next_deadline() is None
    assert book.advance(at(5 * 24 * 60)) == []
    book.record(report("ok"), at(5 * 24 * 60 + 1))
    assert book.state.health is Health.HEALTHY
    resumed = book.set_status(MonitorStatus.ACTIVE, at(6 * 24 * 60))
    assert types(resumed) == ["monitor.resumed"]
    assert book.state.next_expected == at(6 * 24 * 60 + 60)
    assert book.set_status(MonitorStatus.ACTIVE, at(6 * 24 * 60 + 1)) == []  # idempotent


def test_disabled_monitors_and_wrong_keys_refuse_check_ins() -> None:
    """A disabled monitor refuses check-ins, as does a ping with another key; refusals are
    logged (at most 20 kept) without changing health."""
    book = ledger()
    with pytest.raises(Refused, match="wrong ping key"):
        book.record(report("ok", source="ping", ping_key=f"nightly.{'x' * 20}"), at(1))
    book.set_status(MonitorStatus.DISABLED, at(2))
    with pytest.raises(Refused, match="disabled"):
        book.record(report("ok"), at(3))
    for minute in range(25):
        book.refuse("bad body", "{'status': 'late'}", at(4 + minute))
    s = book.state
    assert (s.health, s.total_checkins, s.refused_total, len(s.refusals)) == (
        Health.UNKNOWN,
        0,
        25,
        20,
    )


# --------------------------------------------------------------------------------------------
# Statistics and bounds
# --------------------------------------------------------------------------------------------


def test_statistics_count_results_per_window_with_duration_percentiles_and_uptime() -> None:
    """Day / week / month: ok, error, missed, timeout counts, nearest-rank p50 / p95 of run
    durations, uptime = ok / all results."""
    book = ledger(max_runtime_minutes=600)
    minute = 0.0
    for day, durations in ((20, [10, 20]), (3, [30, 40, 50]), (0, [60, 70, 80, 90, 100])):
        for seconds in durations:
            minute = (30 - day) * 24 * 60 - 120 + seconds
            book.record(report("ok", duration_seconds=seconds), at(minute))
    book.record(report("error", duration_seconds=5), at(minute + 1))
    now = at(minute + 2)
    view = book.view(ViewRequest(), now)
    day, week, month = view.stats.day, view.stats.week, view.stats.month
    assert (day.success, day.failure, week.success, month.success) == (5, 1, 8, 10)
    assert (day.p50_seconds, day.p95_seconds) == (70, 100)
    assert (month.p50_seconds, month.p95_seconds) == (50, 100)
    assert day.uptime_percent == pytest.approx(83.33)
    # Silences between the bursts were misses: one at the start, one after each burst's gap.
    assert (day.missed, week.missed, month.missed) == (0, 1, 3)
    assert month.uptime_percent == pytest.approx(round(100 * 10 / 14, 2))
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == 4.0


def test_misses_and_timeouts_count_against_uptime() -> None:
    """One ok, one missed, one timeout in a day: uptime 33.33 %."""
    book = ledger(max_runtime_minutes=10)
    book.record(report("ok", duration_seconds=1), at(1))
    book.advance(at(61 + 5))  # missed
    book.record(report("in_progress"), at(70))
    book.advance(at(81))  # timeout
    stats = book.view(ViewRequest(), at(90)).stats.day
    assert (stats.success, stats.missed, stats.timeout) == (1, 1, 1)
    assert stats.uptime_percent == pytest.approx(33.33)
    assert book.view(ViewRequest(), at(90 + 2 * 24 * 60)).stats.day.uptime_percent is None


def test_statistics_are_computed_as_of_the_instant_the_caller_gives() -> None:
    """The view's windows end at `as_of` when given, else at the instant the workflow passes (in
    a query, its latest activation, possibly long ago): a check-in 26 hours before `as_of` is out
    of the day window and still in the week's."""
    book = ledger(schedule={"kind": "interval", "minutes": 30 * 24 * 60})
    book.record(report("ok", duration_seconds=3), at(10))
    stale = book.view(ViewRequest(), at(11)).stats
    assert (stale.day.success, stale.day.p50_seconds, stale.day.uptime_percent) == (1, 3, 100)
    fresh = book.view(ViewRequest(as_of=at(10 + 26 * 60)), at(11)).stats
    assert (fresh.day.success, fresh.day.p50_seconds, fresh.day.uptime_percent) == (0, None, None)
    assert (fresh.week.success, fresh.week.p50_seconds) == (1, 3)


def test_the_kept_log_is_bounded_and_older_outputs_become_excerpts() -> None:
    """At most 500 check-ins are kept (counters keep counting); only the newest 50 keep their
    full output, so the state carried through continue-as-new stays small."""
    book = ledger(schedule={"kind": "interval", "minutes": 1})
    for i in range(RECENT_CHECKINS + 20):
        book.record(report("ok", output="x" * 5000), at(i))
    s = book.state
    assert (len(s.recent), s.total_checkins, s.recent[0].id) == (500, 520, 21)
    assert all(len(c.output or "") == 5000 for c in s.recent[-FULL_OUTPUT_CHECKINS:])
    assert all(c.output_truncated for c in s.recent[:-FULL_OUTPUT_CHECKINS])
    assert len(s.model_dump_json()) < 1_000_000
    view = book.view(ViewRequest(recent=3), at(600))
    assert [c.id for c in view.recent] == [520, 519, 518]


def test_events_carry_a_short_output_excerpt() -> None:
    """A 10 KiB output is kept on the check-in, but its event carries at most 1 KiB."""
    book = ledger()
    [event] = book.record(report("error", output="€" * 4000), at(1))
    assert event.type is MonitorEventType.CHECKIN_ERROR
    assert event.checkin is not None and event.checkin.output_truncated
    assert len((event.checkin.output or "").encode()) <= 1024
    assert len((book.state.recent[0].output or "").encode()) > 10_000 - 3
