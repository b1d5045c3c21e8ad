"""The built-in jobs on real data: workspace cleanup asks Temporal about each run and deletes
only closed ones past the retention; history cleanup prunes every ledger past 90 days."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from tests.support.jobs import JobsEnv, eventually
from treadle.activities.jobs import HISTORY_CLEANUP, WORKSPACE_CLEANUP, builtin_jobs, send_run
from treadle.workflows.jobs.models import JobRun, JobRunStatus, Trigger

OLD = (datetime.now(UTC) - timedelta(days=30)).timestamp()


def _workspace(root: Path, name: str, *, old: bool) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "notes.md").write_text("an agent wrote this")
    if old:
        for item in (path / "notes.md", path):
            os.utime(item, (OLD, OLD))
    return path


async def test_workspace_cleanup_removes_only_finished_runs_past_the_retention(
    env: JobsEnv, tmp_path: Path
) -> None:
    """Only the old workspace of a run Temporal reports closed is removed. A running run's
    (however old) and a recently closed run's are kept, and so is every workspace named after
    no workflow Temporal knows, old or new (counted as kept_unknown): a wrong namespace or
    root looks just like that. Nothing is followed through a symbolic link."""
    root = tmp_path / "workspaces"
    suffix = uuid.uuid4().hex[:8]
    names = {
        kind: f"{kind}-{suffix}"
        for kind in ("closed-old", "gone-old", "running", "closed-recent", "gone-recent")
    }
    for kind in ("closed-old", "gone-old", "running", "closed-recent"):
        _workspace(root, names[kind], old=True)
    outside = _workspace(tmp_path, "outside", old=True)
    (root / "link-to-outside").symlink_to(outside, target_is_directory=True)
    (root / "stray-file.txt").write_text("not a workspace")

    # Workflows named like the workspaces, as starter.py names them; no worker polls "nowhere".
    nowhere = f"nowhere-{suffix}"
    started = {
        kind: await env.client.start_workflow("Nope", id=names[kind], task_queue=nowhere)
        for kind in ("closed-old", "running", "closed-recent")
    }
    try:
        await started["closed-old"].terminate("finished long ago, for the test")
        await asyncio.sleep(2.5)  # the retention below is 2 seconds
        await started["closed-recent"].terminate("finished just now")
        _workspace(root, names["gone-recent"], old=False)

        job = builtin_jobs(workspaces_root=root, workspace_retention_days=2 / 86_400)[
            WORKSPACE_CLEANUP
        ]
        run = await (await env.start(job)).result()
    finally:
        await started["running"].terminate("test over")

    assert run.status is JobRunStatus.SUCCEEDED
    assert run.metadata == {
        "root": str(root),
        "removed": 1,
        "removed_ids": [names["closed-old"]],
        "kept_running": 1,
        "kept_recent": 1,
        "kept_unknown": 2,
        "kept_unknown_ids": sorted([names["gone-old"], names["gone-recent"]]),
    }
    left = sorted(p.name for p in root.iterdir())
    assert left == sorted(
        [names["running"], names["closed-recent"], names["gone-old"], names["gone-recent"],
         "link-to-outside", "stray-file.txt", ".treadle-workspace-cleanup.json"]
    )  # fmt: skip
    assert (outside / "notes.md").exists()


async def test_workspace_cleanup_remembers_runs_temporal_has_since_forgotten(
    env: JobsEnv, tmp_path: Path
) -> None:
    """A cleanup writes down the close time of each closed run it sees; a later one cleans a
    run Temporal has since purged (namespace retention, a day on the dev server) from that
    memory. A run never seen, or remembered for another namespace, stays unknown and kept."""
    root = tmp_path / "workspaces"
    suffix = uuid.uuid4().hex[:8]
    closed, purged, stranger = (f"{k}-{suffix}" for k in ("closed", "purged", "stranger"))
    for name in (closed, purged, stranger):
        _workspace(root, name, old=True)
    handle = await env.client.start_workflow("Nope", id=closed, task_queue="nowhere")
    await handle.terminate("done")
    memory = root / ".treadle-workspace-cleanup.json"
    long_ago = (datetime.now(UTC) - timedelta(days=30)).isoformat()
    memory.write_text(json.dumps({"namespace": env.client.namespace, "closed": {purged: long_ago}}))

    jobs = builtin_jobs(workspaces_root=root, workspace_retention_days=1)
    run = await (await env.start(jobs[WORKSPACE_CLEANUP])).result()

    assert run.metadata["removed_ids"] == [purged]  # from memory: Temporal knows nothing of it
    assert run.metadata["kept_recent"] == 1  # closed just now
    assert run.metadata["kept_unknown_ids"] == [stranger]
    remembered = json.loads(memory.read_text())
    assert list(remembered["closed"]) == [closed]  # recorded for the next cleanup

    memory.write_text(json.dumps({"namespace": "elsewhere", "closed": {stranger: long_ago}}))
    again = await (await env.start(jobs[WORKSPACE_CLEANUP])).result()
    assert again.metadata["kept_unknown_ids"] == [stranger]  # another namespace's memory
    assert (root / stranger).exists()


async def test_workspace_cleanup_with_bad_params_fails_once_without_retrying(
    env: JobsEnv, tmp_path: Path
) -> None:
    """Params that do not validate are a non-retryable JobParamsInvalid: one attempt."""
    job = builtin_jobs(workspaces_root=tmp_path)[WORKSPACE_CLEANUP].with_changes(
        params={"retention_days": -1}
    )
    with pytest.raises(WorkflowFailureError):
        await (await env.start(job)).result()
    run = (await env.history(job.id)).runs[0]
    assert (run.status, run.attempts) == (JobRunStatus.FAILED, 1)
    assert run.error is not None and "invalid params" in run.error and "root" in run.error


def _record(job_id: str, name: str, *, days_ago: float, status: JobRunStatus) -> JobRun:
    started = datetime.now(UTC) - timedelta(days=days_ago)
    final = status is not JobRunStatus.RUNNING
    return JobRun(
        run_id=f"{name}-{uuid.uuid4().hex[:6]}",
        workflow_id=f"treadle-job-{job_id}-{name}",
        job_id=job_id,
        trigger=Trigger.SCHEDULE,
        status=status,
        started_at=started,
        finished_at=started + timedelta(seconds=3) if final else None,
        duration_seconds=3.0 if final else None,
        attempts=1 if final else None,
    )


async def test_history_cleanup_prunes_records_older_than_90_days_in_every_ledger(
    env: JobsEnv, tmp_path: Path
) -> None:
    """Records that ended over 90 days ago (and a run stuck "running" since then) are pruned
    from every ledger on the task queue; newer ones stay."""
    job_ids = [f"aged-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    env.job_ids.update(job_ids)
    for job_id in job_ids:
        for record in (
            _record(job_id, "ancient", days_ago=120, status=JobRunStatus.RUNNING),
            _record(job_id, "old", days_ago=100, status=JobRunStatus.SUCCEEDED),
            _record(job_id, "recent", days_ago=89, status=JobRunStatus.FAILED),
            _record(job_id, "today", days_ago=0, status=JobRunStatus.SUCCEEDED),
        ):
            await send_run(env.client, env.task_queue, record)

    query = f"WorkflowType = 'JobLedgerWorkflow' AND TaskQueue = '{env.task_queue}'"

    async def both_listed() -> bool:
        return len([w async for w in env.client.list_workflows(query)]) >= 2

    await eventually(both_listed)  # the job finds ledgers through visibility
    job = builtin_jobs(workspaces_root=tmp_path)[HISTORY_CLEANUP]
    run = await (await env.start(job)).result()

    assert run.metadata["removed"] == 4
    assert isinstance(run.metadata["ledgers"], int) and run.metadata["ledgers"] >= 2
    for job_id in job_ids:
        history = await env.history(job_id)
        assert sorted(r.run_id.split("-")[0] for r in history.runs) == ["recent", "today"]
        # Counters describe every run ever recorded, not only those still kept.
        assert (history.summary.total_runs, history.summary.consecutive_failures) == (4, 0)
