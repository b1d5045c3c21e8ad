"""Job runs: Temporal's retries and backoff, non-retryable failures, cancellation, the ledger
(history, health, continue-as-new) against a real dev server."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError

import treadle.activities.jobs
from tests.support.harness import activity_starts, keep_history, replayer
from tests.support.jobs import (
    JobsEnv,
    StalledFinalRecord,
    eventually,
    flaky_job,
    jobs_worker,
    slow_job,
    switch_job,
    unique_job,
)
from treadle.activities.jobs import send_run
from treadle.cli import jobs as cli_jobs
from treadle.cli.jobs import list_jobs
from treadle.workflows.jobs.ledger import JobLedgerWorkflow
from treadle.workflows.jobs.models import (
    Health,
    JobRunStatus,
    LedgerState,
    Trigger,
    health_for,
    ledger_id,
    worst,
)


@pytest.mark.replay_corpus
async def test_a_job_failing_twice_is_retried_with_backoff_and_succeeds_on_attempt_3(
    env: JobsEnv,
) -> None:
    """Two failures then success: one activity whose 3rd attempt succeeds after 0.1 s + 0.2 s
    of backoff, all in the event history, and a recorded run with attempts=3, succeeded."""
    job = unique_job(flaky_job, "flaky", params={"fail_times": 2}, backoff=2.0)
    handle = await env.start(job)
    run = await handle.result()
    assert (run.status, run.attempts, run.metadata) == (
        JobRunStatus.SUCCEEDED,
        3,
        {"attempt": 3},
    )

    history = await handle.fetch_history()
    scheduled = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    job_scheduled = next(
        e for e in scheduled if e.activity_task_scheduled_event_attributes.activity_type.name
        == "test_flaky_job"
    )  # fmt: skip
    policy = job_scheduled.activity_task_scheduled_event_attributes.retry_policy
    assert policy.maximum_attempts == 4  # max_retries 3 + the first attempt
    assert policy.initial_interval.ToTimedelta() == timedelta(milliseconds=100)
    assert policy.backoff_coefficient == 2.0
    # Temporal writes one ActivityTaskStarted for the attempt that ended the activity, with its
    # attempt number and the previous attempt's failure; earlier attempts leave no events.
    started = next(
        e for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id == job_scheduled.event_id
    )  # fmt: skip
    attrs = started.activity_task_started_event_attributes
    assert attrs.attempt == 3
    assert "attempt 2 failed on purpose" in attrs.last_failure.message
    waited = started.event_time.ToDatetime() - job_scheduled.event_time.ToDatetime()
    assert waited >= timedelta(milliseconds=300), waited  # 0.1 s, then 0.2 s

    recorded = (await env.history(job.id)).runs
    assert [(r.run_id, r.status, r.attempts, r.trigger) for r in recorded] == [
        (run.run_id, JobRunStatus.SUCCEEDED, 3, Trigger.MANUAL)
    ]
    await replayer().replay_workflow(history)
    keep_history("jobs-retried-then-succeeded", history)


@pytest.mark.replay_corpus
async def test_a_non_retryable_failure_is_not_retried(env: JobsEnv) -> None:
    """ApplicationError(non_retryable=True) from the job: one attempt, a failed run, the
    workflow failed with JobFailed carrying the record."""
    job = unique_job(flaky_job, "fatal", params={"fatal": True})
    handle = await env.start(job)
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "JobFailed"
    assert "failed after 1 attempt(s): fatal on purpose" in cause.message

    history = await handle.fetch_history()
    attempts = [started.attempt for started in activity_starts(history)]
    assert attempts == [1, 1, 1]  # record running, the job's single attempt, record failed
    run = (await env.history(job.id)).runs[0]
    assert (run.status, run.attempts, run.error) == (JobRunStatus.FAILED, 1, "fatal on purpose")
    await replayer().replay_workflow(history)
    keep_history("jobs-non-retryable-failure", history)


async def test_retries_stop_after_max_retries(env: JobsEnv) -> None:
    """A job that always fails gets max_retries + 1 attempts, then the run is failed."""
    job = unique_job(flaky_job, "always", params={"fail_times": 99}, max_retries=2)
    handle = await env.start(job)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    run = (await env.history(job.id)).runs[0]
    assert (run.status, run.attempts) == (JobRunStatus.FAILED, 3)
    assert run.error == "RuntimeError: attempt 3 failed on purpose"


@pytest.mark.replay_corpus
async def test_cancelling_a_run_stops_the_job_and_records_cancelled(
    env: JobsEnv, tmp_path: Path
) -> None:
    """Cancellation reaches the job's activity (through its heartbeat), the run is recorded
    cancelled, and the workflow ends cancelled."""
    marker = tmp_path / "marker"
    job = unique_job(slow_job, "slow", params={"marker": str(marker)}, heartbeat_timeout_seconds=1)
    handle = await env.start(job)
    await eventually(lambda: asyncio.to_thread(marker.exists))
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert marker.read_text() == "cancelled"
    run = (await env.history(job.id)).runs[0]
    assert run.status is JobRunStatus.CANCELLED
    assert run.duration_seconds is not None
    history = await handle.fetch_history()
    await replayer().replay_workflow(history)
    keep_history("jobs-cancelling-a-run", history)


@pytest.mark.parametrize(
    ("params", "outcome"),
    [({}, JobRunStatus.SUCCEEDED), ({"fatal": True}, JobRunStatus.FAILED)],
    ids=["succeeded", "failed"],
)
@pytest.mark.replay_corpus
async def test_a_cancellation_while_the_final_record_is_written_waits_for_the_record(
    client: Client, monkeypatch: pytest.MonkeyPatch, params: dict[str, bool], outcome: JobRunStatus
) -> None:
    """The job has ended; the run is cancelled while its final record waits for a retry. The
    record's activity is not cancelled, the workflow stays open until the ledger holds the
    job's real outcome (not "cancelled"), then ends cancelled."""
    stalled = StalledFinalRecord()
    stalled.install(monkeypatch)
    async with jobs_worker(client, monkeypatch) as env:
        job = unique_job(flaky_job, "late-cancel", params=params)
        handle = await env.start(job)
        await asyncio.wait_for(stalled.first_attempt_failed.wait(), timeout=15)
        await handle.cancel()

        async def cancellation_handled() -> bool:
            types = [e.event_type for e in (await handle.fetch_history()).events]
            requested = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
            return requested in types and (
                EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in types[types.index(requested) :]
            )

        await eventually(cancellation_handled)
        # The workflow has seen the cancellation and still waits for the record.
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        assert [r.status for r in (await env.history(job.id)).runs] == [JobRunStatus.RUNNING]

        stalled.release.set()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        assert isinstance(failure.value.cause, CancelledError)
        assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
        runs = (await env.history(job.id)).runs
        assert [(r.status, r.attempts) for r in runs] == [(outcome, 1)]
        history = await handle.fetch_history()
        assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED not in [
            e.event_type for e in history.events
        ]
        await replayer().replay_workflow(history)
        keep_history(f"jobs-cancelled-while-recording-{outcome}", history)


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 0 L * *", "day of month field 'L' is not standard cron syntax"),
        ("0 0 * * 1#2", "day of week field '1#2' is not standard cron syntax"),
        ("0 0 15W * *", "day of month field '15W' is not standard cron syntax"),
        ("R 0 * * *", "minute field 'R' is not standard cron syntax"),
        ("0 3 * *", "has 4 field(s); it needs 5"),
        ("0 22-2 * * *", "hour range '22-2' runs backwards"),
        ("0 0 * * fri-mon", "day of week range 'fri-mon' runs backwards"),
    ],
)
def test_a_cron_temporal_would_refuse_is_refused_when_the_job_is_defined(
    cron: str, message: str
) -> None:
    """croniter's extensions (L, W, #, R) and backwards ranges, which a Temporal Schedule
    refuses, fail the definition with a message naming the field."""
    with pytest.raises(ValidationError) as refused:
        unique_job(flaky_job, "cron", interval_seconds=None, cron=cron)
    assert f"cron expression {cron!r}" in str(refused.value)
    assert message in str(refused.value)


