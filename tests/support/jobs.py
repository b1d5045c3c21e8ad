"""Test-only jobs and a worker that runs them, shared by the jobs room (tests/jobs).

The test jobs are real job activities (``job_activity``) whose behaviour is driven by their
params or by a control file, so one definition can fail, recover or hang on demand. The worker
is the product's ``build_worker``; the test jobs join ``treadle.activities.jobs.ACTIVITIES`` only
for the duration of a test (``monkeypatch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from treadle.activities import jobs as job_activities
from treadle.activities.jobs import (
    Job,
    JobActivity,
    JobRegistry,
    define_job,
    job_activity,
    job_registry,
    send_run,
)
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.cli.worker import build_worker
from treadle.job_schedules import sync_schedules
from treadle.workflows.jobs.ledger import JobLedgerWorkflow
from treadle.workflows.jobs.models import (
    HistoryRequest,
    JobHistory,
    JobRequest,
    JobRun,
    JobRunInput,
    JobSummary,
    Trigger,
    ledger_id,
    schedule_id,
)
from treadle.workflows.jobs.workflow import JobWorkflow


@job_activity("test_flaky_job")
async def flaky_job(request: JobRequest) -> dict[str, JsonValue]:
    """Fail the first ``fail_times`` attempts (retryably); with ``fatal``, fail non-retryably."""
    attempt = activity.info().attempt
    if request.params.get("fatal"):
        raise ApplicationError("fatal on purpose", type="Fatal", non_retryable=True)
    fail_times = request.params.get("fail_times", 0)
    if isinstance(fail_times, int) and attempt <= fail_times:
        raise RuntimeError(f"attempt {attempt} failed on purpose")
    return {"attempt": attempt}


@job_activity("test_switch_job")
async def switch_job(request: JobRequest) -> dict[str, JsonValue]:
    """Succeed or fail as the control file says (``ok`` / ``fail``)."""
    control = Path(str(request.params["control"]))
    if (await asyncio.to_thread(control.read_text)).strip() == "fail":
        raise RuntimeError("the control file says fail")
    return {"control": "ok"}


@job_activity("test_slow_job")
async def slow_job(request: JobRequest) -> dict[str, JsonValue]:
    """Write ``started`` to the marker file, then run until cancelled (writes ``cancelled``)."""
    marker = Path(str(request.params["marker"]))
    await asyncio.to_thread(marker.write_text, "started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.to_thread(marker.write_text, "cancelled")
        raise
    return {}


TEST_ACTIVITIES = [flaky_job.run, switch_job.run, slow_job.run]


class StalledFinalRecord:
    """A stand-in for ``record_job_run`` whose final records are held up, so a test can cancel a
    run while its outcome is being written.

    The first attempt at a final record fails (the activity then waits for its retry, the state
    in which a cancellation used to cancel it for good); the second waits for ``release``. The
    ``running`` record, and a final record once released, go to the ledger as usual.
    """

    def __init__(self) -> None:
        self.first_attempt_failed = asyncio.Event()
        self.release = asyncio.Event()

        @activity.defn(name="record_job_run")
        async def record_job_run(run: JobRun) -> None:
            if run.status.is_final:
                if activity.info().attempt == 1:
                    self.first_attempt_failed.set()
                    raise RuntimeError("the first attempt at a final record fails on purpose")
                await self.release.wait()
            await send_run(activity.client(), activity.info().task_queue, run)

        self.activity = record_job_run

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Replace ``record_job_run`` in the activities a worker built after this registers."""
        monkeypatch.setattr(
            job_activities,
            "ACTIVITIES",
            [
                self.activity if fn is job_activities.record_job_run else fn
                for fn in job_activities.ACTIVITIES
            ],
        )


def unique_job(activity: JobActivity, prefix: str, **fields: Any) -> Job:
    """A job with a fresh id (the dev server is shared by the session) and tiny retry delays."""
    defaults: dict[str, Any] = {
        "id": f"{prefix}-{uuid.uuid4().hex[:8]}",
        "name": f"test {prefix}",
        "interval_seconds": 3600,
        "retry_base_seconds": 0.1,
    }
    return define_job(activity, **(defaults | fields))


@dataclass
class JobsEnv:
    """A worker on a task queue of its own, and what a jobs test does with it."""

    client: Client
    task_queue: str
    job_ids: set[str] = field(default_factory=set)

    def registry(self, *jobs: Job) -> JobRegistry:
        self.job_ids.update(job.id for job in jobs)
        return job_registry(*jobs)

    async def sync(self, registry: JobRegistry) -> dict[str, str]:
        self.job_ids.update(registry)
        return {
            o.job_id: o.action for o in await sync_schedules(self.client, self.task_queue, registry)
        }

    async def start(
        self, job: Job, trigger: Trigger = Trigger.MANUAL
    ) -> WorkflowHandle[Any, JobRun]:
        self.job_ids.add(job.id)
        return await self.client.start_workflow(
            JobWorkflow.run,
            JobRunInput(job=job.definition, trigger=trigger),
            id=f"{schedule_id(job.id)}-{uuid.uuid4().hex[:8]}",
            task_queue=self.task_queue,
        )

    async def history(self, job_id: str) -> JobHistory:
        handle = self.client.get_workflow_handle_for(JobLedgerWorkflow.run, ledger_id(job_id))
        return await handle.query(JobLedgerWorkflow.history, HistoryRequest())

    async def summary(self, job_id: str) -> JobSummary:
        handle = self.client.get_workflow_handle_for(JobLedgerWorkflow.run, ledger_id(job_id))
        return await handle.query(JobLedgerWorkflow.summary)

    async def cleanup(self) -> None:
        for job_id in self.job_ids:
            with contextlib.suppress(RPCError):
                await self.client.get_schedule_handle(schedule_id(job_id)).delete()
            with contextlib.suppress(RPCError):
                await self.client.get_workflow_handle(ledger_id(job_id)).terminate("test over")


@contextlib.asynccontextmanager
async def jobs_worker(client: Client, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[JobsEnv]:
    """build_worker with the test jobs registered, on a fresh task queue; tidies up after."""
    monkeypatch.setattr(
        job_activities, "ACTIVITIES", [*job_activities.ACTIVITIES, *TEST_ACTIVITIES]
    )
    env = JobsEnv(client, f"test-jobs-{uuid.uuid4().hex[:12]}")
    try:
        async with (
            http_client() as http,
            build_worker(
                client, task_queue=env.task_queue, settings=ProviderSettings.from_env({}), http=http
            ),
        ):
            yield env
    finally:
        await env.cleanup()


async def eventually(check: Any, timeout: float = 15, interval: float = 0.1) -> Any:
    """Await ``check()`` until it returns something truthy (visibility is eventually consistent)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"still {result!r} after {timeout}s")
        await asyncio.sleep(interval)
