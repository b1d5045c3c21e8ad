"""Typed messages of cron monitoring, shared by ``MonitorWorkflow``, the CLI and the HTTP service.

Pure data plus the small pure helpers every side needs (workflow ids, ping keys, output
truncation); no I/O and no clock, safe inside the workflow sandbox.

A ping key is ``<slug>.<secret>``: the slug names the monitor's workflow (``monitor-<slug>``)
without asking a worker or a search index, the secret (random, made by the client that creates
the monitor) proves the caller may report for it.
"""

from __future__ import annotations

import enum
import hashlib
import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator
from temporalio.contrib.workflow_streams import WorkflowStreamState

from treadle.workflows import cron
from treadle.workflows.base import Frozen, Mutable

MONITOR_ID_PREFIX = "monitor-"
# Whole-string patterns: test with ``fullmatch`` (``match`` with ``$`` would let a trailing
# newline through).
SLUG_RE = re.compile(r"[a-z][a-z0-9_-]{2,49}")
SECRET_RE = re.compile(r"[A-Za-z0-9_-]{16,128}")

MAX_OUTPUT_BYTES = 10 * 1024
"""Check-in output is cut to this many bytes of UTF-8, never inside a character."""
EVENT_OUTPUT_BYTES = 1024
"""Events carry a shorter excerpt: they are retained in the stream and sent to every watcher."""

RECENT_CHECKINS = 500
"""Check-ins kept in the monitor's state (and carried through continue-as-new)."""
FULL_OUTPUT_CHECKINS = 50
"""The newest check-ins keep their full output; older ones keep an excerpt, so the state stays
far below Temporal's 2 MB payload limit when it is carried to the next run."""
OLD_OUTPUT_BYTES = 256
REFUSALS_KEPT = 20
HOURS_KEPT = 31 * 24
"""Hourly counters kept for the day / week / month statistics."""

EVENTS_TOPIC = "events"
"""The workflow stream topic that carries ``MonitorEvent``s."""

MEMO_PING_KEY_DIGEST = "ping_key_sha256"
MEMO_NAME = "name"
MEMO_SCHEDULE = "schedule"


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def check_slug(slug: str) -> str:
    if not SLUG_RE.fullmatch(slug):
        raise ValueError(
            f"invalid slug {slug!r}: 3-50 characters, a lowercase letter first, then lowercase "
            "letters, digits, '-' or '_'"
        )
    return slug


def monitor_workflow_id(slug: str) -> str:
    """The id of the one workflow that holds a monitor."""
    return f"{MONITOR_ID_PREFIX}{slug}"


def split_ping_key(key: str) -> tuple[str, str] | None:
    """``(slug, secret)`` of a well-formed ping key, else ``None``."""
    slug, dot, secret = key.partition(".")
    if not dot or not SLUG_RE.fullmatch(slug) or not SECRET_RE.fullmatch(secret):
        return None
    return slug, secret


def ping_key_digest(key: str) -> str:
    """What the monitor's memo keeps of its ping key, so the HTTP service can check a key
    without a worker and without the key itself being readable from the memo."""
    return hashlib.sha256(key.encode()).hexdigest()


