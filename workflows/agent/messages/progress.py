"""Nexora's progress tracking as the run's messages: how the tracker is configured
(``ProgressConfig``, part of ``AgentConfig``), what it records of each action and phase, and the
summary a run shows (``ProgressSummary``). The tracker itself is ``parts.tracker``."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Self, TypeVar

from pydantic import Field, field_validator, model_validator

from treadle.workflows.base import Frozen

__all__ = [
    "ActionKind",
    "ActionRecord",
    "ErrorRecord",
    "PhaseOrderError",
    "PhaseRecord",
    "ProgressConfig",
    "ProgressSummary",
    "TestRecord",
]

_SHORT = 120
_T = TypeVar("_T")
_MAX_BLOCKERS = 10


class PhaseOrderError(ValueError):
    """A phase was started with a number not greater than the phase before it."""


class ProgressConfig(Frozen):
    """Thresholds for stuck detection (defaults from Nexora)."""

    stuck_threshold: int = Field(3, ge=2, le=100)
    """Identical failures on one target in a row that mean stuck."""
    oscillation_window: int = Field(4, ge=4, le=100)
    """Successful file writes that must alternate A, B, A, B (even)."""
    progress_window: int = Field(10, ge=3, le=1000)
    """Actions looked at by the no-progress rule."""
    min_progress: int = Field(1, ge=1, le=1000)
    """Progress items needed within ``progress_window``."""
    max_recent_actions: int = Field(20, ge=3, le=1000)
    max_recent_errors: int = Field(10, ge=1, le=1000)
    message_dedup_window: int = Field(5, ge=1, le=100)
    """A message repeating one of this many previous messages is stuck."""
    progress_report_every: int = Field(10, ge=1, le=100_000)
    """Tool calls between two periodic progress reports."""
    max_test_history: int = Field(20, ge=1, le=1000)
    """Test results kept verbatim (the counts cover all of them)."""
    command_tools: tuple[str, ...] = ("run_command",)
    """Tools whose target is a command, not a file: they never oscillate or modify files."""
    max_empty_replies: int = Field(3, ge=1, le=1000)
    """Replies in a row with no text and no tool call that mean stuck."""
    exploration_is_progress: bool = True
    """A read or listing of something not seen before counts as progress (exploration)."""
    max_seen_reads: int = Field(500, ge=1, le=100_000)
    """Read targets remembered with their content hash (the oldest are forgotten first)."""

    @field_validator("oscillation_window")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("oscillation_window must be even (A, B, A, B ...)")
        return value

    @model_validator(mode="after")
    def _windows_fit(self) -> Self:
        if self.progress_window > self.max_recent_actions:
            raise ValueError(
                f"progress_window ({self.progress_window}) cannot exceed "
                f"max_recent_actions ({self.max_recent_actions})"
            )
        if self.min_progress > self.progress_window:
            raise ValueError(
                f"min_progress ({self.min_progress}) cannot exceed "
                f"progress_window ({self.progress_window})"
            )
        return self


class ActionKind(enum.StrEnum):
    READ_ONLY = "read_only"
    FILE_WRITE = "file_write"
    COMMAND = "command"
    TEST = "test"


class ActionRecord(Frozen):
    """One tool call or test result, as the windowed rules see it."""

    kind: ActionKind
    tool: str
    target: str
    success: bool
    changed: bool = False
    """A successful write or command that changed something (counts as progress)."""
    content_hash: str | None = None
    error_hash: str | None = None


class ErrorRecord(Frozen):
    tool: str
    target: str
    error_hash: str
    text: str
    """The error, shortened to about 120 characters."""


class TestRecord(Frozen):
    __test__ = False  # not a pytest test class, despite the name

    command: str
    passed: bool
    output: str
    """The last non-empty line of the output, shortened (pytest's summary line, typically)."""
    phase: int | None


class PhaseRecord(Frozen):
    """A completed phase."""

    number: int
    description: str
    started_at: datetime
    finished_at: datetime
    duration_seconds: float
    expected_minutes: float | None
    files_changed: tuple[str, ...]
    """Sorted distinct files written successfully during the phase."""
    tests_passed: int
    tool_calls: int
    blockers: tuple[str, ...]
    """``target: error`` for failures not followed by a success on that target (at most 10)."""
    success: bool


class ProgressSummary(Frozen):
    """Total progress, for ``status`` and the periodic ``agent.progress`` log event."""

    phases_completed: int
    total_phases: int | None
    current_phase: int | None
    current_phase_description: str | None
    files_modified: int
    tool_calls: int
    tests_passed: int
    tests_failed: int
    recent_successes: int
    recent_failures: int
    elapsed_seconds: float

    def describe(self) -> str:
        """One line for people: the CLI's status, the Web UI's details, the trace."""
        phase = ""
        if self.current_phase is not None:
            phase = f"phase {self.current_phase} of {self.total_phases or '?'}, "
        return (
            f"{phase}{self.phases_completed} phase(s) done, {self.tool_calls} tool calls, "
            f"{self.files_modified} files, {self.tests_passed} tests passed"
        )
