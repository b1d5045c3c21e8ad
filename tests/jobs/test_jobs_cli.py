"""`treadle jobs ...` as operators run it: real processes, tables, JSON and exit codes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from tests.support.jobs import JobsEnv, flaky_job, switch_job, unique_job
from tests.support.processes import run_cli
from treadle.activities.jobs import HISTORY_CLEANUP, WORKSPACE_CLEANUP
from treadle.cli.jobs import JobList
from treadle.workflows.jobs.models import (
    Health,
    JobHistory,
    JobRun,
    JobRunStatus,
    Trigger,
    schedule_id,
    worst,
)


async def _jobs(env: JobsEnv, *args: str) -> tuple[int, str, str]:
    done = await run_cli(
        "--address", env.client.service_client.config.target_host,
        "--task-queue", env.task_queue, "jobs", *args,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def _one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


async def test_sync_creates_the_builtin_schedules_then_reports_unchanged(
    env: JobsEnv, tmp_path: Path
) -> None:
    """`jobs sync` creates one schedule per built-in job; run again, every job is unchanged."""
    builtins = [WORKSPACE_CLEANUP, HISTORY_CLEANUP]
    env.job_ids.update(builtins)
    for job_id in builtins:  # left by an interrupted earlier session, if any
        with contextlib.suppress(RPCError):
            await env.client.get_schedule_handle(schedule_id(job_id)).delete()
    # A root of its own: were a schedule to fire during the test, it judges no real workspace.
    code, out, err = await _jobs(env, "sync", "--workspaces", str(tmp_path), "--json")
    assert (code, err) == (0, "")
    assert [(o["job_id"], o["action"]) for o in json.loads(out)] == [
        (WORKSPACE_CLEANUP, "created"),
        (HISTORY_CLEANUP, "created"),
    ]
    code, out, err = await _jobs(env, "sync", "--workspaces", str(tmp_path))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{job_id}: unchanged (schedule {schedule_id(job_id)}, task queue {env.task_queue})"
        for job_id in builtins
    ]
    schedules = [s.id async for s in await env.client.list_schedules()]
    assert [schedules.count(schedule_id(job_id)) for job_id in builtins] == [1, 1]


async def test_list_shows_schedule_state_next_run_last_run_and_health(
    env: JobsEnv, tmp_path: Path
) -> None:
    """`jobs list` (table and --json) shows each job's schedule, state, next run, last run and
    health, and the overall health is the worst; `jobs list ID...` lists only those jobs, the
    overall health being theirs."""
    control = tmp_path / "control"
    control.write_text("fail")
    good = unique_job(flaky_job, "good")
    bad = unique_job(switch_job, "bad", params={"control": str(control)}, max_retries=0)
    await env.sync(env.registry(good, bad))
    await (await env.start(good)).result()
    with pytest.raises(Exception):  # noqa: B017 - the failure itself is asserted below
        await (await env.start(bad)).result()

    code, out, err = await _jobs(env, "list", good.id, bad.id, "--json")
    assert (code, err) == (0, "")
    listing = JobList.model_validate_json(out)
    rows = {row.id: row for row in listing.jobs}
    assert sorted(rows) == sorted([good.id, bad.id])
    assert rows[good.id].schedule == "every 1h"
    assert (rows[good.id].state, rows[good.id].task_queue) == ("enabled", env.task_queue)
    assert rows[good.id].next_run is not None
    assert (rows[good.id].last_run_status, rows[good.id].health) == ("succeeded", "healthy")
    assert (rows[bad.id].last_run_status, rows[bad.id].health) == ("failed", "degraded")
    assert listing.overall_health is Health.DEGRADED  # the worst of healthy and degraded

    code, out, err = await _jobs(env, "list", good.id, bad.id)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["JOB", "SCHEDULE", "STATE", "NEXT", "RUN", "LAST", "RUN", "HEALTH"]
    assert sorted(line.split()[0] for line in lines[1:-1]) == sorted([good.id, bad.id])
    bad_line = next(line for line in lines if line.startswith(bad.id))
    assert "failed" in bad_line and "degraded (1 failed in a row)" in bad_line
    assert lines[-1] == "overall health: degraded"

    # Unscoped, every job of the shared server is listed; the overall health is still the
    # worst of all the rows.
    code, out, err = await _jobs(env, "list", "--json")
    assert (code, err) == (0, "")
    everything = JobList.model_validate_json(out)
    assert {good.id, bad.id} <= {row.id for row in everything.jobs}
    assert everything.overall_health is worst(row.health for row in everything.jobs)


async def test_trigger_runs_now_and_history_shows_it(env: JobsEnv, tmp_path: Path) -> None:
    """`jobs trigger --wait` runs the job now (trigger manual, exit 0); `--retry` is recorded as
    retry; a failing run exits 1; `jobs history` shows them newest first as table and JSON."""
    control = tmp_path / "control"
    control.write_text("ok")
    job = unique_job(switch_job, "trig", params={"control": str(control)}, max_retries=0)
    await env.sync(env.registry(job))

    code, out, err = await _jobs(env, "trigger", job.id, "--wait")
    assert (code, err) == (0, "")
    assert out.startswith(f"job {job.id} succeeded after 1 attempt(s) in ")
    assert "(manual; workflow treadle-job-" in out

    code, out, err = await _jobs(env, "trigger", job.id, "--retry", "--wait", "--json")
    assert (code, err) == (0, "")
    retried = JobRun.model_validate_json(out)
    assert (retried.trigger, retried.status) == (Trigger.RETRY, JobRunStatus.SUCCEEDED)

    control.write_text("fail")
    code, out, err = await _jobs(env, "trigger", job.id, "--wait")
    assert code == 1, err
    assert "failed after 1 attempt(s)" in out and "the control file says fail" in out

    code, out, err = await _jobs(env, "history", job.id, "--json")
    assert (code, err) == (0, "")
    history = JobHistory.model_validate_json(out)
    assert [(r.trigger, r.status) for r in history.runs] == [
        (Trigger.MANUAL, JobRunStatus.FAILED),
        (Trigger.RETRY, JobRunStatus.SUCCEEDED),
        (Trigger.MANUAL, JobRunStatus.SUCCEEDED),
    ]
    assert history.summary.health == "degraded"

    code, out, err = await _jobs(env, "history", job.id, "--limit", "2")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        f"job {job.id}: degraded, 1 consecutive failure(s), 3 run(s) recorded, 1 failed"
    )
    assert lines[1].split() == ["STARTED", "TRIGGER", "STATUS", "DURATION", "ATTEMPTS", "DETAILS"]
    assert [line.split()[2:4] for line in lines[2:]] == [
        ["manual", "failed"],
        ["retry", "succeeded"],
    ]


async def test_pause_and_unpause_are_reflected_by_list(env: JobsEnv) -> None:
    """`jobs pause --note` pauses the schedule (list shows paused, the note, no next run);
    `jobs unpause` enables it again."""
    job = unique_job(flaky_job, "pausable")
    await env.sync(env.registry(job))

    code, out, err = await _jobs(env, "pause", job.id, "--note", "disk full")
    assert (code, out, err) == (0, f"paused job {job.id} (disk full)\n", "")
    row = await _row(env, job.id)
    assert (row["state"], row["note"], row["next_run"]) == ("paused", "disk full", None)
    described = await env.client.get_schedule_handle(schedule_id(job.id)).describe()
    assert described.schedule.state.paused

    code, out, err = await _jobs(env, "unpause", job.id)
    assert (code, err) == (0, "")
    row = await _row(env, job.id)
    assert (row["state"], row["note"]) == ("enabled", None)
    assert row["next_run"] is not None


async def _row(env: JobsEnv, job_id: str) -> dict[str, object]:
    code, out, err = await _jobs(env, "list", "--json")
    assert (code, err) == (0, "")
    rows: list[dict[str, object]] = json.loads(out)["jobs"]
    return next(row for row in rows if row["id"] == job_id)


@pytest.mark.parametrize(
    "args",
    [
        ("list", "no-such-job"),
        ("history", "no-such-job"),
        ("trigger", "no-such-job"),
        ("pause", "no-such-job"),
        ("unpause", "no-such-job"),
    ],
)
async def test_an_unknown_job_id_is_one_line_and_exit_2(
    client: Client, args: tuple[str, ...]
) -> None:
    """Every command that names a job refuses an unknown id with one line and exit code 2."""
    code, out, err = await _jobs(JobsEnv(client, "no-worker-needed"), *args)
    assert (code, out) == (2, "")
    assert _one_line_error(err) == "error: unknown job 'no-such-job' (see: treadle jobs list)"
