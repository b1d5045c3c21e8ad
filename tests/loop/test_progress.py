"""Nexora's progress tracker: stuck loops are caught in a few calls, long productive runs never."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from treadle.workflows.agent.messages.progress import PhaseOrderError, ProgressConfig
from treadle.workflows.agent.parts.tracker import ProgressTracker, normalise_error

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
NOT_FOUND = "old_text not found in main.go"


def edit(tracker: ProgressTracker, path: str, content: str | None = None) -> None:
    tracker.record_tool_call(
        "edit_file", path, success=True, mutating=True, content_hash=content or f"hash:{path}"
    )


def fail(tracker: ProgressTracker, path: str, error: str = NOT_FOUND) -> None:
    tracker.record_tool_call("edit_file", path, success=False, error=error, mutating=True)


def read(tracker: ProgressTracker, path: str = "main.go") -> None:
    tracker.record_tool_call("read_file", path, success=True, mutating=False)


def command(tracker: ProgressTracker, cmd: str, output: str | None = None) -> None:
    tracker.record_tool_call("run_command", cmd, success=True, mutating=True, content_hash=output)


# --- Rule 1: the same error on the same target, in a row ------------------------------------


def test_three_identical_errors_are_stuck_and_name_the_file() -> None:
    """Three identical failures on one file in a row are stuck; the reason names file and error."""
    tracker = ProgressTracker()
    for _ in range(3):
        fail(tracker, "main.go")
    assert tracker.check() == (
        "Same error on 'main.go' repeated 3 times: old_text not found in main.go"
    )


def test_two_identical_errors_are_not_stuck() -> None:
    """Two identical failures are below the threshold."""
    tracker = ProgressTracker()
    fail(tracker, "main.go")
    fail(tracker, "main.go")
    assert tracker.check() is None


def test_errors_differing_only_in_numbers_ids_and_quotes_are_identical() -> None:
    """Line numbers, hex ids, uuids, quotes and spacing do not make an error different."""
    tracker = ProgressTracker()
    fail(tracker, "main.go", "SyntaxError at line 12: unexpected 'x' (id 3f9a2c1d)")
    fail(tracker, "main.go", 'syntaxerror at line 13:  unexpected "x"  (id 7be01f44)')
    fail(tracker, "main.go", "SyntaxError at line 140: unexpected `x` (id 0x1f)")
    reason = tracker.check()
    assert reason is not None
    assert reason.startswith("Same error on 'main.go' repeated 3 times: SyntaxError at line 140")
    assert normalise_error("id 123e4567-e89b-12d3-a456-426614174000") == normalise_error(
        "ID 00000000-0000-0000-0000-000000000000"
    )


def test_different_errors_on_the_same_target_are_not_stuck() -> None:
    """Three different errors on one file are not a loop."""
    tracker = ProgressTracker()
    fail(tracker, "main.go", "old_text not found in main.go")
    fail(tracker, "main.go", "old_text occurs 2 times in main.go")
    fail(tracker, "main.go", "permission denied")
    assert tracker.check() is None


def test_the_same_error_on_different_targets_is_not_stuck() -> None:
    """Errors only repeat in a row when the target is the same too."""
    tracker = ProgressTracker()
    fail(tracker, "a.go")
    fail(tracker, "b.go")
    fail(tracker, "a.go")
    assert tracker.check() is None


def test_a_success_in_between_resets_the_error_run() -> None:
    """Any success, even a read of another file, ends the run of identical errors."""
    tracker = ProgressTracker()
    fail(tracker, "main.go")
    fail(tracker, "main.go")
    read(tracker, "other.go")
    fail(tracker, "main.go")
    fail(tracker, "main.go")
    assert tracker.check() is None
    fail(tracker, "main.go")
    assert tracker.check() is not None


def test_long_errors_are_shortened_in_the_reason() -> None:
    """The reason quotes at most about 120 characters of the error."""
    tracker = ProgressTracker()
    for _ in range(3):
        fail(tracker, "main.go", "boom " * 100)
    reason = tracker.check()
    assert reason is not None
    assert reason.endswith("...")
    assert len(reason) < len("Same error on 'main.go' repeated 3 times: ") + 121


# --- Rule 2: oscillation ----------------------------------------------------------------------


def test_alternating_writes_between_two_files_oscillate() -> None:
    """Writes A, B, A, B are stuck and the reason names both files."""
    tracker = ProgressTracker()
    for path in ("a.go", "b.go", "a.go"):
        edit(tracker, path)
        assert tracker.check() is None
    edit(tracker, "b.go")
    assert tracker.check() == "Oscillating between 'a.go' and 'b.go'"


def test_a_third_file_breaks_the_alternation() -> None:
    """Writes A, B, A, C do not oscillate."""
    tracker = ProgressTracker()
    for path in ("a.go", "b.go", "a.go", "c.go"):
        edit(tracker, path)
    assert tracker.check() is None


def test_edit_then_test_loop_is_normal_work() -> None:
    """Edit, run the tests, edit, run the tests: commands are not file writes."""
    tracker = ProgressTracker()
    for i in range(4):
        edit(tracker, "main.go", f"v{i}")
        command(tracker, "go test ./...")
        tracker.record_test("go test ./...", passed=False, output="FAIL")
    assert tracker.check() is None


def test_reads_between_alternating_writes_still_oscillate() -> None:
    """Reads between the writes neither hide an oscillation..."""
    tracker = ProgressTracker()
    for path in ("a.go", "b.go", "a.go", "b.go"):
        for _ in range(6):
            read(tracker, path)
        edit(tracker, path)
    assert tracker.check() == "Oscillating between 'a.go' and 'b.go'"


def test_reads_of_other_files_do_not_create_an_oscillation() -> None:
    """...nor create one: reading A, B, A, B is not writing them."""
    tracker = ProgressTracker()
    edit(tracker, "a.go")
    for path in ("b.go", "a.go", "b.go"):
        read(tracker, path)
    assert tracker.check() is None


def test_failed_writes_do_not_count_towards_oscillation() -> None:
    """Only successful writes alternate; a failed write to B is not one."""
    tracker = ProgressTracker()
    edit(tracker, "a.go")
    fail(tracker, "b.go")
    edit(tracker, "a.go")
    fail(tracker, "b.go")
    assert tracker.check() is None


# --- Rule 3: no unique progress ---------------------------------------------------------------


def test_ten_rereads_make_no_progress() -> None:
    """Ten re-reads of one file after its first read are stuck; the reason says what they were."""
    tracker = ProgressTracker()
    for _ in range(10):
        read(tracker)
    assert tracker.check() is None  # the first read was exploration
    read(tracker)
    assert tracker.check() == "No progress in the last 10 actions: 10 read-only"


def test_nine_rereads_are_not_yet_a_full_window() -> None:
    """The window must be full before the rule applies."""
    tracker = ProgressTracker()
    for _ in range(10):
        read(tracker)
    assert tracker.check() is None


def test_the_reason_summarises_the_window_by_kind() -> None:
    """Re-reads and failures on different files are counted by kind."""
    tracker = ProgressTracker()
    read(tracker)
    for _ in range(7):
        read(tracker)
    for i in range(3):
        fail(tracker, f"g{i}.go", f"error {i}")
    assert tracker.check() == "No progress in the last 10 actions: 7 read-only, 3 failed"


def test_writing_the_same_content_again_is_not_progress() -> None:
    """Ten writes that leave one file's content unchanged are stuck (after the first change)."""
    tracker = ProgressTracker()
    edit(tracker, "main.go", "same")
    for _ in range(10):
        edit(tracker, "main.go", "same")
    assert tracker.check() == "No progress in the last 10 actions: 10 unchanged writes"


