"""Typed messages of scheduled agents, shared by ``ScheduledAgentWorkflow``, the client side
(``treadle.scheduled_agents``) and the CLI.

An ``AgentSchedule`` is everything ``treadle schedule create`` was told: when (a cron
expression in a time zone, or every N minutes), the Schedule's policies (overlap, catch-up
window, jitter), the watching monitor's margin and max runtime, and what each slot does: start
an agent run (``agent``), or send an existing thread its next message (``message``).
The Temporal Schedule ``treadle-agent-<name>`` carries it whole in its action's input, so the
schedule alone says what it runs, and creating it again can be compared field by field.

Pure data: no I/O and no clock, safe inside the workflow sandbox.
"""

from __future__ import annotations

import enum
import re
from datetime import timedelta
from typing import Self

from pydantic import Field, field_validator, model_validator

from treadle.workflows import cron
from treadle.workflows.agent.messages.models import MAX_USER_MESSAGE_CHARS, AgentInput, RunStatus
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.base import Frozen
from treadle.workflows.monitors.models import CronSchedule, IntervalSchedule, check_slug

__all__ = [
    "DEFAULT_CATCHUP_WINDOW",
    "DEFAULT_MARGIN_MINUTES",
    "MIN_CATCHUP_WINDOW",
    "SCHEDULE_PREFIX",
    "AgentSchedule",
    "Overlap",
    "ScheduledRunInput",
    "ScheduledRunResult",
    "SendToThreadInput",
    "ThreadAnswer",
    "ThreadMessage",
    "agent_run_id",
    "format_duration",
    "parse_duration",
    "schedule_id",
]

SCHEDULE_PREFIX = "treadle-agent-"
"""Schedules (and the workflows they start) of scheduled agents: ``treadle-agent-<name>``."""

AGENT_RUN_SUFFIX = "-run"

DEFAULT_CATCHUP_WINDOW = timedelta(minutes=5)
"""After the Temporal server was down, a slot missed by less than this still runs. Temporal's own
default (a year) would replay every missed nightly run at once, each a paid model run; a slot
older than this is left missed, and the monitor says so."""

MIN_CATCHUP_WINDOW = timedelta(seconds=10)
"""Temporal refuses shorter catch-up windows."""

DEFAULT_MARGIN_MINUTES = 5
"""How late a run may start before its monitor records a missed check-in."""

MAX_MINUTES = 366 * 24 * 60

MAX_WORKFLOW_ID_CHARS = 1000
"""Temporal's default limit on a workflow id."""

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def schedule_id(name: str) -> str:
    """The Temporal Schedule of a scheduled agent; also the prefix of the workflows it starts
    (Temporal appends the scheduled time: ``treadle-agent-nightly-2026-01-01T02:00:00Z``)."""
    return f"{SCHEDULE_PREFIX}{name}"


def agent_run_id(scheduled_workflow_id: str) -> str:
    """The agent run a scheduled workflow starts: its id plus ``-run`` (what approve takes)."""
    return f"{scheduled_workflow_id}{AGENT_RUN_SUFFIX}"


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``1h30m``, ``1d``: days, hours, minutes and seconds, in that
    order; ``ValueError`` for anything else."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not text.strip() or match is None:
        raise ValueError(
            f"duration {text!r} is not like 90s, 15m, 2h, 1h30m or 1d (days, hours, minutes, "
            "seconds, in that order)"
        )
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest ``parse_duration`` spelling of ``value`` (``0s`` for nothing)."""
    total = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return "".join(parts) or "0s"


class Overlap(enum.StrEnum):
    """What the schedule does when a run is still going at the next slot."""

    SKIP = "skip"
    """The slot is skipped (the default): one agent at a time, no backlog of paid runs."""
    BUFFER = "buffer"
    """The slot waits for the running one to finish, then runs (one slot is kept)."""
    ALLOW = "allow"
    """The slot runs alongside the running one."""


class ThreadMessage(Frozen):
    """What a slot sends instead of starting a run: the next message of an existing thread."""

    thread_id: str = Field(min_length=1, max_length=MAX_WORKFLOW_ID_CHARS)
    """The thread's workflow id (``treadle chat --id``)."""
    text: str = Field(min_length=1, max_length=MAX_USER_MESSAGE_CHARS)
    """Sent as it is, every slot; the thread answers it with everything said before."""

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        # The thread's own validator refuses a blank message: refuse it at create, not at
        # every slot.
        if not value.strip():
            raise ValueError("the message is empty")
        return value