def test_a_standard_cron_is_accepted_with_single_spaces() -> None:
    """Names, ranges, lists and steps are standard; spacing is normalised."""
    job = unique_job(
        flaky_job, "cron", interval_seconds=None, cron="0,30  8-18/2 * jan-jun mon-fri"
    )
    assert job.definition.cron == "0,30 8-18/2 * jan-jun mon-fri"
    assert job.definition.schedule_text == "cron 0,30 8-18/2 * jan-jun mon-fri"


async def test_health_goes_degraded_then_unhealthy_and_heals_after_a_success(
    env: JobsEnv, tmp_path: Path
) -> None:
    """healthy -> degraded (1 failure) -> degraded (2) -> unhealthy (3) -> healthy after one
    success; the overall health of several jobs is the worst of theirs."""
    control = tmp_path / "control"
    switch = unique_job(switch_job, "switch", params={"control": str(control)}, max_retries=0)
    steady = unique_job(flaky_job, "steady")
    registry = env.registry(switch, steady)
    await (await env.start(steady)).result()

    async def run_switch(outcome: str) -> tuple[Health, int, Health]:
        control.write_text(outcome)
        handle = await env.start(switch)
        with pytest.raises(WorkflowFailureError) if outcome == "fail" else nullcontext():
            await handle.result()
        summary = await env.summary(switch.id)
        listing = await list_jobs(env.client, registry)
        return summary.health, summary.consecutive_failures, listing.overall_health

    assert await run_switch("ok") == (Health.HEALTHY, 0, Health.HEALTHY)
    assert await run_switch("fail") == (Health.DEGRADED, 1, Health.DEGRADED)
    assert await run_switch("fail") == (Health.DEGRADED, 2, Health.DEGRADED)
    assert await run_switch("fail") == (Health.UNHEALTHY, 3, Health.UNHEALTHY)
    assert await run_switch("fail") == (Health.UNHEALTHY, 4, Health.UNHEALTHY)
    assert await run_switch("ok") == (Health.HEALTHY, 0, Health.HEALTHY)
    summary = await env.summary(switch.id)
    assert (summary.total_runs, summary.total_failures) == (6, 4)


