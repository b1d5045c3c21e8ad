"""`treadle jobs ...`: list, history, trigger, pause, unpause, sync.

The schedules themselves (one per enabled job) are made by ``treadle.job_schedules``.

    treadle jobs list [ID ...] [--json]
    treadle jobs history ID [--limit N] [--json]
    treadle jobs trigger ID [--retry] [--wait] [--json]
    treadle jobs pause ID [--note TEXT]      treadle jobs unpause ID
    treadle jobs sync [--workspaces DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Collection
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError, CancelledError, FailureError
from temporalio.service import RPCError, RPCStatusCode

from treadle import home
from treadle.activities.jobs import JobRegistry, builtin_jobs
from treadle.cli.exits import UsageError
from treadle.cli.tables import table
from treadle.job_schedules import (
    DISABLED_NOTE,
    DeployedJob,
    SyncAction,
    deployed_job,
    sync_schedules,
)
from treadle.workflows.base import Frozen
from treadle.workflows.jobs.ledger import SUMMARY_MEMO, JobLedgerWorkflow
from treadle.workflows.jobs.models import (
    SCHEDULE_PREFIX,
    Health,
    HistoryRequest,
    JobHistory,
    JobRun,
    JobRunInput,
    JobRunStatus,
    JobSummary,
    Trigger,
    ledger_id,
    schedule_id,
    worst,
)
from treadle.workflows.jobs.workflow import JobWorkflow

__all__ = [
    "JobList",
    "JobListing",
    "list_jobs",
    "register",
    "trigger_job",
]

QUERY_TIMEOUT = timedelta(seconds=10)


# --------------------------------------------------------------------------------------------
# Listing, history, triggering
# --------------------------------------------------------------------------------------------


class JobListing(Frozen):
    """One row of `jobs list`."""

    id: str
    name: str
    schedule: str
    state: str
    """``enabled``, ``paused``, ``disabled`` (paused by the registry) or ``not synced``."""
    note: str | None = None
    task_queue: str | None = None
    next_run: datetime | None = None
    last_run_status: JobRunStatus | None = None
    last_run_at: datetime | None = None
    health: Health
    consecutive_failures: int = 0


class JobList(Frozen):
    jobs: tuple[JobListing, ...]
    overall_health: Health


async def list_jobs(
    client: Client, registry: JobRegistry, job_ids: Collection[str] | None = None
) -> JobList:
    """Every job with a ``treadle-job-`` schedule, plus registry jobs not synced yet; or only
    the jobs ``job_ids`` names (those that exist), the overall health then being theirs."""
    if job_ids is not None:
        ids = set(job_ids)
    else:
        ids = set(registry)
        async for listed in await client.list_schedules():
            if listed.id.startswith(SCHEDULE_PREFIX):
                ids.add(listed.id.removeprefix(SCHEDULE_PREFIX))
    rows = await asyncio.gather(*(_listing(client, registry, job_id) for job_id in sorted(ids)))
    jobs = tuple(row for row in rows if row is not None)
    return JobList(jobs=jobs, overall_health=worst(row.health for row in jobs))


async def _listing(client: Client, registry: JobRegistry, job_id: str) -> JobListing | None:
    deployed, summary = await asyncio.gather(deployed_job(client, job_id), _summary(client, job_id))
    if deployed is not None:
        job = deployed.job
        if not deployed.paused:
            state = "enabled"
        elif deployed.note == DISABLED_NOTE:
            state = "disabled"
        else:
            state = "paused"
    elif job_id in registry:
        job, state = registry[job_id].definition, "not synced"
    else:
        return None  # a schedule with our prefix that is not a job (or vanished meanwhile)
    last = summary.last_run
    return JobListing(
        id=job.id,
        name=job.name,
        schedule=job.schedule_text,
        state=state,
        note=deployed.note if deployed is not None and deployed.paused else None,
        task_queue=deployed.task_queue if deployed is not None else None,
        next_run=deployed.next_run if deployed is not None else None,
        last_run_status=last.status if last else None,
        last_run_at=last.started_at if last else None,
        health=summary.health,
        consecutive_failures=summary.consecutive_failures,
    )


async def _summary(client: Client, job_id: str) -> JobSummary:
    """The ledger's summary memo: a describe call, answered without a worker."""
    try:
        description = await client.get_workflow_handle(ledger_id(job_id)).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return JobSummary(job_id=job_id)  # never ran
        raise
    summary: JobSummary = await description.memo_value(
        SUMMARY_MEMO, JobSummary(job_id=job_id), type_hint=JobSummary
    )
    return summary


async def _known(client: Client, registry: JobRegistry, job_id: str) -> DeployedJob | None:
    """The deployed job, or None for a registry job not synced; UsageError for neither."""
    deployed = await deployed_job(client, job_id)
    if deployed is None and job_id not in registry:
        raise UsageError(f"unknown job {job_id!r} (see: treadle jobs list)")
    return deployed


