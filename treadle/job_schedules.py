"""Jobs on Temporal Schedules: one schedule ``treadle-job-<id>`` per enabled job, whose action
starts ``JobWorkflow`` with the job's whole definition; the server keeps time, not a process of
ours. ``sync_schedules`` creates and updates them idempotently; ``treadle worker --sync-jobs`` and
``treadle jobs sync`` both call it.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta

from pydantic import ValidationError
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
)
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities.jobs import JobRegistry
from treadle.workflows.base import Frozen
from treadle.workflows.jobs.models import JobDefinition, JobRunInput, Trigger, schedule_id
from treadle.workflows.jobs.workflow import JobWorkflow

__all__ = [
    "CATCHUP_WINDOW",
    "DISABLED_NOTE",
    "OVERLAP",
    "DeployedJob",
    "SyncAction",
    "SyncOutcome",
    "build_schedule",
    "deployed_job",
    "sync_schedules",
]


OVERLAP = ScheduleOverlapPolicy.SKIP
"""A job still running when its next time comes is not started again: the slot is skipped.
Cleanup jobs are idempotent, so the next slot does the skipped slot's work; two concurrent runs
would only race over the same files and records. (Manual triggers are not held back.)"""

CATCHUP_WINDOW = timedelta(minutes=1)
"""After the Temporal server was down, only slots missed by less than a minute are still run.
A backlog of hourly cleanups replayed at once after a long outage would do nothing useful; the
next regular slot catches up. (A stopped *worker* loses nothing: the started run waits in the
task queue, and SKIP keeps it to one.)"""

DISABLED_NOTE = "disabled in the job registry (enabled: false)"
"""The pause note of a disabled job. Sync unpauses only schedules paused with this note, so an
operator's `jobs pause` survives every `jobs sync` and `treadle worker --sync-jobs`."""

ENABLED_NOTE = "enabled in the job registry"


def build_schedule(job: JobDefinition, task_queue: str, *, paused: bool, note: str) -> Schedule:
    """The Temporal Schedule that starts ``JobWorkflow`` for ``job`` on ``task_queue``."""
    if job.cron is not None:
        spec = ScheduleSpec(cron_expressions=[job.cron])
    else:
        spec = ScheduleSpec(
            intervals=[ScheduleIntervalSpec(every=timedelta(seconds=job.interval_seconds or 0))]
        )
    return Schedule(
        action=ScheduleActionStartWorkflow(
            JobWorkflow.run,
            JobRunInput(job=job, trigger=Trigger.SCHEDULE),
            # Temporal appends the scheduled time: treadle-job-<id>-2026-01-01T00:00:00Z.
            id=schedule_id(job.id),
            task_queue=task_queue,
            static_summary=f"job {job.id} · schedule",
        ),
        spec=spec,
        policy=SchedulePolicy(
            overlap=OVERLAP,
            catchup_window=CATCHUP_WINDOW,
            # A failed run shows in the job's health; the next slot still runs.
            pause_on_failure=False,
        ),
        state=ScheduleState(paused=paused, note=note),
    )


