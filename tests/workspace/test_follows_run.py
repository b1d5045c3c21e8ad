"""The workspace follows the run: two ``worker.py`` processes with their own
``--workspace-root`` and one shared store stand in for two machines. Worker A is killed
(SIGKILL) in the middle of a command and its root deleted; the run completes on worker B with
everything its completed calls did, nothing done twice, the same tree as an uninterrupted run,
and each step's tree can be checked out."""

from __future__ import annotations

import asyncio
import shutil
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import keep_history, replayer, start_agent
from tests.support.processes import clean_env, run_cli, server_address, start_worker
from treadle.activities.workspace.follow import directory_name
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentResult, RunStatus

Tree = dict[str, bytes]

SLOW = (
    "python3 -c \"import pathlib, time; pathlib.Path('partial.txt').write_text('half'); "
    "open('log.txt', 'a').write('4\\n'); time.sleep(4); pathlib.Path('done4.txt').write_text('4')\""
)
"""Step 4: leaves a file and a log line at once, then takes a while: the kill lands here."""

CONFIG = AgentConfig(
    allow_run_command=True, command_allowlist=("python3",), heartbeat_timeout_seconds=2
)
"""Snapshots are left off: a worker with a root snapshots the calls it runs all the same."""


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


SCRIPT = [
    call("write_file", path="a.txt", content="one"),
    call("run_command", command="python3 -c \"open('log.txt', 'a').write('2\\n')\""),
    call("write_file", path="src/b.py", content="print(3)\n"),
    call("run_command", command=SLOW),
    call("write_file", path="c.txt", content="five"),
    {"content": "done"},
]

AFTER: dict[int, Tree] = {1: {"a.txt": b"one"}}
AFTER[2] = {**AFTER[1], "log.txt": b"2\n"}
AFTER[3] = {**AFTER[2], "src/b.py": b"print(3)\n"}
AFTER[4] = AFTER[3]
"""Step 4's command was lost with machine A: B does not run it again (its outcome is unknown,
and the model is told so), so step 4 leaves step 3's files, restored from the store."""
AFTER[5] = {**AFTER[4], "c.txt": b"five"}
"""The workspace after each step, as an uninterrupted run leaves it."""


def tree(root: Path) -> Tree:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def tool_attempts(events: list[Any]) -> list[tuple[int, int]]:
    """For each ``run_tool`` call of a history: (attempts started, completions)."""
    scheduled = [
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool"
    ]
    found = []
    for event_id in scheduled:
        started = [
            e.activity_task_started_event_attributes.attempt
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and e.activity_task_started_event_attributes.scheduled_event_id == event_id
        ]
        completed = [
            e
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and e.activity_task_completed_event_attributes.scheduled_event_id == event_id
        ]
        found.append((max(started), len(completed)))
    return found


@pytest.mark.parametrize("kind", ["directory", "s3"])
@pytest.mark.replay_corpus
async def test_a_run_moves_machines_with_its_workspace(
    client: Client,
    model_server: ScriptedModelServer,
    tmp_path: Path,
    kind: str,
    request: pytest.FixtureRequest,
) -> None:
    """Worker A is killed mid-command in step 4 and its root deleted: worker B restores the
    workspace of step 3 from the store and does not run the lost command again: the model is
    told its outcome is unknown. Every file of steps 1-3 is there, step 2's command appended its
    line once, and ``workspace ID --step N --into DIR`` gives each step's tree."""
    if kind == "s3":
        s3: dict[str, str] = request.getfixturevalue("s3_env")
        store = f"s3://{s3['BUCKET']}/follow-{uuid.uuid4().hex[:8]}"
        extra = {k: v for k, v in s3.items() if k != "BUCKET"}
    else:
        store, extra = str(tmp_path / "store"), {}
    model = f"follow-{uuid.uuid4().hex[:8]}"
    model_server.add_model(model, SCRIPT)
    task_queue = f"follow-{uuid.uuid4().hex[:10]}"
    address = server_address(client)
    env = clean_env(OPENAI_BASE_URL=model_server.base_url, **extra)
    root_a, root_b = tmp_path / "machine-a", tmp_path / "machine-b"
    flags = ("--store", store, "--sticky-queue-timeout", "1")
    worker_a = await start_worker(address, task_queue, env, *flags, "--workspace-root", str(root_a))
    home = tmp_path / "home"  # the run's own --workspace: no tool of this run touches it
    handle = await start_agent(
        client, task_queue, f"openai:{model}", home, "five steps", config=CONFIG, id_prefix="fol"
    )
    copy_a = root_a / directory_name(handle.id)
    while not (copy_a / "partial.txt").exists():  # step 4's command is running on A
        await asyncio.sleep(0.05)
    await worker_a.kill()
    shutil.rmtree(root_a)

    worker_b = await start_worker(address, task_queue, env, *flags, "--workspace-root", str(root_b))
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
        assert result.status is RunStatus.DONE, result
        copy_b = root_b / directory_name(handle.id)
        assert tree(copy_b) == AFTER[5]
        assert not home.exists() or tree(home) == {}
        told = [r.body["messages"][-1] for r in model_server.requests_for(model)][4]
        assert told["role"] == "tool"
        assert told["content"].startswith("ERROR: outcome unknown: an earlier attempt of this")

        # Nothing done twice: every call completed once; only step 4's was tried again.
        history = await handle.fetch_history()
        assert tool_attempts(list(history.events)) == [(1, 1), (1, 1), (1, 1), (2, 1), (1, 1)]
        await replayer().replay_workflow(history)
        keep_history(f"workspace-follows-moved-machines-{kind}", history)

        # Each step's tree, checked out of the store as a user would (the run answers where
        # its latest snapshot is).
        cli_env = clean_env(**extra)
        for step, expected in AFTER.items():
            into = tmp_path / f"step-{step}"
            done = await run_cli(
                "--address", address, "workspace", handle.id, "--store", store,
                "--step", str(step), "--into", str(into), env=cli_env,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert tree(into) == expected, step
            assert stat.S_IMODE((into / "a.txt").stat().st_mode) & 0o600 == 0o600
    finally:
        assert await worker_b.terminate() == 0