async def trigger_job(
    client: Client,
    registry: JobRegistry,
    job_id: str,
    *,
    trigger: Trigger = Trigger.MANUAL,
    task_queue: str,
) -> WorkflowHandle[Any, JobRun]:
    """Start ``JobWorkflow`` now, as the job's schedule would (same definition, same queue).

    A job that is not synced runs from ``registry`` on ``task_queue``.
    """
    deployed = await _known(client, registry, job_id)
    if deployed is not None:
        job, task_queue = deployed.job, deployed.task_queue
    else:
        job = registry[job_id].definition
    return await client.start_workflow(
        JobWorkflow.run,
        JobRunInput(job=job, trigger=trigger),
        id=f"{schedule_id(job.id)}-{trigger}-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        static_summary=f"job {job.id} · {trigger}",
    )


async def _outcome(handle: WorkflowHandle[Any, JobRun]) -> JobRun | str:
    """The run's final record, or a sentence when there is none (cancelled, terminated)."""
    try:
        return await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "JobFailed" and cause.details:
            try:
                return JobRun.model_validate(cause.details[0])
            except ValidationError:
                pass
        if isinstance(cause, CancelledError):
            return "cancelled"
        # The innermost cause says what went wrong (e.g. why the ledger could not be written).
        innermost: BaseException = exc
        while isinstance(innermost, FailureError) and innermost.cause is not None:
            innermost = innermost.cause
        return f"failed: {getattr(innermost, 'message', None) or innermost}"


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else "-"


def _metadata_text(run: JobRun, limit: int = 80) -> str:
    if run.error:
        text = run.error.replace("\n", " ")
    else:
        text = " ".join(
            f"{key}={value if isinstance(value, str) else json.dumps(value)}"
            for key, value in run.metadata.items()
        )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_list(listing: JobList) -> str:
    rows = [("JOB", "SCHEDULE", "STATE", "NEXT RUN", "LAST RUN", "HEALTH")]
    for job in listing.jobs:
        last = f"{job.last_run_status} {_time(job.last_run_at)}" if job.last_run_status else "-"
        health = str(job.health)
        if job.consecutive_failures:
            health += f" ({job.consecutive_failures} failed in a row)"
        rows.append((job.id, job.schedule, job.state, _time(job.next_run), last, health))
    return f"{table(rows)}\noverall health: {listing.overall_health}"


def format_history(history: JobHistory) -> str:
    s = history.summary
    head = (
        f"job {s.job_id}: {s.health}, {s.consecutive_failures} consecutive failure(s), "
        f"{s.total_runs} run(s) recorded, {s.total_failures} failed"
    )
    if not history.runs:
        return f"{head}\nno runs recorded"
    rows = [("STARTED", "TRIGGER", "STATUS", "DURATION", "ATTEMPTS", "DETAILS")]
    for run in history.runs:
        duration = f"{run.duration_seconds:.2f}s" if run.duration_seconds is not None else "-"
        attempts = str(run.attempts) if run.attempts is not None else "-"
        rows.append(
            (
                _time(run.started_at),
                str(run.trigger),
                str(run.status),
                duration,
                attempts,
                _metadata_text(run),
            )
        )
    return f"{head}\n{table(rows)}"


def format_run(run: JobRun) -> str:
    attempts = f"{run.attempts} attempt(s)" if run.attempts is not None else "? attempt(s)"
    duration = f"{run.duration_seconds:.2f}s" if run.duration_seconds is not None else "?"
    details = _metadata_text(run, limit=200)
    return (
        f"job {run.job_id} {run.status} after {attempts} in {duration} ({run.trigger}; "
        f"workflow {run.workflow_id})" + (f"\n{details}" if details else "")
    )


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def _registry(args: argparse.Namespace) -> JobRegistry:
    root = getattr(args, "workspaces", None)
    return builtin_jobs(
        workspaces_root=Path(root) if root else home.workspaces(),
        workspace_retention_days=getattr(args, "workspace_retention_days", 7.0),
        history_retention_days=getattr(args, "history_retention_days", 90.0),
    )


async def cmd_list(client: Client, args: argparse.Namespace) -> int:
    job_ids: list[str] = args.job_ids
    listing = await list_jobs(client, _registry(args), job_ids or None)
    missing = sorted(set(job_ids) - {row.id for row in listing.jobs})
    if missing:
        raise UsageError(f"unknown job {missing[0]!r} (see: treadle jobs list)")
    print(listing.model_dump_json(indent=2) if args.json else format_list(listing))
    return 0