class SyncAction(enum.StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    """Temporal refused the schedule (or could not be asked); ``error`` says why."""


class SyncOutcome(Frozen):
    job_id: str
    schedule_id: str
    action: SyncAction
    error: str | None = None


class DeployedJob(Frozen):
    """A job as its schedule runs it."""

    job: JobDefinition
    task_queue: str
    paused: bool
    note: str | None
    next_run: datetime | None


async def sync_schedules(
    client: Client, task_queue: str, registry: JobRegistry
) -> list[SyncOutcome]:
    """Create or update one schedule per job, idempotently: a second run changes nothing.

    A disabled job's schedule is paused (with ``DISABLED_NOTE``); enabling it again unpauses
    it; a pause made by an operator is kept. Schedules of jobs not in ``registry`` are left
    alone. A job whose schedule Temporal refuses is reported (``SyncAction.FAILED``, with the
    error) and the other jobs are still synced.
    """
    outcomes = []
    for job in registry.values():
        try:
            outcome = await _sync_one(client, task_queue, job.definition)
        except RPCError as exc:
            outcome = SyncOutcome(
                job_id=job.id,
                schedule_id=schedule_id(job.id),
                action=SyncAction.FAILED,
                error=f"{exc.status.name}: {exc.message}",
            )
        outcomes.append(outcome)
    return outcomes


async def _sync_one(client: Client, task_queue: str, job: JobDefinition) -> SyncOutcome:
    sid = schedule_id(job.id)
    note = DISABLED_NOTE if not job.enabled else ENABLED_NOTE
    try:
        await client.create_schedule(
            sid, build_schedule(job, task_queue, paused=not job.enabled, note=note)
        )
        return SyncOutcome(job_id=job.id, schedule_id=sid, action=SyncAction.CREATED)
    except ScheduleAlreadyRunningError:
        pass
    handle = client.get_schedule_handle(sid)
    description = await handle.describe()
    state = description.schedule.state
    if not job.enabled:
        paused, note = True, DISABLED_NOTE
    elif state.paused and state.note == DISABLED_NOTE:
        paused, note = False, ENABLED_NOTE
    else:  # keep what is there, an operator's pause included
        paused, note = state.paused, state.note or ""
    desired = build_schedule(job, task_queue, paused=paused, note=note)
    same_state = paused == state.paused and note == (state.note or "")
    if same_state and await _same_schedule(client, description, desired, job):
        return SyncOutcome(job_id=job.id, schedule_id=sid, action=SyncAction.UNCHANGED)
    await handle.update(lambda _: ScheduleUpdate(schedule=desired))
    return SyncOutcome(job_id=job.id, schedule_id=sid, action=SyncAction.UPDATED)


async def _same_schedule(
    client: Client, description: ScheduleDescription, desired: Schedule, job: JobDefinition
) -> bool:
    """Whether the deployed schedule already does what ``desired`` says.

    The definition travels in the action's input, so comparing the decoded input compares
    everything the registry controls; the server rewrites cron strings into calendar specs, so
    the spec itself is only compared for intervals.
    """
    current = description.schedule
    action, wanted = current.action, desired.action
    if not isinstance(action, ScheduleActionStartWorkflow) or not isinstance(
        wanted, ScheduleActionStartWorkflow
    ):
        return False
    deployed = await _decode_input(client, action)
    if (
        deployed is None
        or deployed != JobRunInput(job=job, trigger=Trigger.SCHEDULE)
        or (action.workflow, action.id, action.task_queue)
        != (wanted.workflow, wanted.id, wanted.task_queue)
        or current.policy != desired.policy
    ):
        return False
    spec = current.spec
    if job.cron is not None:
        return not spec.intervals and bool(spec.calendars or spec.cron_expressions)
    every = [(i.every, i.offset or timedelta(0)) for i in spec.intervals]
    return not spec.calendars and every == [
        (timedelta(seconds=job.interval_seconds or 0), timedelta(0))
    ]


async def _decode_input(client: Client, action: ScheduleActionStartWorkflow) -> JobRunInput | None:
    """The ``JobRunInput`` a described schedule's action carries; None if it is not ours."""
    if len(action.args) != 1:
        return None
    try:
        decoded = await client.data_converter.decode(list(action.args), [JobRunInput])
    except (ValidationError, TypeError, ValueError, RuntimeError):
        return None
    value = decoded[0]
    return value if isinstance(value, JobRunInput) else None


async def deployed_job(client: Client, job_id: str) -> DeployedJob | None:
    """The job as its schedule ``treadle-job-<id>`` runs it; None without such a schedule."""
    try:
        description = await client.get_schedule_handle(schedule_id(job_id)).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    return await _deployed(client, description)


async def _deployed(client: Client, description: ScheduleDescription) -> DeployedJob | None:
    action = description.schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow):
        return None
    decoded = await _decode_input(client, action)
    if decoded is None:
        return None
    state = description.schedule.state
    upcoming = description.info.next_action_times
    return DeployedJob(
        job=decoded.job,
        task_queue=action.task_queue,
        paused=state.paused,
        note=state.note,
        next_run=upcoming[0] if upcoming and not state.paused else None,
    )
