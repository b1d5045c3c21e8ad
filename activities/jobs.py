"""Periodic job activities: the built-in jobs, the job registry and the run bookkeeping.

A job is an activity plus its ``JobDefinition``. Job activities are written as plain async
functions ``(JobRequest) -> metadata dict`` and turned into activities by ``job_activity``,
which adds what every job needs: heartbeats (so cancellation and dead workers are noticed), the
attempt number on success and failure, and errors translated at the boundary::

    ApplicationError from the job     kept: message, type, non_retryable, next_retry_delay
    pydantic ValidationError          JobParamsInvalid, non-retryable (bad params stay bad)
    any other Exception               retryable, typed by the exception's class name

Temporal owns the retries (``JobWorkflow`` sets the policy from the definition); nothing here
loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, Field, JsonValue, ValidationError
from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities.heartbeat import heartbeating
from treadle.workflows.base import Frozen, describe_errors
from treadle.workflows.jobs.ledger import JobLedgerWorkflow
from treadle.workflows.jobs.models import (
    JobDefinition,
    JobOutput,
    JobRequest,
    JobRun,
    JobSummary,
    LedgerState,
    PruneRequest,
    bounded_metadata,
    ledger_id,
)

__all__ = [
    "ACTIVITIES",
    "HISTORY_CLEANUP",
    "WORKSPACE_CLEANUP",
    "Job",
    "JobActivity",
    "JobRegistry",
    "builtin_jobs",
    "cleanup_job_history",
    "cleanup_workspaces",
    "define_job",
    "job_activity",
    "job_registry",
    "record_job_run",
    "send_run",
]

JobFunction = Callable[[JobRequest], Awaitable[Mapping[str, JsonValue]]]
"""What a job's author writes: do the work, return metadata worth keeping in the history."""


@dataclass(frozen=True)
class JobActivity:
    """A job's activity: the registered function and its Temporal name."""

    name: str
    run: Callable[[JobRequest], Awaitable[JobOutput]]


def job_activity(name: str) -> Callable[[JobFunction], JobActivity]:
    """Make ``fn`` a job activity named ``name`` (heartbeats, attempt number, error mapping)."""

    def wrap(fn: JobFunction) -> JobActivity:
        @activity.defn(name=name)
        async def run(request: JobRequest) -> JobOutput:
            attempt = activity.info().attempt
            try:
                # The details carry the attempt, so a timed-out run still knows its attempts.
                async with heartbeating(attempt):
                    metadata = await fn(request)
            except ApplicationError as exc:
                raise ApplicationError(
                    exc.message,
                    attempt,  # first detail: JobWorkflow reads the attempt count from it
                    *exc.details,
                    type=exc.type or "JobError",
                    non_retryable=exc.non_retryable,
                    next_retry_delay=exc.next_retry_delay,
                ) from exc
            except ValidationError as exc:
                raise ApplicationError(
                    f"job {request.job_id}: invalid params: {describe_errors(exc, root='params')}",
                    attempt,
                    type="JobParamsInvalid",
                    non_retryable=True,
                ) from exc
            except Exception as exc:
                raise ApplicationError(
                    f"{type(exc).__name__}: {exc}", attempt, type=type(exc).__name__
                ) from exc
            try:
                return JobOutput(metadata=bounded_metadata(dict(metadata)), attempt=attempt)
            except ValidationError as exc:
                raise ApplicationError(
                    f"job {request.job_id} returned metadata that is not JSON: {exc}",
                    attempt,
                    type="JobOutputInvalid",
                    non_retryable=True,
                ) from exc

        run.__doc__ = fn.__doc__
        return JobActivity(name=name, run=run)

    return wrap


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """A job: its activity and its definition (whose ``activity`` is that activity's name)."""

    activity: JobActivity
    definition: JobDefinition

    def __post_init__(self) -> None:
        if self.definition.activity != self.activity.name:
            raise ValueError(
                f"job {self.definition.id}: definition names activity "
                f"{self.definition.activity!r}, not {self.activity.name!r}"
            )

    @property
    def id(self) -> str:
        return self.definition.id

    def with_changes(self, **fields: Any) -> Job:
        """The same job with some definition fields changed (validated again)."""
        data = self.definition.model_dump() | fields
        return Job(self.activity, JobDefinition.model_validate(data))


JobRegistry = Mapping[str, Job]
"""Job id -> job; ``sync_schedules`` makes one Temporal Schedule per entry."""


def define_job(activity: JobActivity, **fields: Any) -> Job:
    """A job running ``activity``; ``fields`` are ``JobDefinition`` fields (id, interval...)."""
    return Job(activity, JobDefinition(activity=activity.name, **fields))


def job_registry(*jobs: Job) -> JobRegistry:
    """A read-only registry; two jobs with one id are a mistake."""
    registry: dict[str, Job] = {}
    for job in jobs:
        if job.id in registry:
            raise ValueError(f"two jobs with id {job.id!r}")
        registry[job.id] = job
    return MappingProxyType(registry)


# --------------------------------------------------------------------------------------------
# Run bookkeeping
# --------------------------------------------------------------------------------------------


