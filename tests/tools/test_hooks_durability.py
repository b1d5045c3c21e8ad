"""A worker killed mid-hook: the next worker's attempt finds what the dead one did, and the
step is committed exactly once.

To land the kill inside the hook deterministically, the workers find a ``git`` on their PATH
that runs the real git and then, once, sleeps after the chosen subcommand (``add``: nothing is
committed yet; ``update-ref``: HEAD names the step's commit but the activity never reported
it; ``reset``: the user's index has been told too). Nothing in
the product knows about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.support.harness import replayer
from tests.support.processes import (
    WorkerProcess,
    clean_env,
    poll_until_killed,
    serve_command,
    server_address,
    start_python,
    start_worker,
)
from tests.support.repos import Repo, make_repo
from treadle.activities.hooks import HookActivities
from treadle.connection import connect
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.hooks import HookRequest, HookResult, hook_call
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

HEARTBEAT_SECONDS = 2
"""A killed worker's hook attempt is given up after this long, and retried elsewhere."""


@workflow.defn(sandboxed=False)
class HookOnceWorkflow:
    """One hook call with the agent's hook options, as the PostToolsHook state makes it."""

    @workflow.run
    async def run(self, request: HookRequest) -> HookResult:
        return await workflow.execute_activity_method(
            HookActivities.run_hook,
            request,
            **hook_call(
                f"step {request.step} · {request.hook}",
                heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
            ),
        )


@workflow.defn(sandboxed=False)
class HookOnGoWorkflow:
    """As ``HookOnceWorkflow``, once signalled ``go``: the step's files are made after the
    run started, as a step's commands make them."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, request: HookRequest) -> HookResult:
        await workflow.wait_condition(lambda: self.go)
        return await workflow.execute_activity_method(
            HookActivities.run_hook,
            request,
            **hook_call(
                f"step {request.step} · {request.hook}",
                heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
            ),
        )


async def serve(address: str, task_queue: str) -> None:
    """The worker process of these tests: ``HookOnceWorkflow`` and the real ``run_hook``."""
    client = await connect(address=address, namespace="default")
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[HookOnceWorkflow, HookOnGoWorkflow],
        activities=[HookActivities().run_hook],
        # No sticky cache: after a kill the workflow task goes straight to the live worker.
        max_cached_workflows=0,
    )
    await poll_until_killed(worker)


SERVE = serve_command(__name__, 2)


async def start_hook_worker(address: str, task_queue: str, env: Mapping[str, str]) -> WorkerProcess:
    return await start_python(
        ["-c", SERVE, address, task_queue],
        env,
        ready=lambda line: line == "Worker polling",
        what="the hook worker",
    )


class SlowGit:
    """A ``git`` that runs the real one and then, the first time ``subcommand`` runs, writes
    its process id to ``paused`` and sleeps: a worker can be killed while it waits."""

    def __init__(self, directory: Path, subcommand: str) -> None:
        real = shutil.which("git")
        assert real is not None
        self.bin = directory / "bin"
        self.bin.mkdir(parents=True)
        self.paused = directory / "paused"
        script = self.bin / "git"
        script.write_text(
            "#!/bin/sh\n"
            f'"{real}" "$@"\n'
            "status=$?\n"
            'for arg in "$@"; do\n'
            f'  if [ "$arg" = {subcommand} ] && [ ! -e "{self.paused}" ]; then\n'
            f'    echo $$ > "{self.paused}.tmp" && mv "{self.paused}.tmp" "{self.paused}"\n'
            "    sleep 120\n"
            "  fi\n"
            "done\n"
            "exit $status\n"
        )
        script.chmod(0o755)

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(PATH=f"{self.bin}{os.pathsep}{os.environ['PATH']}", **extra)

    async def wait_until_paused(self, timeout: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.paused.exists():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("the hook never reached the pause")
            await asyncio.sleep(0.05)

    def release(self) -> None:
        """Kill the sleeping wrapper (it outlives the killed worker, as a real git would)."""
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            # git runs in a session of its own, so its process id is also its group's.
            os.killpg(int(self.paused.read_text()), signal.SIGKILL)


async def hook_attempts(handle: WorkflowHandle[Any, Any]) -> tuple[int, int]:
    """(times run_hook was scheduled, the highest attempt that started)."""
    history = await handle.fetch_history()
    scheduled = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "run_hook"
    ]
    scheduled_ids = {e.event_id for e in scheduled}
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled_ids
    ]
    return len(scheduled), max(attempts, default=0)


def step_commits(repo: Repo) -> int:
    return repo.git("log", "--format=%B").count("Treadle-Step: ")


async def kill_mid_hook(
    client: Client,
    git: SlowGit,
    repo: Repo,
    run: Callable[[Any, HookRequest], Awaitable[HookResult]],
    request: HookRequest,
    *,
    commits_at_the_kill: int,
    once_started: Callable[[WorkflowHandle[Any, Any]], Awaitable[None]] | None = None,
) -> tuple[WorkflowHandle[Any, Any], HookResult]:
    """Run the hook on a worker process, SIGKILL it while ``git`` is paused (the repository
    then holding ``commits_at_the_kill`` step commits), and return what the attempt on a second
    worker process ends with."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    first = await start_hook_worker(server_address(client), task_queue, git.env())
    try:
        handle = await client.start_workflow(
            run,
            request,
            id=request.workflow_id,
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=2),
        )
        if once_started is not None:
            await once_started(handle)
        await git.wait_until_paused()
        assert step_commits(repo) == commits_at_the_kill
        await first.kill()

        second = await start_hook_worker(server_address(client), task_queue, git.env())
        try:
            result: HookResult = await asyncio.wait_for(handle.result(), 60)
        finally:
            await second.kill()
    finally:
        git.release()
        if first.process.returncode is None:
            await first.kill()
    return handle, result


