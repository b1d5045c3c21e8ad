"""Typed messages and pure bookkeeping of periodic jobs, shared by workflows, activities and CLI.

A job is an activity plus a ``JobDefinition``. A Temporal Schedule starts ``JobWorkflow`` with a
``JobRunInput``; the workflow records each run (``JobRun``) into the job's ledger, whose whole
state is one ``LedgerState``. Health comes from consecutive failures: 0 healthy, 1-2 degraded,
3 or more unhealthy; the overall health is the worst.

Pure data and arithmetic: no I/O, no clock, safe to import inside the workflow sandbox.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from typing import Self

from pydantic import AwareDatetime, Field, JsonValue, field_validator, model_validator

from treadle.workflows.base import Frozen, Mutable
from treadle.workflows.cron import FIELDS as CRON_FIELDS
from treadle.workflows.cron import check_cron

JOB_ID_PATTERN = r"^[a-z][a-z0-9-]{2,62}$"
"""Job ids name schedules and workflows: lowercase letter first, then ``[a-z0-9-]``."""

SCHEDULE_PREFIX = "treadle-job-"
LEDGER_PREFIX = "job-ledger-"

MAX_ERROR_CHARS = 1000
MAX_METADATA_BYTES = 2048
"""A run's metadata beyond this (as JSON) is replaced by a note: the ledger keeps hundreds of
runs in one workflow's state, and every payload must stay far below Temporal's 2 MB limit."""


def schedule_id(job_id: str) -> str:
    """The Temporal Schedule that starts the job: ``treadle-job-<id>``."""
    return f"{SCHEDULE_PREFIX}{job_id}"


def ledger_id(job_id: str) -> str:
    """The workflow that holds the job's run history: ``job-ledger-<id>``."""
    return f"{LEDGER_PREFIX}{job_id}"


class Trigger(enum.StrEnum):
    """Who started a run: its schedule, an operator (``jobs trigger``), or an operator retrying."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    RETRY = "retry"


class JobRunStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self is not JobRunStatus.RUNNING


class Health(enum.StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"

    @property
    def rank(self) -> int:
        return _HEALTH_RANK[self]


_HEALTH_RANK = {Health.HEALTHY: 0, Health.DEGRADED: 1, Health.UNHEALTHY: 2}

DEGRADED_AFTER = 1
UNHEALTHY_AFTER = 3


def health_for(consecutive_failures: int) -> Health:
    """0 failures in a row: healthy; 1-2: degraded; 3 or more: unhealthy."""
    if consecutive_failures >= UNHEALTHY_AFTER:
        return Health.UNHEALTHY
    if consecutive_failures >= DEGRADED_AFTER:
        return Health.DEGRADED
    return Health.HEALTHY


def worst(healths: Iterable[Health]) -> Health:
    """The overall health of several jobs: the worst of theirs (healthy when there are none)."""
    return max(healths, key=lambda h: h.rank, default=Health.HEALTHY)


# --------------------------------------------------------------------------------------------
# Definitions and runs
# --------------------------------------------------------------------------------------------


class JobDefinition(Frozen):
    """What runs, when, and how it is retried. Travels whole in the schedule's action."""

    id: str = Field(pattern=JOB_ID_PATTERN)
    name: str = Field(min_length=1, max_length=100)
    description: str = Field("", max_length=1000)
    activity: str = Field(min_length=1, max_length=200)
    """Name of the activity that does the work (taken from its ``JobActivity``, never typed)."""
    interval_seconds: float | None = Field(None, ge=1)
    """Run every this many seconds (counted from the Unix epoch, so ``3600`` is on the hour)."""
    cron: str | None = Field(None, max_length=200)
    """Or a cron expression, evaluated in UTC by the Temporal Schedule: standard five fields
    only (``treadle.workflows.cron.check_cron``: croniter's ``L``, ``W``, ``#`` and ``R`` are
    refused),
    with ranges from low to high, as the Temporal server requires (``22-2`` is refused)."""
    enabled: bool = True
    """A disabled job keeps its schedule, paused, so enabling it again resumes it."""
    max_retries: int = Field(3, ge=0, le=100)
    """Retries after the first attempt; Temporal makes ``max_retries + 1`` attempts at most."""
    retry_base_seconds: float = Field(5.0, gt=0)
    """Delay before the first retry."""
    backoff: float = Field(2.0, ge=1)
    """Each further retry waits this many times longer than the one before."""
    timeout_seconds: float = Field(600, gt=0)
    """Start-to-close timeout of one attempt."""
    heartbeat_timeout_seconds: float = Field(10, ge=1)
    """Job activities heartbeat: an attempt on a worker that died is retried after this long,
    and a cancellation reaches the job within about this long (heartbeats are throttled)."""
    params: dict[str, JsonValue] = Field(default_factory=dict)
    """Job-specific settings; the job's activity validates them into its own model."""

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        # Refused here, when the job is defined, rather than by create_schedule during a sync.
        return None if value is None else _ascending_ranges(check_cron(value))

    @model_validator(mode="after")
    def _one_schedule(self) -> Self:
        if (self.interval_seconds is None) == (self.cron is None):
            raise ValueError("give exactly one of interval_seconds or cron")
        return self

    @property
    def max_attempts(self) -> int:
        return self.max_retries + 1

    @property
    def schedule_text(self) -> str:
        """``every 1h`` / ``cron 0 3 * * *``, for people."""
        if self.cron is not None:
            return f"cron {self.cron}"
        return f"every {format_seconds(self.interval_seconds or 0)}"


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_CRON_NAMES = {name: n for n, name in enumerate(_MONTHS, 1)} | {
    name: n for n, name in enumerate(_WEEKDAYS)
}