@activity.defn
async def record_job_run(run: JobRun) -> None:
    """Write one run record into its job's ledger, starting the ledger if none runs."""
    await send_run(activity.client(), activity.info().task_queue, run)


async def send_run(client: Client, task_queue: str, run: JobRun) -> JobSummary:
    """Update-with-start ``job-ledger-<job id>``: one call, whether or not the ledger runs yet;
    it returns once the ledger holds the record. Safe to repeat (records are keyed by run)."""
    start = WithStartWorkflowOperation(
        JobLedgerWorkflow.run,
        LedgerState(job_id=run.job_id),
        id=ledger_id(run.job_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"run history of job {run.job_id}",
    )
    return await client.execute_update_with_start_workflow(
        JobLedgerWorkflow.record, run, start_workflow_operation=start
    )


# --------------------------------------------------------------------------------------------
# Built-in jobs
# --------------------------------------------------------------------------------------------


class WorkspaceCleanupParams(Frozen):
    root: str = Field(min_length=1)
    """Directory holding one workspace per agent run, named by the run's workflow id."""
    retention_days: float = Field(7, gt=0)
    """A finished run's workspace is kept this long after the run closed and the workspace was
    last modified (whichever is later)."""


@dataclass(frozen=True)
class _Workspace:
    name: str
    path: Path
    touched: datetime
    """Newest modification time of the directory or anything in it."""


def _workspaces(root: Path) -> list[_Workspace]:
    if not root.is_dir():
        return []
    found = []
    with os.scandir(root) as entries:
        for entry in entries:
            # Symbolic links are never followed: nothing outside the root is judged or removed.
            if entry.is_dir(follow_symlinks=False):
                path = Path(entry.path)
                found.append(_Workspace(entry.name, path, _newest_mtime(path)))
    return sorted(found, key=lambda w: w.name)


def _newest_mtime(top: Path) -> datetime:
    newest = top.lstat().st_mtime
    for directory, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):  # removed while we walk
                newest = max(newest, os.lstat(os.path.join(directory, name)).st_mtime)
    return datetime.fromtimestamp(newest, UTC)


class _Run(enum.Enum):
    """What Temporal says of the run a workspace is named after."""

    OPEN = "open"
    """Running (or in any state but closed): its workspace is in use."""
    CLOSED = "closed"
    UNKNOWN = "unknown"
    """No such workflow: never started here, deleted by the namespace's retention, or the
    worker asks the wrong namespace. Indistinguishable, so the workspace is kept."""


_CLOSED = frozenset(
    {
        WorkflowExecutionStatus.COMPLETED,
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.CANCELED,
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.TIMED_OUT,
    }
)
"""Statuses of a run that ended for good (a run continued-as-new lives on in its successor)."""


async def _run_state(client: Client, workflow_id: str) -> tuple[_Run, datetime | None]:
    """The latest run with this workflow id, as Temporal sees it, and when it closed."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        # NOT_FOUND: no such workflow (or namespace); INVALID_ARGUMENT: a name that cannot be
        # a workflow id. Neither proves a run finished. Other errors fail the attempt (retried).
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            return _Run.UNKNOWN, None
        raise
    if description.status in _CLOSED and description.close_time is not None:
        return _Run.CLOSED, description.close_time
    return _Run.OPEN, None


MAX_LISTED_IDS = 10
"""Workspace names listed in a run's metadata per kind; the counts are complete. Two lists of
ten workflow ids stay well inside a run's 2 KiB of metadata."""


@job_activity("cleanup_workspaces")
async def cleanup_workspaces(request: JobRequest) -> dict[str, JsonValue]:
    """Delete agent workspaces whose runs closed longer ago than the retention.

    Only a run Temporal reports closed frees its workspace. Temporal forgets closed runs after
    the namespace's retention (a day on the dev server), so each cleanup also writes down, in
    ``<root>/.treadle-workspace-cleanup.json``, the close time of every run it saw closed; a run
    Temporal no longer knows but this file remembers (in the same namespace) is still cleaned
    on time. A workspace named after no run either has seen is kept and counted
    (``kept_unknown``): a wrong namespace or root looks exactly like that.
    """
    params = WorkspaceCleanupParams.model_validate(request.params)
    root = Path(params.root)
    retention = timedelta(days=params.retention_days)
    now = datetime.now(UTC)
    client = activity.client()
    seen = await asyncio.to_thread(_SeenClosed.load, root, client.namespace)
    removed: list[str] = []
    unknown: list[str] = []
    failed: list[str] = []
    kept_running = kept_recent = 0
    workspaces = await asyncio.to_thread(_workspaces, root)
    for workspace in workspaces:
        state, closed_at = await _run_state(client, workspace.name)
        if state is _Run.OPEN:
            kept_running += 1
            continue
        if closed_at is not None:
            seen.closed[workspace.name] = closed_at
        else:
            closed_at = seen.closed.get(workspace.name)  # purged by retention since
        if closed_at is None:
            unknown.append(workspace.name)
            continue
        if now - max(closed_at, workspace.touched) <= retention:
            kept_recent += 1
            continue
        try:
            await asyncio.to_thread(shutil.rmtree, workspace.path)
        except OSError as exc:
            failed.append(f"{workspace.name}: {exc.strerror or exc}")
            continue
        activity.logger.info("job.workspace_removed workspace=%s", workspace.path)
        removed.append(workspace.name)
        seen.closed.pop(workspace.name, None)
    present = {w.name for w in workspaces}
    seen.closed = {k: v for k, v in seen.closed.items() if k in present}
    await asyncio.to_thread(seen.save, root)
    if unknown:
        activity.logger.warning(
            "job.workspaces_unknown count=%d namespace=%s root=%s (kept: no such workflow)",
            len(unknown),
            client.namespace,
            root,
        )
    if failed:
        # Retryable: a file busy now may be free on the next attempt; removal is idempotent.
        raise ApplicationError(
            f"removed {len(removed)} workspace(s), could not remove {len(failed)}: "
            + "; ".join(failed[:5]),
            type="WorkspaceCleanupFailed",
        )
    return {
        "root": str(root),
        "removed": len(removed),
        "removed_ids": list(removed[:MAX_LISTED_IDS]),
        "kept_running": kept_running,
        "kept_recent": kept_recent,
        "kept_unknown": len(unknown),
        "kept_unknown_ids": list(unknown[:MAX_LISTED_IDS]),
    }