@pytest.mark.parametrize("killed_after", ["add", "update-ref", "reset"])
async def test_a_worker_killed_mid_hook_commits_the_step_once(
    client: Client, tmp_path: Path, killed_after: str
) -> None:
    """SIGKILL after ``git add`` (nothing committed), after ``git update-ref`` (HEAD moved,
    the user's index not yet told) or after ``git reset`` (all done but the report): the
    attempt on the next worker commits the step (or finds the commit made) and the step has
    exactly one commit."""
    repo = make_repo(tmp_path / "ws", tmp_path)
    repo.write("notes.md", "notes\n")
    git = SlowGit(tmp_path / "slow-git", killed_after)
    request = HookRequest(
        hook="git_commit",
        workspace=str(repo.path),
        step=1,
        tools=("write_file",),
        files=("notes.md",),
        workflow_id=f"hook-kill-{uuid.uuid4().hex[:8]}",
        run_id="run-1",
    )
    handle, result = await kill_mid_hook(
        client, git, repo, HookOnceWorkflow.run, request,
        commits_at_the_kill=0 if killed_after == "add" else 1,
    )  # fmt: skip

    assert result.outcome == "done"
    assert result.commit == repo.head()
    assert repo.count() == 2
    assert step_commits(repo) == 1
    assert repo.changed_in(result.commit) == ["A\tnotes.md"]
    assert repo.status() == ""
    if killed_after != "add":
        assert result.detail == f"step 1 was already committed as {result.commit[:12]}"
    else:
        assert result.detail == f"committed 1 file as {result.commit[:12]}"
    scheduled, attempt = await hook_attempts(handle)
    assert (scheduled, attempt) == (1, 2)  # one call, retried once, on the second worker