def test_a_write_with_new_content_is_progress() -> None:
    """One real change among nine reads is enough with the default ``min_progress``."""
    tracker = ProgressTracker()
    edit(tracker, "main.go", "v1")
    for _ in range(8):
        read(tracker)
    edit(tracker, "main.go", "v2")
    assert tracker.check() is None


def test_a_passing_test_in_the_window_is_progress() -> None:
    """Nine re-reads and a passing test are not stuck."""
    tracker = ProgressTracker()
    read(tracker)
    for _ in range(9):
        read(tracker)
    tracker.record_test("pytest", passed=True, output="3 passed")
    assert tracker.check() is None
    read(tracker)
    assert tracker.check() is None


def test_a_failing_test_is_not_progress() -> None:
    """Nine re-reads and a failing test are stuck."""
    tracker = ProgressTracker()
    read(tracker)
    for _ in range(9):
        read(tracker)
    tracker.record_test("pytest", passed=False, output="1 failed")
    assert tracker.check() == "No progress in the last 10 actions: 9 read-only, 1 failed test"


def test_a_command_repeating_its_output_is_not_progress() -> None:
    """The same command with the same output hash again and again is stuck."""
    tracker = ProgressTracker()
    for _ in range(10):
        command(tracker, "ls", "out")
    assert tracker.check() is None  # the first run in the window was new
    command(tracker, "ls", "out")
    assert tracker.check() == "No progress in the last 10 actions: 10 repeated commands"