class AgentSchedule(Frozen):
    """One scheduled agent, as created; carried whole by its schedule's action."""

    name: str
    """The schedule's and its monitor's name (the monitor's slug)."""
    cron: str | None = None
    """Five-field cron expression, matched against ``timezone``'s wall clock."""
    timezone: str = "UTC"
    every_minutes: int | None = Field(None, ge=1, le=MAX_MINUTES)
    """Or a run every N minutes (whole minutes: the monitor counts in minutes)."""
    overlap: Overlap = Overlap.SKIP
    catchup_window_seconds: int = Field(
        int(DEFAULT_CATCHUP_WINDOW.total_seconds()),
        ge=int(MIN_CATCHUP_WINDOW.total_seconds()),
        le=MAX_MINUTES * 60,
    )
    jitter_seconds: int = Field(0, ge=0, le=MAX_MINUTES * 60)
    """Each run starts up to this much after its slot, at random (chosen by Temporal)."""
    margin_minutes: int = Field(DEFAULT_MARGIN_MINUTES, ge=1, le=30 * 24 * 60)
    max_runtime_minutes: int | None = Field(None, ge=1, le=30 * 24 * 60)
    """A run in progress longer than this is recorded as a timeout by the monitor."""
    agent: AgentInput | None = None
    """The run each slot starts (its workspace is fixed: every run works in the same one)."""
    message: ThreadMessage | None = None
    """Or the message each slot sends to a thread, waiting for its answer (no new run: the
    thread keeps its own model, workspace and config). Exactly one of ``agent`` and
    ``message``; schedules made before messages existed have ``agent`` and no ``message``."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_slug(value)

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return None if value is None else cron.check_cron(value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return cron.check_timezone(value).key

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.cron is None) == (self.every_minutes is None):
            raise ValueError("give exactly one of a cron expression or an interval (every)")
        if self.every_minutes is not None and self.timezone != "UTC":
            raise ValueError("a time zone goes with a cron expression; an interval needs none")
        if self.jitter_seconds >= self.margin_minutes * 60:
            raise ValueError(
                f"jitter {format_duration(self.jitter)} must be shorter than the monitor's "
                f"margin ({self.margin_minutes} min), or on-time runs would count as missed"
            )
        if self.every_minutes is not None and self.jitter_seconds >= self.every_minutes * 60:
            raise ValueError("jitter must be shorter than the interval")
        if (self.agent is None) == (self.message is None):
            raise ValueError("give exactly one of an agent run or a message to a thread")
        if self.agent is not None and self.agent.thread:
            raise ValueError("a scheduled agent starts single-task runs, not threads")
        return self

    @property
    def schedule_id(self) -> str:
        return schedule_id(self.name)

    @property
    def task(self) -> str:
        """The run's task, or the message sent to the thread."""
        if self.message is not None:
            return self.message.text
        return self.agent.task if self.agent is not None else ""

    @property
    def catchup_window(self) -> timedelta:
        return timedelta(seconds=self.catchup_window_seconds)

    @property
    def jitter(self) -> timedelta:
        return timedelta(seconds=self.jitter_seconds)

    def monitor_schedule(self) -> CronSchedule | IntervalSchedule:
        """The same times, as the cron monitor expects them."""
        if self.cron is not None:
            return CronSchedule(expression=self.cron, timezone=self.timezone)
        return IntervalSchedule(minutes=self.every_minutes or 1)

    def describe(self) -> str:
        """``cron '0 2 * * *' (Europe/Berlin)`` or ``every 15 min``."""
        return self.monitor_schedule().describe()


class ScheduledRunInput(Frozen):
    """Input of ``ScheduledAgentWorkflow``: the schedule that started it."""

    schedule: AgentSchedule


class ScheduledRunResult(Frozen):
    """How one scheduled run ended (also the details of a failed run's error)."""

    agent_run_id: str
    """The child run a slot started, or the thread it sent its message to."""
    status: RunStatus
    answer: str | None = None
    error: str | None = None
    duration_seconds: float


class SendToThreadInput(Frozen):
    """Input of the ``send_to_thread`` activity: one message for one thread."""

    thread_id: str = Field(min_length=1, max_length=MAX_WORKFLOW_ID_CHARS)
    text: str = Field(min_length=1, max_length=MAX_USER_MESSAGE_CHARS)


class ThreadAnswer(Frozen):
    """Where the thread stood once it had answered the message (or ended without it)."""

    thread_id: str
    state: State
    """``WaitingForUserInput`` (answered, waiting for the next), ``Done`` (answered, then
    closed), or the state it ended in (``Error``, ``Halted``, ``Cancelled``)."""
    answer: str | None = None
    error: str | None = None

    @property
    def answered(self) -> bool:
        # A thread answers its queued messages before it waits or closes: waiting or done
        # after taking the message means it was answered.
        return self.state in (State.WAITING_FOR_USER_INPUT, State.DONE)
