"""Periodic jobs: the job workflow started by Temporal Schedules, and each job's run ledger.

``JobWorkflow`` is short: record the run as running, run the job's activity with the retry
policy its definition asks for, record the outcome. Temporal keeps time (Schedules) and retries
(the activity's ``RetryPolicy``); this module has no timers and no retry loops.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    is_cancelled_exception,
)

from treadle.workflows.base import failure_message
from treadle.workflows.jobs.ledger import JobLedgerWorkflow
from treadle.workflows.jobs.models import (
    JobDefinition,
    JobOutput,
    JobRequest,
    JobRun,
    JobRunInput,
    JobRunStatus,
    bounded_error,
)

with workflow.unsafe.imports_passed_through():
    # Referenced by function (names by object); the module imports the Temporal client, which
    # must not be re-imported inside the sandbox on every run.
    from treadle.activities.jobs import record_job_run

RECORD_TIMEOUT = timedelta(seconds=30)
RECORD_DEADLINE = timedelta(minutes=5)
RECORD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
"""Writing a record is one signal; it is retried until ``RECORD_DEADLINE``, then the run fails
loudly rather than running a job nobody would see in the history."""


def job_retry_policy(job: JobDefinition) -> RetryPolicy:
    """The seed's retry rule, as Temporal's: ``max_retries`` retries, base delay, backoff."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=job.retry_base_seconds),
        backoff_coefficient=job.backoff,
        maximum_attempts=job.max_attempts,
    )


@workflow.defn(failure_exception_types=[ValidationError])
class JobWorkflow:
    """One run of a periodic job, retried by Temporal and recorded in the job's ledger."""

    @workflow.run
    async def run(self, input: JobRunInput) -> JobRun:
        job = input.job
        info = workflow.info()
        run = JobRun(
            run_id=info.run_id,
            workflow_id=info.workflow_id,
            job_id=job.id,
            trigger=input.trigger,
            status=JobRunStatus.RUNNING,
            started_at=workflow.now(),
        )
        failure: ActivityError | None = None
        try:
            await self._record(run)
            try:
                # The job's activity is named by its definition: which job runs is data (the
                # schedule carries the definition), and the name comes from the JobActivity
                # object the registry was built with.
                output = await workflow.execute_activity(
                    job.activity,
                    JobRequest(
                        job_id=job.id,
                        workflow_id=info.workflow_id,
                        trigger=input.trigger,
                        params=job.params,
                    ),
                    result_type=JobOutput,
                    start_to_close_timeout=timedelta(seconds=job.timeout_seconds),
                    heartbeat_timeout=timedelta(seconds=job.heartbeat_timeout_seconds),
                    retry_policy=job_retry_policy(job),
                    # Cancelled means stopped: wait for the job to acknowledge, so the next
                    # scheduled run never overlaps a job that is still winding down.
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    summary=f"{job.id} · {input.trigger}",
                )
            except ActivityError as exc:
                if is_cancelled_exception(exc):
                    raise
                failure = exc
        except BaseException as exc:
            if is_cancelled_exception(exc):
                # Cancelled before the job ended (or before it started).
                await self._record_final(self._finish(run, JobRunStatus.CANCELLED))
            raise
        # The job has ended: from here on, a cancellation cannot change its outcome, and the
        # final record is written whatever arrives meanwhile (see _record_final).
        if failure is not None:
            attempts = _attempts(failure, job)
            error = bounded_error(failure_message(failure))
            failed = self._finish(run, JobRunStatus.FAILED, attempts=attempts, error=error)
            await self._record_final(failed)
            # Failing the workflow (not the task) makes the run red in the Web UI, and the
            # record travels in the details for `jobs trigger --wait`.
            raise ApplicationError(
                f"job {job.id} failed after {attempts or '?'} attempt(s): {failed.error}",
                failed,
                type="JobFailed",
                non_retryable=True,
            ) from None
        succeeded = self._finish(
            run, JobRunStatus.SUCCEEDED, attempts=output.attempt, metadata=output.metadata
        )
        await self._record_final(succeeded)
        return succeeded

    @staticmethod
    def _finish(run: JobRun, status: JobRunStatus, **fields: Any) -> JobRun:
        finished = workflow.now()
        return run.model_copy(
            update={
                "status": status,
                "finished_at": finished,
                "duration_seconds": (finished - run.started_at).total_seconds(),
                **fields,
            }
        )

    @staticmethod
    def _record(run: JobRun) -> workflow.ActivityHandle[None]:
        return workflow.start_activity(
            record_job_run,
            run,
            start_to_close_timeout=RECORD_TIMEOUT,
            schedule_to_close_timeout=RECORD_DEADLINE,
            retry_policy=RECORD_RETRY,
            summary=f"record {run.status}",
        )

    @classmethod
    async def _record_final(cls, run: JobRun) -> None:
        """Write a run's final record, even if the workflow is cancelled meanwhile.

        A cancellation reaching the workflow while the record is being written would cancel
        the record's activity (before it starts, or while it waits to be retried) and leave
        the run ``running`` in the ledger for good. So the write is shielded: a cancellation
        arriving now waits until the record is in the ledger, and is raised after it.
        """
        write = cls._record(run)
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await write
            raise


def _attempts(exc: ActivityError, job: JobDefinition) -> int | None:
    """How many attempts the job made: from the job's own error, else from why retries ended."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], int):
        return cause.details[0]
    if exc.retry_state is RetryState.MAXIMUM_ATTEMPTS_REACHED:
        return job.max_attempts
    if isinstance(cause, TimeoutError) and cause.last_heartbeat_details:
        beat = cause.last_heartbeat_details[0]
        return beat if isinstance(beat, int) else None
    return None


WORKFLOWS: list[type[Any]] = [JobWorkflow, JobLedgerWorkflow]
"""Workflow classes the worker registers for jobs."""