def test_min_progress_can_demand_more() -> None:
    """With ``min_progress=2`` one change in the window is too little, and the reason says so."""
    tracker = ProgressTracker(config=ProgressConfig(min_progress=2))
    read(tracker)
    edit(tracker, "main.go", "v1")
    for _ in range(9):
        read(tracker)
    assert tracker.check() == (
        "Too little progress in the last 10 actions (1 of 2 needed): 9 read-only, 1 change"
    )


def test_fifty_distinct_reads_are_exploration() -> None:
    """Reading fifty different files before the first write is progress, never stuck."""
    tracker = ProgressTracker()
    for i in range(50):
        read(tracker, f"src/f{i}.py")
        assert tracker.check() is None
    edit(tracker, "src/f0.py")
    assert tracker.check() is None


def test_a_listing_not_seen_before_is_exploration() -> None:
    """Listing new directories is exploration like reading new files."""
    tracker = ProgressTracker()
    for i in range(15):
        tracker.record_tool_call(
            "list_dir", f"dir{i}", success=True, mutating=False, content_hash=f"l{i}"
        )
    assert tracker.check() is None


def test_rereading_a_file_whose_content_changed_is_exploration() -> None:
    """The same target read with a new content hash saw something new; the same hash did not."""
    tracker = ProgressTracker()
    for i in range(12):
        tracker.record_tool_call(
            "read_file", "log.txt", success=True, mutating=False, content_hash=f"v{i}"
        )
    assert tracker.check() is None
    for _ in range(10):
        tracker.record_tool_call(
            "read_file", "log.txt", success=True, mutating=False, content_hash="v11"
        )
    assert tracker.check() == "No progress in the last 10 actions: 10 read-only"


def test_the_same_file_read_eleven_times_is_stuck() -> None:
    """The first read explores; ten more of the same content fill the window with no progress."""
    tracker = ProgressTracker()
    for _ in range(11):
        tracker.record_tool_call(
            "read_file", "main.go", success=True, mutating=False, content_hash="same"
        )
    assert tracker.check() == "No progress in the last 10 actions: 10 read-only"


def test_reads_seen_before_a_recovery_are_still_seen_after_it() -> None:
    """A hint clears the window, not the memory of what was read."""
    tracker = ProgressTracker()
    for i in range(10):
        read(tracker, f"f{i}.go")
    tracker.reset_after_recovery()
    for i in range(10):
        read(tracker, f"f{i}.go")
    assert tracker.check() == "No progress in the last 10 actions: 10 read-only"