async def test_a_worker_killed_mid_add_commits_a_commands_60_files_once(
    client: Client, tmp_path: Path
) -> None:
    """A command's 60 new files (no tool reported them, made after the run started), with the
    user's unstaged edit and staged file from before: the worker is SIGKILLed in the middle of
    the hook's ``git add``; after the retry there is exactly one step commit, holding the 60
    files and nothing of the user's, whose index and work tree are as they were."""
    repo = make_repo(tmp_path / "ws", tmp_path)
    repo.write("README.md", "# the user's edit, not staged\n")
    repo.write("user-staged.txt", "the user's, staged\n")
    repo.git("add", "user-staged.txt")
    git = SlowGit(tmp_path / "slow-git", "add")
    request = HookRequest(
        hook="git_commit",
        workspace=str(repo.path),
        step=1,
        tools=("run_command",),
        workflow_id=f"hook-kill-60-{uuid.uuid4().hex[:8]}",
        run_id="run-1",
    )

    async def run_the_command(handle: WorkflowHandle[Any, Any]) -> None:
        for n in range(60):  # what the step's command made, after the run started
            repo.write(f"gen/file{n:02}.txt", f"{n}\n")
        await handle.signal(HookOnGoWorkflow.proceed)

    handle, result = await kill_mid_hook(
        client, git, repo, HookOnGoWorkflow.run, request,
        commits_at_the_kill=0, once_started=run_the_command,
    )  # fmt: skip

    assert result.outcome == "done", result.detail
    assert result.commit == repo.head()
    assert repo.count() == 2
    assert step_commits(repo) == 1
    assert repo.changed_in(result.commit) == [f"A\tgen/file{n:02}.txt" for n in range(60)]
    assert repo.status() == " M README.md\nA  user-staged.txt\n"
    assert repo.git("show", ":user-staged.txt") == "the user's, staged\n"
    scheduled, attempt = await hook_attempts(handle)
    assert (scheduled, attempt) == (1, 2)


# Ready for the agent loop: enabled as soon as the run's config can name hooks (and worker.py
# registers run_hook). The hook's heartbeat timeout is assumed to be the config's.
@pytest.mark.skipif(
    "hooks" not in AgentConfig.model_fields,
    reason="AgentConfig.hooks does not exist yet: the agent loop does not run hooks",
)
async def test_an_agent_run_killed_mid_hook_commits_the_step_once(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A real run whose worker is SIGKILLed right after the hook's commit finishes on a new
    worker; its step is committed once and the trace records the hook as done."""
    model = f"hook-crash-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "notes.md", "content": "n\n"}}
                ]
            },
            {"content": "written and committed"},
        ],
    )
    repo = make_repo(tmp_path / "ws", tmp_path)
    git = SlowGit(tmp_path / "slow-git", "update-ref")
    env = git.env(OPENAI_BASE_URL=model_server.base_url)
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    first = await start_worker(server_address(client), task_queue, env)
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="write notes",
                model=f"openai:{model}",
                workspace=str(repo.path),
                config=AgentConfig.model_validate(
                    {"hooks": ["git_commit"], "heartbeat_timeout_seconds": HEARTBEAT_SECONDS}
                ),
            ),
            id=f"hook-crash-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=3),
        )
        await git.wait_until_paused()
        assert step_commits(repo) == 1
        await first.kill()

        second = await start_worker(server_address(client), task_queue, env)
        try:
            result: AgentResult = await asyncio.wait_for(handle.result(), 120)
            trace = await handle.query(AgentWorkflow.trace)  # a query needs a live worker
        finally:
            assert await second.terminate() == 0
    finally:
        git.release()
        if first.process.returncode is None:
            await first.kill()

    assert result.status is RunStatus.DONE
    assert result.answer == "written and committed"
    assert repo.count() == 2
    assert step_commits(repo) == 1
    assert repo.changed_in("HEAD") == ["A\tnotes.md"]
    scheduled, attempt = await hook_attempts(handle)
    assert scheduled == 1
    assert attempt >= 2
    assert any("git_commit: done" in entry.data for entry in trace.entries)
    await replayer().replay_workflow(await handle.fetch_history())