SEEN_CLOSED_FILE = ".treadle-workspace-cleanup.json"


class _SeenClosed(BaseModel):
    """Close times of runs the cleanup saw closed, kept beside the workspaces it manages."""

    namespace: str
    closed: dict[str, datetime] = Field(default_factory=dict)

    @classmethod
    def load(cls, root: Path, namespace: str) -> _SeenClosed:
        try:
            seen = cls.model_validate_json((root / SEEN_CLOSED_FILE).read_text())
        except (OSError, ValueError):
            return cls(namespace=namespace)  # none yet, or unreadable: start over, lose nothing
        # Another namespace's memory says nothing about runs in this one.
        return seen if seen.namespace == namespace else cls(namespace=namespace)

    def save(self, root: Path) -> None:
        if not root.is_dir():
            return
        temporary = root / f"{SEEN_CLOSED_FILE}.tmp"
        temporary.write_text(self.model_dump_json(indent=1))
        os.replace(temporary, root / SEEN_CLOSED_FILE)


class HistoryCleanupParams(Frozen):
    retention_days: float = Field(90, gt=0)
    """Runs that ended longer ago than this are removed from every job ledger."""


@job_activity("cleanup_job_history")
async def cleanup_job_history(request: JobRequest) -> dict[str, JsonValue]:
    """Prune job ledger records older than the retention, across all ledgers of this queue."""
    params = HistoryCleanupParams.model_validate(request.params)
    cutoff = datetime.now(UTC) - timedelta(days=params.retention_days)
    client = activity.client()
    task_queue = activity.info().task_queue
    if "'" in task_queue:
        raise ApplicationError(
            f"task queue {task_queue!r} cannot be named in a visibility query",
            type="JobParamsInvalid",
            non_retryable=True,
        )
    # Only ledgers on this task queue: they are the ones a worker here answers. A ledger of
    # another queue (another deployment) would leave the update waiting for its own workers.
    query = (
        f"WorkflowType = '{JobLedgerWorkflow.__name__}' AND ExecutionStatus = 'Running' "
        f"AND TaskQueue = '{task_queue}'"
    )
    ledgers = removed = 0
    async for execution in client.list_workflows(query):
        handle = client.get_workflow_handle_for(JobLedgerWorkflow.run, execution.id)
        result = await handle.execute_update(JobLedgerWorkflow.prune, PruneRequest(before=cutoff))
        ledgers += 1
        removed += result.removed
    return {"ledgers": ledgers, "removed": removed, "cutoff": cutoff.isoformat()}


WORKSPACE_CLEANUP = "workspace-cleanup"
HISTORY_CLEANUP = "job-history-cleanup"


def builtin_jobs(
    *,
    workspaces_root: Path,
    workspace_retention_days: float = 7,
    history_retention_days: float = 90,
) -> JobRegistry:
    """The jobs Treadle itself needs; ``workspaces_root`` is where ``run`` makes the workspaces
    of runs given none (``treadle.home.workspaces()``)."""
    return job_registry(
        define_job(
            cleanup_workspaces,
            id=WORKSPACE_CLEANUP,
            name="Workspace cleanup",
            description="Delete workspaces of agent runs that finished more than "
            f"{workspace_retention_days:g} days ago; running runs are never touched.",
            interval_seconds=3600,
            params={
                "root": str(workspaces_root.expanduser().resolve()),
                "retention_days": workspace_retention_days,
            },
        ),
        define_job(
            cleanup_job_history,
            id=HISTORY_CLEANUP,
            name="Job history cleanup",
            description=f"Prune job run records older than {history_retention_days:g} days.",
            interval_seconds=86_400,
            params={"retention_days": history_retention_days},
        ),
    )


ACTIVITIES: list[Callable[..., Any]] = [
    record_job_run,
    cleanup_workspaces.run,
    cleanup_job_history.run,
]
"""Activities the worker registers for jobs."""