def test_without_exploration_reads_are_never_progress() -> None:
    """``exploration_is_progress = false``: reads of things never seen are no progress either."""
    tracker = ProgressTracker(config=ProgressConfig(exploration_is_progress=False))
    for i in range(10):
        read(tracker, f"f{i}.go")
    assert tracker.check() == "No progress in the last 10 actions: 10 read-only"


def test_the_seen_reads_are_bounded_oldest_first() -> None:
    """``max_seen_reads`` bounds what is remembered; the target read longest ago goes first."""
    tracker = ProgressTracker(config=ProgressConfig(max_seen_reads=3))
    for path in ("a", "b", "c", "a", "d"):
        read(tracker, path)
    assert list(tracker.seen_reads) == ["c", "a", "d"]


# --- Rule 4: message dedup --------------------------------------------------------------------


def test_a_message_repeated_within_the_last_five_is_stuck() -> None:
    """A verbatim repeat (ignoring surrounding whitespace) is reported and latched for check()."""
    tracker = ProgressTracker()
    assert tracker.record_message("I will edit main.go now.") is None
    for i in range(4):
        assert tracker.record_message(f"step {i}") is None
    reason = tracker.record_message("  I will edit main.go now.\n")
    assert reason == (
        "The model repeated one of its last 5 messages verbatim: 'I will edit main.go now.'"
    )
    assert tracker.check() == reason
    assert tracker.check() == reason
    tracker.reset_after_recovery()
    assert tracker.check() is None


def test_a_repeat_of_the_sixth_last_message_is_not_stuck() -> None:
    """Messages older than the window may come back."""
    tracker = ProgressTracker()
    tracker.record_message("I will edit main.go now.")
    for i in range(5):
        tracker.record_message(f"step {i}")
    assert tracker.record_message("I will edit main.go now.") is None
    assert tracker.check() is None


def test_empty_messages_are_ignored() -> None:
    """Empty or blank text is neither a repeat nor recorded."""
    tracker = ProgressTracker()
    assert tracker.record_message("") is None
    assert tracker.record_message("  \n") is None
    assert tracker.recent_messages == []


# --- Priority ---------------------------------------------------------------------------------


def test_a_repeated_error_is_reported_before_the_empty_window() -> None:
    """When several rules hold, the repeated error (the most specific) wins."""
    tracker = ProgressTracker()
    for i in range(7):
        read(tracker, f"f{i}.go")
    for _ in range(3):
        fail(tracker, "main.go")
    reason = tracker.check()
    assert reason is not None
    assert reason.startswith("Same error on 'main.go'")


# --- The long productive run ------------------------------------------------------------------


def test_a_thousand_productive_calls_are_never_stuck() -> None:
    """10 phases of 100 distinct file edits and a passing test never report stuck."""
    tracker = ProgressTracker()
    now = T0
    for phase in range(1, 11):
        tracker.start_phase(phase, f"Refactor package {phase}", now, 15, total=10)
        for i in range(100):
            path = f"pkg{phase}/file{i}.go"
            edit(tracker, path, f"{phase}:{i}")
            assert tracker.check() is None, (phase, i)
            now += timedelta(seconds=6)
        tracker.record_test("go test ./...", passed=True, output="ok")
        assert tracker.check() is None
    record = tracker.complete_phase(now, success=True)
    assert record is not None
    assert len(tracker.phases) == 10
    for n, done in enumerate(tracker.phases, start=1):
        assert done.number == n
        assert len(done.files_changed) == 100
        assert done.tool_calls == 100
        assert done.tests_passed == 1
        assert done.success
        assert done.duration_seconds == 600
    summary = tracker.summary(now, T0)
    assert summary.phases_completed == 10
    assert summary.total_phases == 10
    assert summary.current_phase is None
    assert summary.tool_calls == 1000
    assert summary.files_modified == 1000
    assert summary.tests_passed == 10
    assert summary.tests_failed == 0
    assert summary.elapsed_seconds == 6000