def truncate_output(text: str, limit: int = MAX_OUTPUT_BYTES) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` bytes of UTF-8 on a character boundary, and whether it
    was cut."""
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text, False
    # A cut inside a multi-byte character leaves a partial sequence at the end: drop it.
    return encoded[:limit].decode("utf-8", errors="ignore"), True


# --------------------------------------------------------------------------------------------
# Monitors
# --------------------------------------------------------------------------------------------


class MonitorStatus(enum.StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    """Check-ins are recorded, but nothing goes missed or times out."""
    DISABLED = "disabled"
    """Check-ins are refused, and nothing goes missed or times out."""


class Health(enum.StrEnum):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    FAILING = "failing"
    MISSED = "missed"
    TIMEOUT = "timeout"


class CronSchedule(Frozen):
    """A 5-field cron expression, matched against the wall clock of an IANA time zone."""

    kind: Literal["cron"] = "cron"
    expression: str
    timezone: str = "UTC"

    @field_validator("expression")
    @classmethod
    def _expression(cls, value: str) -> str:
        return cron.check_cron(value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        cron.check_timezone(value)
        return value

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime:
        """The first expected run strictly after ``after`` (``anchor`` is for intervals)."""
        return cron.next_cron_time(self.expression, self.timezone, after)

    def describe(self) -> str:
        return f"cron '{self.expression}' ({self.timezone})"


class IntervalSchedule(Frozen):
    """A run every ``minutes``, counted from the previous run."""

    kind: Literal["interval"] = "interval"
    minutes: int = Field(ge=1, le=366 * 24 * 60)

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime:
        """The first ``anchor + k * minutes`` strictly after ``after`` (anchor: ``after``)."""
        return cron.next_interval_time(anchor or after, self.minutes, after)

    def describe(self) -> str:
        return f"every {self.minutes} min"


Schedule = Annotated[CronSchedule | IntervalSchedule, Field(discriminator="kind")]


class MonitorConfig(Frozen):
    """What a monitor watches for. Fixed when it is created."""

    slug: str
    name: str = Field("", max_length=200)
    """Human-readable name; the slug when left empty."""
    schedule: Schedule
    margin_minutes: int = Field(5, ge=1, le=30 * 24 * 60)
    """How late a run may check in before it counts as missed."""
    max_runtime_minutes: int | None = Field(None, ge=1, le=30 * 24 * 60)
    """An in-progress check-in older than this becomes a timeout."""
    ping_key: str
    """``<slug>.<secret>``, made by the client with ``secrets``, never inside the workflow."""

    @field_validator("slug")
    @classmethod
    def _slug(cls, value: str) -> str:
        return check_slug(value)

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("name") and isinstance(data.get("slug"), str):
            return {**data, "name": data["slug"]}
        return data

    @model_validator(mode="after")
    def _key_matches_slug(self) -> MonitorConfig:
        parts = split_ping_key(self.ping_key)
        if parts is None or parts[0] != self.slug:
            raise ValueError(f"ping_key must be '{self.slug}.<secret of 16+ URL-safe characters>'")
        return self

    def memo(self) -> dict[str, str]:
        """The monitor workflow's memo: readable from the server alone, without a worker."""
        return {
            MEMO_PING_KEY_DIGEST: ping_key_digest(self.ping_key),
            MEMO_NAME: self.name,
            MEMO_SCHEDULE: self.schedule.describe(),
        }

    @property
    def margin(self) -> timedelta:
        return timedelta(minutes=self.margin_minutes)

    @property
    def max_runtime(self) -> timedelta | None:
        if self.max_runtime_minutes is None:
            return None
        return timedelta(minutes=self.max_runtime_minutes)


# --------------------------------------------------------------------------------------------
# Check-ins
# --------------------------------------------------------------------------------------------


class CheckInStatus(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    OK = "ok"
    ERROR = "error"
    MISSED = "missed"
    """Written by the monitor: no check-in by next-expected + margin."""
    TIMEOUT = "timeout"
    """Written by the monitor: an in-progress run passed its max runtime."""


REPORTED_STATUSES = (CheckInStatus.IN_PROGRESS, CheckInStatus.OK, CheckInStatus.ERROR)


class CheckInSource(enum.StrEnum):
    PING = "ping"
    """The HTTP service (a crontab line with curl)."""
    SDK = "sdk"
    """Python code signalling the workflow with a Temporal client."""
    MANUAL = "manual"
    """``treadle monitors checkin``."""
    SYSTEM = "system"
    """The monitor itself (missed, timeout)."""


class CheckIn(Frozen):
    """One run as the monitor knows it. An in-progress check-in is completed in place by the
    next ok or error (or becomes a timeout), so a run is one record with start and finish."""

    id: int
    status: CheckInStatus
    source: CheckInSource
    created_at: AwareDatetime
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    duration_seconds: float | None = None
    exit_code: int | None = None
    output: str | None = None
    output_truncated: bool = False
    expected_at: AwareDatetime | None = None
    """For a missed check-in: the run that did not come."""

    @property
    def completed_at(self) -> datetime:
        """When its final status was reached (counted in statistics by this time)."""
        return self.finished_at or self.created_at


class CheckInSignal(Frozen):
    """Body of the ``checkin`` signal: what the monitored job reports.

    ``{"status": "ok"}`` is enough; ``temporal workflow signal --name checkin --input '{...}'``
    works too (source ``sdk``).
    """

    status: CheckInStatus
    source: CheckInSource = CheckInSource.SDK
    output: str | None = None
    exit_code: int | None = Field(None, ge=-(2**31), lt=2**31)
    duration_seconds: float | None = Field(None, ge=0, le=366 * 86_400)
    """How long the run took, when the job measured it (otherwise: since its in_progress)."""
    sent_at: AwareDatetime | None = None
    """When the sender received the check-in; a check-in that waited in Temporal for a worker
    keeps this time (never later than when the workflow sees it)."""
    ping_key: str | None = Field(None, max_length=300)
    """Required from the HTTP service; checked against the monitor's key."""

    @field_validator("status")
    @classmethod
    def _reported(cls, value: CheckInStatus) -> CheckInStatus:
        if value not in REPORTED_STATUSES:
            raise ValueError(
                f"a check-in reports in_progress, ok or error; {value.value} is written by the "
                "monitor itself"
            )
        return value

    @field_validator("source")
    @classmethod
    def _not_system(cls, value: CheckInSource) -> CheckInSource:
        if value is CheckInSource.SYSTEM:
            raise ValueError("source 'system' is reserved for check-ins the monitor writes")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> CheckInSignal:
        if self.status is CheckInStatus.OK and self.exit_code not in (None, 0):
            raise ValueError(f"an ok check-in cannot have exit code {self.exit_code}")
        if self.source is CheckInSource.PING and not self.ping_key:
            raise ValueError("a ping check-in must carry the monitor's ping_key")
        return self


class Refusal(Frozen):
    """A check-in the monitor did not accept, and why (bad body, wrong key, disabled)."""

    at: AwareDatetime
    reason: str
    body: str = ""
    """The start of what was sent, for debugging (never the ping key)."""


class HourCounts(Frozen):
    """Results completed within one UTC hour."""

    hour: AwareDatetime
    ok: int = 0
    error: int = 0
    missed: int = 0
    timeout: int = 0


class WindowStats(Frozen):
    """Results in one window: counts exact by the hour, durations from the kept check-ins."""

    window: Literal["day", "week", "month"]
    success: int = 0
    failure: int = 0
    missed: int = 0
    timeout: int = 0
    p50_seconds: float | None = None
    p95_seconds: float | None = None
    uptime_percent: float | None = None
    """ok / (ok + error + missed + timeout); none without results."""


class MonitorStats(Frozen):
    day: WindowStats
    week: WindowStats
    month: WindowStats


# --------------------------------------------------------------------------------------------
# Workflow state, input, queries, updates
# --------------------------------------------------------------------------------------------


class MonitorState(Mutable):
    """Everything a monitor knows; carried whole through continue-as-new."""

    config: MonitorConfig
    status: MonitorStatus = MonitorStatus.ACTIVE
    health: Health = Health.UNKNOWN
    created_at: AwareDatetime
    active_since: AwareDatetime
    """Creation or the last resume: deadlines that fell while paused count from here."""
    clock: AwareDatetime
    """The latest instant the monitor has accounted for; check-ins are never placed before it."""
    next_expected: AwareDatetime | None = None
    """The next run the schedule expects; none while paused or disabled."""
    open_run: int | None = None
    """Id of the in-progress check-in the next ok or error completes."""
    next_id: int = 1
    total_checkins: int = 0
    total_failures: int = 0
    consecutive_failures: int = 0
    last_checkin_at: AwareDatetime | None = None
    recent: list[CheckIn] = Field(default_factory=list)
    """Oldest first, at most ``RECENT_CHECKINS``."""
    hours: list[HourCounts] = Field(default_factory=list)
    refusals: list[Refusal] = Field(default_factory=list)
    refused_total: int = 0


class MonitorInput(Frozen):
    """Start (``state`` empty) or continue (``state`` carried) a monitor."""

    config: MonitorConfig
    state: MonitorState | None = None
    stream: WorkflowStreamState | None = None
    """The event stream's retained log and offsets, across continue-as-new."""
    continue_as_new_after_events: int = Field(10_000, ge=20)
    """History length at which the monitor starts a fresh run (Temporal's hard limit is 51,200)."""


class ViewRequest(Frozen):
    """Input of the ``view`` query."""

    recent: int = Field(20, ge=0, le=RECENT_CHECKINS)
    """How many of the newest check-ins to include."""
    as_of: AwareDatetime | None = None
    """The instant statistics are computed for. Clients should send their clock: the default,
    ``workflow.now()``, is inside a query the time of the workflow's latest activation, which may
    be days ago for a quiet monitor."""


class MonitorView(Frozen):
    """Answer of the ``view`` query and of the status updates."""

    slug: str
    name: str
    schedule: CronSchedule | IntervalSchedule
    schedule_text: str
    margin_minutes: int
    max_runtime_minutes: int | None
    status: MonitorStatus
    health: Health
    ping_key: str
    created_at: AwareDatetime
    next_expected: AwareDatetime | None
    missed_after: AwareDatetime | None
    """next_expected + margin: when the monitor goes missed without a check-in."""
    open_run: CheckIn | None
    last_checkin_at: AwareDatetime | None
    total_checkins: int
    total_failures: int
    consecutive_failures: int
    stats: MonitorStats
    recent: tuple[CheckIn, ...]
    """Newest first."""
    refusals: tuple[Refusal, ...]
    refused_total: int


class StatusChange(Frozen):
    """Input of the ``set_status`` update (pause, resume, disable)."""

    status: MonitorStatus


class DeleteRequest(Frozen):
    """Input of the ``delete`` update: the monitor's workflow completes."""

    reason: str | None = Field(None, max_length=500)


# --------------------------------------------------------------------------------------------
# Events (the live stream)
# --------------------------------------------------------------------------------------------


class MonitorEventType(enum.StrEnum):
    CHECKIN_STARTED = "checkin.started"
    CHECKIN_OK = "checkin.ok"
    CHECKIN_ERROR = "checkin.error"
    CHECKIN_REFUSED = "checkin.refused"
    MONITOR_MISSED = "monitor.missed"
    MONITOR_TIMEOUT = "monitor.timeout"
    MONITOR_HEALTHY = "monitor.healthy"
    """Recovered: an ok after error, missed or timeout."""
    MONITOR_PAUSED = "monitor.paused"
    MONITOR_RESUMED = "monitor.resumed"
    MONITOR_DISABLED = "monitor.disabled"
    MONITOR_DELETED = "monitor.deleted"


class MonitorEvent(Frozen):
    """One thing that happened to a monitor, as published on its workflow stream."""

    type: MonitorEventType
    slug: str
    at: AwareDatetime
    health: Health
    consecutive_failures: int
    message: str
    checkin: CheckIn | None = None
    """The check-in concerned, its output cut to ``EVENT_OUTPUT_BYTES``."""


def body_excerpt(body: Any, limit: int = 200) -> str:
    """A short, key-free rendering of a refused signal body for the refusal log."""
    if isinstance(body, dict):
        shown = {k: ("***" if k == "ping_key" else v) for k, v in body.items()}
        text = repr(shown)
    else:
        text = repr(body)
    return text if len(text) <= limit else text[: limit - 1] + "…"