def _ascending_ranges(expression: str) -> str:
    """``expression`` (checked by ``check_cron``) if no range in it runs backwards.

    croniter reads ``22-2`` as wrapping around; a Temporal Schedule refuses it ("End is before
    Start"), which would only show when the schedule is created.
    """
    for name, field in zip(CRON_FIELDS, expression.split(), strict=True):
        for item in field.split(","):
            low, dash, high = item.partition("/")[0].partition("-")
            if dash and _cron_value(low) > _cron_value(high):
                raise ValueError(
                    f"cron expression {expression!r}: {name} range {item!r} runs backwards; "
                    "Temporal Schedules need ranges from low to high (split it in two: hours "
                    "22-2 are 22-23,0-2)"
                )
    return expression


def _cron_value(text: str) -> int:
    return int(text) if text.isdigit() else _CRON_NAMES[text.lower()]


def format_seconds(seconds: float) -> str:
    """``90`` -> ``90s``, ``3600`` -> ``1h``, ``5400`` -> ``90m``, ``86400`` -> ``1d``."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class JobRunInput(Frozen):
    """Input of ``JobWorkflow``: the job as deployed, and who started this run."""

    job: JobDefinition
    trigger: Trigger = Trigger.SCHEDULE


class JobRequest(Frozen):
    """Input of a job's activity."""

    job_id: str
    workflow_id: str
    """The ``JobWorkflow`` run this attempt belongs to."""
    trigger: Trigger
    params: dict[str, JsonValue] = Field(default_factory=dict)


class JobOutput(Frozen):
    """What a job's activity returns: the job's metadata and the attempt that produced it."""

    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    attempt: int = Field(ge=1)


class JobRun(Frozen):
    """One run of a job, as its ledger keeps it (first while running, then once finished)."""

    run_id: str
    """The ``JobWorkflow``'s run id: unique, and the key a later record replaces."""
    workflow_id: str
    job_id: str
    trigger: Trigger
    status: JobRunStatus
    started_at: AwareDatetime
    finished_at: AwareDatetime | None = None
    duration_seconds: float | None = None
    attempts: int | None = None
    """Attempts the job's activity made; unknown (None) while running or when it was cancelled."""
    error: str | None = Field(None, max_length=MAX_ERROR_CHARS)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


def bounded_metadata(metadata: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """``metadata`` itself, or a note saying it was too large to keep."""
    size = len(json.dumps(metadata, default=str).encode())
    if size <= MAX_METADATA_BYTES:
        return metadata
    return {"note": f"metadata of {size} bytes dropped (over {MAX_METADATA_BYTES})"}


def bounded_error(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


# --------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------


class JobSummary(Frozen):
    """A job's health and last run: the ledger's ``summary`` query and its memo."""

    job_id: str
    health: Health = Health.HEALTHY
    consecutive_failures: int = 0
    total_runs: int = 0
    total_failures: int = 0
    last_run: JobRun | None = None


class HistoryRequest(Frozen):
    limit: int | None = Field(None, ge=1)
    """Newest runs to return; all the ledger keeps when unset."""


class JobHistory(Frozen):
    summary: JobSummary
    runs: tuple[JobRun, ...] = ()
    """Newest first."""


class PruneRequest(Frozen):
    before: AwareDatetime
    """Finished runs that ended before this (and runs still marked running that started before
    it, whose workflow was terminated) are removed."""


class PruneResult(Frozen):
    removed: int
    kept: int


class LedgerState(Mutable):
    """The whole state of one job's ledger; ``JobLedgerWorkflow`` continues-as-new with it."""

    job_id: str
    runs: list[JobRun] = Field(default_factory=list)
    """Oldest first (by start)."""
    consecutive_failures: int = 0
    total_runs: int = 0
    total_failures: int = 0
    max_records: int = Field(500, ge=1, le=5000)
    """Runs kept at most, whatever their age (bounds the state carried by continue-as-new)."""
    messages_per_run: int = Field(1000, ge=1)
    """Continue-as-new after this many records and prunes, if the server has not suggested it
    earlier."""

    def apply(self, run: JobRun) -> bool:
        """Add or replace ``run``; False for a duplicate of a run already finished."""
        index = next((i for i, r in enumerate(self.runs) if r.run_id == run.run_id), None)
        if index is not None and self.runs[index].status.is_final:
            return False  # a retried record activity delivered it twice
        if index is None:
            self.total_runs += 1
            self.runs.append(run)
            self.runs.sort(key=lambda r: r.started_at)
        else:
            self.runs[index] = run
        if run.status is JobRunStatus.FAILED:
            self.consecutive_failures += 1
            self.total_failures += 1
        elif run.status is JobRunStatus.SUCCEEDED:
            self.consecutive_failures = 0
        del self.runs[: max(0, len(self.runs) - self.max_records)]
        return True

    def prune(self, request: PruneRequest) -> PruneResult:
        def keep(run: JobRun) -> bool:
            return (run.finished_at or run.started_at) >= request.before

        before = len(self.runs)
        self.runs = [r for r in self.runs if keep(r)]
        return PruneResult(removed=before - len(self.runs), kept=len(self.runs))

    def summary(self) -> JobSummary:
        return JobSummary(
            job_id=self.job_id,
            health=health_for(self.consecutive_failures),
            consecutive_failures=self.consecutive_failures,
            total_runs=self.total_runs,
            total_failures=self.total_failures,
            last_run=self.runs[-1] if self.runs else None,
        )

    def history(self, request: HistoryRequest) -> JobHistory:
        newest = self.runs[::-1]
        if request.limit is not None:
            newest = newest[: request.limit]
        return JobHistory(summary=self.summary(), runs=tuple(newest))