# --- Phases -----------------------------------------------------------------------------------


def test_starting_a_phase_resets_the_error_count() -> None:
    """Two identical errors, a new phase, one more: the count starts again."""
    tracker = ProgressTracker()
    tracker.start_phase(1, "parse", T0)
    fail(tracker, "main.go")
    fail(tracker, "main.go")
    tracker.start_phase(2, "emit", T0 + timedelta(minutes=5))
    fail(tracker, "main.go")
    assert tracker.check() is None
    assert tracker.recent_errors[-1].target == "main.go"
    assert len(tracker.recent_actions) == 1


def test_files_and_tests_are_kept_across_phases() -> None:
    """Files modified and test history survive a phase transition."""
    tracker = ProgressTracker()
    tracker.start_phase(1, "parse", T0)
    edit(tracker, "a.go", "ha")
    tracker.record_test("go test", passed=True, output="ok\n\n")
    tracker.start_phase(2, "emit", T0 + timedelta(minutes=1))
    assert tracker.files_modified == {"a.go": "ha"}
    assert tracker.tests_passed == 1
    assert [(t.command, t.passed, t.output, t.phase) for t in tracker.test_history] == [
        ("go test", True, "ok", 1)
    ]
    summary = tracker.summary(T0 + timedelta(minutes=2), T0)
    assert (summary.current_phase, summary.current_phase_description) == (2, "emit")
    assert summary.files_modified == 1
    assert summary.elapsed_seconds == 120


def test_starting_the_next_phase_completes_the_current_one() -> None:
    """The returned record carries files, tests, calls, duration; unresolved errors are blockers."""
    tracker = ProgressTracker()
    assert tracker.start_phase(1, "parse", T0, expected_minutes=10) is None
    edit(tracker, "b.go")
    edit(tracker, "a.go")
    edit(tracker, "a.go")
    fail(tracker, "c.go", "permission denied")
    fail(tracker, "d.go", "boom")
    edit(tracker, "d.go")
    tracker.record_test("pytest", passed=False, output="...\n2 failed, 1 passed\n")
    record = tracker.start_phase(2, "emit", T0 + timedelta(minutes=3))
    assert record is not None
    assert record.number == 1
    assert record.description == "parse"
    assert (record.started_at, record.finished_at) == (T0, T0 + timedelta(minutes=3))
    assert record.duration_seconds == 180
    assert record.expected_minutes == 10
    assert record.files_changed == ("a.go", "b.go", "d.go")
    assert record.tool_calls == 6
    assert record.tests_passed == 0
    assert record.blockers == ("c.go: permission denied", "pytest: 2 failed, 1 passed")
    assert not record.success


def test_complete_phase_ends_the_phase_without_starting_another() -> None:
    """``complete_phase`` records the phase; success may be given explicitly."""
    tracker = ProgressTracker()
    assert tracker.complete_phase(T0) is None
    tracker.start_phase(1, "only", T0)
    edit(tracker, "a.go")
    record = tracker.complete_phase(T0 + timedelta(seconds=30))
    assert record is not None
    assert record.success
    assert tracker.phase is None
    tracker.start_phase(2, "again", T0)
    fail(tracker, "a.go")
    record = tracker.complete_phase(T0, success=True)
    assert record is not None
    assert record.success
    assert record.blockers == ("a.go: old_text not found in main.go",)


@pytest.mark.parametrize("number", [1, 2])
def test_phase_numbers_must_increase(number: int) -> None:
    """A phase number not above the last one is refused with a clear message."""
    tracker = ProgressTracker()
    tracker.start_phase(1, "one", T0)
    tracker.start_phase(2, "two", T0)
    tracker.complete_phase(T0)
    with pytest.raises(PhaseOrderError, match=r"cannot start phase \d after phase 2"):
        tracker.start_phase(number, "again", T0)
    assert isinstance(PhaseOrderError("x"), ValueError)