async def cmd_history(client: Client, args: argparse.Namespace) -> int:
    job_id: str = args.job_id
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be 1 or more")
    handle = client.get_workflow_handle_for(JobLedgerWorkflow.run, ledger_id(job_id))
    try:
        history = await handle.query(
            JobLedgerWorkflow.history, HistoryRequest(limit=args.limit), rpc_timeout=QUERY_TIMEOUT
        )
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise UsageError(
                f"the history of job {job_id!r} did not answer ({exc.message}); "
                "is a worker running on its task queue?"
            ) from exc
        await _known(client, _registry(args), job_id)  # unknown job: exit 2
        history = JobHistory(summary=JobSummary(job_id=job_id))
    print(history.model_dump_json(indent=2) if args.json else format_history(history))
    return 0


async def cmd_trigger(client: Client, args: argparse.Namespace) -> int:
    trigger = Trigger.RETRY if args.retry else Trigger.MANUAL
    handle = await trigger_job(
        client, _registry(args), args.job_id, trigger=trigger, task_queue=args.task_queue
    )
    if not args.wait:
        print(json.dumps({"workflow_id": handle.id}) if args.json else handle.id)
        return 0
    outcome = await _outcome(handle)
    if isinstance(outcome, str):
        print(f"job {args.job_id}: {outcome} (workflow {handle.id})")
        return 1
    print(outcome.model_dump_json(indent=2) if args.json else format_run(outcome))
    return 0 if outcome.status is JobRunStatus.SUCCEEDED else 1


async def cmd_pause(client: Client, args: argparse.Namespace) -> int:
    deployed = await _known(client, _registry(args), args.job_id)
    if deployed is None:
        raise UsageError(f"job {args.job_id!r} has no schedule yet; run: treadle jobs sync")
    handle = client.get_schedule_handle(schedule_id(args.job_id))
    if args.command_name == "pause":
        note = args.note or "paused with treadle jobs pause"
        await handle.pause(note=note)
        print(f"paused job {args.job_id} ({note})")
    else:
        note = args.note or "unpaused with treadle jobs unpause"
        await handle.unpause(note=note)
        print(f"unpaused job {args.job_id} ({note})")
    return 0


async def cmd_sync(client: Client, args: argparse.Namespace) -> int:
    """Sync every job and print each outcome; exit 1 if any schedule could not be synced."""
    outcomes = await sync_schedules(client, args.task_queue, _registry(args))
    if args.json:
        print(json.dumps([o.model_dump(mode="json") for o in outcomes], indent=2))
    else:
        for o in outcomes:
            where = f"schedule {o.schedule_id}, task queue {args.task_queue}"
            print(f"{o.job_id}: {o.action} ({where})" + (f": {o.error}" if o.error else ""))
    failed = [o.job_id for o in outcomes if o.action is SyncAction.FAILED]
    if failed:
        print(
            f"error: {len(failed)} of {len(outcomes)} job schedule(s) not synced: "
            + ", ".join(failed),
            file=sys.stderr,
        )
        return 1
    return 0


def register(subparsers: Any) -> None:
    """Add the `jobs` command; each leaf sets `handler` (async (client, args) -> exit code)."""
    jobs = subparsers.add_parser(
        "jobs", help="periodic jobs on Temporal Schedules: list, history, trigger, pause, sync"
    )
    sub = jobs.add_subparsers(dest="jobs_command", required=True)

    def builtin_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--workspaces",
            metavar="DIR",
            help="root of the agent workspaces workspace-cleanup judges (default: workspaces/ "
            "in the data directory, TREADLE_HOME or ./.treadle)",
        )
        parser.add_argument("--workspace-retention-days", type=float, default=7.0, metavar="DAYS")
        parser.add_argument("--history-retention-days", type=float, default=90.0, metavar="DAYS")

    listing = sub.add_parser("list", help="jobs with schedule, state, next and last run, health")
    listing.add_argument(
        "job_ids", metavar="ID", nargs="*", help="only these jobs (overall health is theirs)"
    )
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_list)

    history = sub.add_parser("history", help="a job's recorded runs, newest first")
    history.add_argument("job_id", metavar="ID")
    history.add_argument("--limit", type=int, default=20, help="newest N runs (default 20)")
    history.add_argument("--json", action="store_true")
    history.set_defaults(handler=cmd_history)

    trigger = sub.add_parser("trigger", help="run a job now (trigger manual)")
    trigger.add_argument("job_id", metavar="ID")
    trigger.add_argument("--retry", action="store_true", help="record the run as a retry")
    trigger.add_argument("--wait", action="store_true", help="wait and print the outcome")
    trigger.add_argument("--json", action="store_true")
    trigger.set_defaults(handler=cmd_trigger)

    for name, text in (("pause", "pause a job's schedule"), ("unpause", "unpause it")):
        p = sub.add_parser(name, help=text)
        p.add_argument("job_id", metavar="ID")
        p.add_argument("--note", help="why (shown by jobs list and in the Web UI)")
        p.set_defaults(handler=cmd_pause, command_name=name)

    sync = sub.add_parser("sync", help="create or update the built-in jobs' schedules (idempotent)")
    builtin_options(sync)
    sync.add_argument("--json", action="store_true")
    sync.set_defaults(handler=cmd_sync)
