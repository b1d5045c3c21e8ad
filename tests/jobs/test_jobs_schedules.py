"""Temporal Schedules for jobs: idempotent sync, updates, pauses, the SKIP overlap policy, and
the schedule's action really starting JobWorkflow; worker.py --sync-jobs as operators run it."""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, ScheduleOverlapPolicy, WorkflowFailureError

from tests.support.jobs import (
    JobsEnv,
    eventually,
    flaky_job,
    slow_job,
    unique_job,
)
from tests.support.processes import clean_env, start_worker
from treadle.activities.jobs import HISTORY_CLEANUP, WORKSPACE_CLEANUP, Job, builtin_jobs
from treadle.cli import jobs as cli_jobs
from treadle.cli.jobs import list_jobs
from treadle.job_schedules import CATCHUP_WINDOW, DISABLED_NOTE, deployed_job, sync_schedules
from treadle.workflows.jobs.models import JobRunStatus, Trigger, schedule_id


async def _schedule_ids(client: Client) -> list[str]:
    return [s.id async for s in await client.list_schedules()]


async def test_sync_twice_creates_one_schedule_per_job_then_changes_nothing(
    env: JobsEnv,
) -> None:
    """First sync creates each job's schedule; the second reports unchanged, and exactly one
    schedule per job exists, with SKIP overlap and a one-minute catch-up window."""
    hourly = unique_job(flaky_job, "hourly")
    nightly = unique_job(flaky_job, "nightly", interval_seconds=None, cron="30 2 * * *")
    registry = env.registry(hourly, nightly)

    assert await env.sync(registry) == {hourly.id: "created", nightly.id: "created"}
    assert await env.sync(registry) == {hourly.id: "unchanged", nightly.id: "unchanged"}

    wanted = sorted(schedule_id(job_id) for job_id in registry)

    async def listed() -> bool:
        ids = await _schedule_ids(env.client)
        return sorted(i for i in ids if i in wanted) == wanted

    await eventually(listed)
    ids = await _schedule_ids(env.client)
    assert [ids.count(sid) for sid in wanted] == [1, 1]

    described = await env.client.get_schedule_handle(schedule_id(nightly.id)).describe()
    policy = described.schedule.policy
    assert policy.overlap is ScheduleOverlapPolicy.SKIP
    assert policy.catchup_window == CATCHUP_WINDOW == timedelta(minutes=1)
    assert not policy.pause_on_failure
    assert [(t.hour, t.minute) for t in described.info.next_action_times[:2]] == [(2, 30)] * 2
    deployed = await deployed_job(env.client, nightly.id)
    assert deployed is not None
    assert (deployed.job, deployed.task_queue) == (nightly.definition, env.task_queue)


async def test_a_changed_interval_or_retry_setting_updates_the_schedule(env: JobsEnv) -> None:
    """A new interval (or any definition change) is updated in place; syncing it again is
    unchanged."""
    job = unique_job(flaky_job, "change")
    await env.sync(env.registry(job))
    faster = job.with_changes(interval_seconds=120)
    assert await env.sync(env.registry(faster)) == {job.id: "updated"}
    assert await env.sync(env.registry(faster)) == {job.id: "unchanged"}
    described = await env.client.get_schedule_handle(schedule_id(job.id)).describe()
    assert [i.every for i in described.schedule.spec.intervals] == [timedelta(minutes=2)]

    patient = faster.with_changes(max_retries=5)
    assert await env.sync(env.registry(patient)) == {job.id: "updated"}
    deployed = await deployed_job(env.client, job.id)
    assert deployed is not None and deployed.job.max_retries == 5