def test_public_names_are_exported() -> None:
    """The jobs modules' ``__all__`` lists names that exist."""
    for module in (cli_jobs, treadle.activities.jobs):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], module.__name__


def test_health_thresholds_and_the_worst_of_several() -> None:
    """0 failures in a row is healthy, 1-2 degraded, 3+ unhealthy; overall is the worst."""
    assert [health_for(n) for n in range(5)] == [
        Health.HEALTHY,
        Health.DEGRADED,
        Health.DEGRADED,
        Health.UNHEALTHY,
        Health.UNHEALTHY,
    ]
    assert worst([Health.HEALTHY, Health.UNHEALTHY, Health.DEGRADED]) is Health.UNHEALTHY
    assert worst([]) is Health.HEALTHY


@pytest.mark.replay_corpus
async def test_the_ledger_continues_as_new_and_keeps_its_history(env: JobsEnv) -> None:
    """A ledger that continues-as-new carries its runs and health into the next run, and a
    record delivered twice is kept once."""
    job = unique_job(flaky_job, "can")
    env.job_ids.add(job.id)
    first = await env.client.start_workflow(
        JobLedgerWorkflow.run,
        LedgerState(job_id=job.id, messages_per_run=3),
        id=ledger_id(job.id),
        task_queue=env.task_queue,
    )
    runs = [await (await env.start(job)).result() for _ in range(3)]
    await send_run(env.client, env.task_queue, runs[0])  # a retried record activity's duplicate
    history = await env.history(job.id)
    assert [r.run_id for r in history.runs] == [r.run_id for r in reversed(runs)]
    assert history.summary.total_runs == 3
    described = await env.client.get_workflow_handle(ledger_id(job.id)).describe()
    assert described.run_id != first.result_run_id  # six records + one duplicate: two handovers
    previous = await env.client.get_workflow_handle(
        ledger_id(job.id), run_id=first.result_run_id
    ).describe()
    assert previous.status is WorkflowExecutionStatus.CONTINUED_AS_NEW
    ledger_history = await first.fetch_history()
    await replayer().replay_workflow(ledger_history)
    keep_history("jobs-ledger-continued-as-new", ledger_history)