# --- Recovery, reporting, serialisation -------------------------------------------------------


def test_reset_after_recovery_starts_a_fresh_window() -> None:
    """After recovery the error run and window are empty; files and tests are kept."""
    tracker = ProgressTracker()
    edit(tracker, "a.go", "ha")
    tracker.record_test("pytest", passed=True)
    for _ in range(11):
        read(tracker)
    assert tracker.check() is not None
    tracker.reset_after_recovery()
    assert tracker.check() is None
    for _ in range(9):
        read(tracker)
    assert tracker.check() is None
    fail(tracker, "main.go")
    fail(tracker, "main.go")
    tracker.reset_after_recovery()
    fail(tracker, "main.go")
    assert tracker.check() is None
    assert tracker.files_modified == {"a.go": "ha"}
    assert tracker.tests_passed == 1


def test_should_report_fires_once_every_ten_calls() -> None:
    """The periodic progress report is due once per ten tool calls, even when calls batch up."""
    tracker = ProgressTracker()
    due = []
    for i in range(1, 26):
        read(tracker)
        if i != 20:  # skip asking once: the report is still due at call 21
            due.append((i, tracker.should_report()))
    assert [i for i, fired in due if fired] == [10, 21]
    assert tracker.should_report() is False


def test_config_rejects_impossible_thresholds() -> None:
    """Odd oscillation windows, too-low thresholds and windows larger than memory are errors."""
    for bad in (
        {"oscillation_window": 5},
        {"stuck_threshold": 1},
        {"progress_window": 2},
        {"progress_window": 30},
        {"min_progress": 0},
        {"message_dedup_window": 0},
        {"surprise": 1},
    ):
        with pytest.raises(ValidationError):
            ProgressConfig.model_validate(bad)


def test_the_tracker_round_trips_through_json_unchanged() -> None:
    """Continue-as-new can carry the tracker: JSON out and back is equal and behaves the same."""
    tracker = ProgressTracker(config=ProgressConfig(stuck_threshold=4))
    tracker.start_phase(1, "parse", T0, 5, total=3)
    edit(tracker, "a.go", "ha")
    tracker.record_tool_call("write_file", "b.go", success=True, mutating=True)
    fail(tracker, "main.go")
    fail(tracker, "main.go")
    tracker.record_test("pytest", passed=True, output="1 passed")
    tracker.record_message("hello")
    tracker.record_message("hello")
    tracker.start_phase(2, "emit", T0 + timedelta(minutes=1))
    fail(tracker, "main.go", "error at line 7")
    command(tracker, "ls", "x")
    copy = ProgressTracker.model_validate_json(tracker.model_dump_json())
    assert copy == tracker
    assert copy.model_dump() == tracker.model_dump()
    for t in (tracker, copy):
        fail(t, "main.go")
        fail(t, "main.go")
    assert tracker.check() is None
    assert copy.check() is None
    for t in (tracker, copy):
        fail(t, "main.go")
        fail(t, "main.go")
    assert tracker.check() is not None
    assert copy.check() == tracker.check()


def test_empty_replies_in_a_row_are_stuck_and_any_other_reply_ends_the_run() -> None:
    """``max_empty_replies`` empty replies in a row are stuck; a non-empty one resets the count,
    and so does a recovery."""
    tracker = ProgressTracker()
    assert tracker.record_reply(empty=True) is None
    assert tracker.record_reply(empty=True) is None
    assert tracker.record_reply(empty=False) is None
    assert tracker.record_reply(empty=True) is None
    assert tracker.record_reply(empty=True) is None
    reason = tracker.record_reply(empty=True)
    assert reason == "The model replied with nothing (no text, no tool call) 3 times in a row"
    assert tracker.check() == reason
    assert tracker.stuck_kind() == "empty_replies"
    tracker.reset_after_recovery()
    assert tracker.check() is None