async def test_a_schedule_temporal_refuses_is_reported_and_the_other_jobs_still_sync(
    env: JobsEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job whose schedule the server refuses is reported failed, with the server's reason;
    the jobs after it are still synced, and `jobs sync` prints every outcome, then exits 1."""
    first = unique_job(flaky_job, "first")
    refused = unique_job(flaky_job, "refused")
    # A cron that definitions no longer accept (say, from a registry written before they were
    # checked): model_copy does not validate, so it reaches the server as is.
    refused = Job(
        refused.activity,
        refused.definition.model_copy(update={"interval_seconds": None, "cron": "0 0 L * *"}),
    )
    last = unique_job(flaky_job, "last")
    registry = env.registry(first, refused, last)

    outcomes = await sync_schedules(env.client, env.task_queue, registry)
    assert [(o.job_id, o.action) for o in outcomes] == [
        (first.id, "created"),
        (refused.id, "failed"),
        (last.id, "created"),
    ]
    error = outcomes[1].error
    assert error is not None and error.startswith("INVALID_ARGUMENT: Invalid schedule spec")
    assert await deployed_job(env.client, refused.id) is None
    assert await deployed_job(env.client, last.id) is not None

    monkeypatch.setattr(cli_jobs, "_registry", lambda args: registry)
    args = argparse.Namespace(task_queue=env.task_queue, json=False)
    assert await cli_jobs.cmd_sync(env.client, args) == 1
    out, err = capsys.readouterr()
    where = f"task queue {env.task_queue}"
    assert out.splitlines() == [
        f"{first.id}: unchanged (schedule {schedule_id(first.id)}, {where})",
        f"{refused.id}: failed (schedule {schedule_id(refused.id)}, {where}): {error}",
        f"{last.id}: unchanged (schedule {schedule_id(last.id)}, {where})",
    ]
    assert err == f"error: 1 of 3 job schedule(s) not synced: {refused.id}\n"


async def test_disabling_pauses_enabling_unpauses_and_an_operators_pause_is_kept(
    env: JobsEnv,
) -> None:
    """enabled=False pauses the schedule with the registry's note; enabling again unpauses it;
    a pause an operator made survives later syncs."""
    job = unique_job(flaky_job, "toggle")
    registry = env.registry(job)
    await env.sync(registry)

    assert await env.sync(env.registry(job.with_changes(enabled=False))) == {job.id: "updated"}
    deployed = await deployed_job(env.client, job.id)
    assert deployed is not None and (deployed.paused, deployed.note) == (True, DISABLED_NOTE)
    assert (await list_jobs(env.client, registry)).jobs[0].state == "disabled"

    assert await env.sync(registry) == {job.id: "updated"}
    deployed = await deployed_job(env.client, job.id)
    assert deployed is not None and not deployed.paused
    assert deployed.next_run is not None

    await env.client.get_schedule_handle(schedule_id(job.id)).pause(note="ops: disk full")
    assert await env.sync(registry) == {job.id: "unchanged"}
    row = (await list_jobs(env.client, registry)).jobs[0]
    assert (row.state, row.note, row.next_run) == ("paused", "ops: disk full", None)


async def test_the_schedule_starts_job_workflow_with_trigger_schedule(env: JobsEnv) -> None:
    """The schedule's action runs the job on the synced task queue, recorded as trigger
    schedule; list_jobs then shows the last run."""
    job = unique_job(flaky_job, "fires")
    registry = env.registry(job)
    await env.sync(registry)
    await env.client.get_schedule_handle(schedule_id(job.id)).trigger()

    async def recorded() -> bool:
        try:
            runs = (await env.history(job.id)).runs
        except Exception:  # the ledger does not exist until the first record
            return False
        return bool(runs) and runs[0].status is JobRunStatus.SUCCEEDED

    await eventually(recorded)
    run = (await env.history(job.id)).runs[0]
    assert run.trigger is Trigger.SCHEDULE
    assert run.workflow_id.startswith(schedule_id(job.id))
    row = (await list_jobs(env.client, registry)).jobs[0]
    assert (row.last_run_status, row.last_run_at) == (JobRunStatus.SUCCEEDED, run.started_at)


async def test_a_slot_that_comes_while_the_job_still_runs_is_skipped(
    env: JobsEnv, tmp_path: Path
) -> None:
    """Overlap policy SKIP: while a scheduled run is in progress, the next one is not started."""
    marker = tmp_path / "marker"
    job = unique_job(
        slow_job, "overlap", params={"marker": str(marker)}, heartbeat_timeout_seconds=1
    )
    await env.sync(env.registry(job))
    handle = env.client.get_schedule_handle(schedule_id(job.id))
    await handle.trigger()
    await eventually(lambda: asyncio.to_thread(marker.exists))
    await handle.trigger()

    async def skipped() -> bool:
        return (await handle.describe()).info.num_actions_skipped_overlap == 1

    await eventually(skipped)
    info = (await handle.describe()).info
    assert (info.num_actions, len(info.running_actions)) == (1, 1)
    run = env.client.get_workflow_handle(info.running_actions[0].workflow_id)
    await run.cancel()
    with pytest.raises(WorkflowFailureError):
        await run.result()


async def test_worker_sync_jobs_flag_syncs_the_builtin_jobs_and_keeps_a_pause(
    client: Client, temporal_address: str, tmp_path: Path
) -> None:
    """worker.py --sync-jobs creates/updates the built-in schedules for its task queue at start;
    a schedule an operator paused stays paused."""
    task_queue = "test-jobs-sync-flag"
    builtins = [WORKSPACE_CLEANUP, HISTORY_CLEANUP]
    env = JobsEnv(client, task_queue, set(builtins))
    try:
        # Paused first, so no built-in job can fire against the real workspaces/ meanwhile.
        await env.sync(builtin_jobs(workspaces_root=tmp_path))
        for job_id in builtins:
            await client.get_schedule_handle(schedule_id(job_id)).pause(note="held by the test")
        worker = await start_worker(temporal_address, task_queue, clean_env(), "--sync-jobs")
        assert await worker.terminate() == 0
        synced = [line for line in worker.output if line.startswith("Job schedule")]
        assert synced == [
            f"Job schedule {schedule_id(WORKSPACE_CLEANUP)}: updated",  # default root now
            f"Job schedule {schedule_id(HISTORY_CLEANUP)}: unchanged",
        ]
        for job_id in builtins:
            deployed = await deployed_job(client, job_id)
            assert deployed is not None
            assert (deployed.task_queue, deployed.paused) == (task_queue, True)
    finally:
        await env.cleanup()
