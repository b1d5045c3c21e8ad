"""Snapshots taken inside the calls on a worker without a root: a run with snapshots on (the
default) records one per changing step, each taken by the call that changed the workspace
before it returned, so a step costs the history events it costs with snapshots off. A hook
that may change files keeps the snapshot after it; a worker killed in the middle of a call
leaves no snapshot of it, and the call tried again, which does not run the lost command a second
time, snapshots once."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tests.support.harness import Harness, keep_history, replayer, scripted_worker, start_agent
from tests.support.processes import clean_env, run_cli, server_address, start_worker
from tests.support.repos import committed_repo, git
from treadle.activities.model.activity import http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

Tree = dict[str, bytes]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tree(root: Path) -> Tree:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


async def activities_named(handle: WorkflowHandle[Any, Any], name: str) -> int:
    history = await handle.fetch_history()
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == name
    )


async def test_a_changing_step_costs_no_more_history_events_with_snapshots(
    harness: Harness, store: FileBlobStore
) -> None:
    """Twenty writing steps with snapshots on (the default) and off: the same events per
    step, at most a few hundred bytes more (the key in a call's result and the next call's
    request), one snapshot per step and no ``snapshot_workspace`` activity."""
    writes = [call("write_file", path=f"d/n{i}.md", content=str(i) * 100) for i in range(21)]
    costs = {}
    for on in (True, False):
        sizes = []
        for steps in (1, 21):
            model = harness.script(*writes[:steps], {"content": "done"})
            handle = await harness.start(model, max_steps=40, snapshots={"enabled": on})
            assert (await handle.result()).status is RunStatus.DONE
            history = await handle.fetch_history()
            sizes.append((len(history.events), sum(e.ByteSize() for e in history.events)))
            assert await activities_named(handle, "snapshot_workspace") == 0
        (events_1, bytes_1), (events_21, bytes_21) = sizes
        costs[on] = ((events_21 - events_1) / 20, (bytes_21 - bytes_1) / 20)
        if on:
            head = await handle.query(AgentWorkflow.workspace)
            assert head.manifest is not None
            chain = await Manifests(store).chain(head.manifest)
            assert [m.step for _, m in reversed(chain)] == list(range(1, 22))
    (events_on, bytes_on), (events_off, bytes_off) = costs[True], costs[False]
    assert events_on == events_off, costs
    assert 0 < bytes_on - bytes_off <= 400, costs


async def test_a_worker_without_a_store_says_so_and_takes_no_activity(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Snapshots on, a worker with no store: the calls say none was taken, the trace says
    why, and the step takes no ``snapshot_workspace`` either."""
    task_queue = f"nostore-{uuid.uuid4().hex[:8]}"
    name = f"nostore-{uuid.uuid4().hex[:8]}"
    model_server.add_model(name, [call("write_file", path="a.txt", content="x"), {"content": "ok"}])
    async with (
        http_client() as http,
        scripted_worker(client, task_queue, model_server, http, store=None),
    ):
        handle = await start_agent(
            client, task_queue, f"openai:{name}", tmp_path / "ws", "write", id_prefix="nostore"
        )
        result: AgentResult = await handle.result()
        assert result.status is RunStatus.DONE, result
        trace = await handle.query(AgentWorkflow.trace)
    [line] = [e.data for e in trace.entries if e.event == "WorkspaceSnapshot"]
    assert line == "step 1: not taken, this worker has no store (--store)"
    assert await activities_named(handle, "snapshot_workspace") == 0
    await replayer().replay_workflow(await handle.fetch_history())


async def test_a_hooks_change_is_in_the_steps_snapshot(
    harness: Harness, store: FileBlobStore
) -> None:
    """With a hook (``git_commit`` writes ``.git``'s index and refs after the step's calls) the
    step is snapshotted after its hooks, as before: the snapshot holds the commit's ref."""
    repo = harness.workspace
    committed_repo(repo)
    model = harness.script(call("write_file", path="notes.md", content="one\n"), {"content": "ok"})
    handle = await harness.start(model, hooks=["git_commit"])
    assert (await handle.result()).status is RunStatus.DONE
    assert await activities_named(handle, "snapshot_workspace") == 1
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    files = await Manifests(store).state(head.manifest)
    ref = git(repo, "symbolic-ref", "HEAD").strip()
    commit = git(repo, "rev-parse", "HEAD").strip()
    assert commit != git(repo, "rev-parse", "HEAD~1").strip()  # the hook committed the step
    assert await store.get(files[f".git/{ref}"][0]) == f"{commit}\n".encode()
    assert await store.get(files["notes.md"][0]) == b"one\n"


SLOW = (
    "python3 -c \"import pathlib, time; pathlib.Path('partial.txt').write_text('half'); "
    "time.sleep(4); pathlib.Path('done4.txt').write_text('4')\""
)
"""Step 4: leaves a file at once, then takes a while: the kill lands here."""

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
AFTER[4] = {**AFTER[3], "partial.txt": b"half"}
"""Step 4's command was lost with its worker, half done: it is not run again (its outcome is
unknown, and the model is told so); its snapshot is the files as the lost attempt left them."""
AFTER[5] = {**AFTER[4], "c.txt": b"five"}


@pytest.mark.replay_corpus
async def test_a_worker_killed_mid_call_leaves_no_snapshot_of_it(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Two ``worker.py`` processes without a root, one store, the run's own workspace: A is
    killed (SIGKILL) in the middle of step 4's command; B's attempt does not run it again and
    tells the model its outcome is unknown. Every step has one snapshot, taken by its call (no
    ``snapshot_workspace`` in the history), step 4's of the files the lost attempt left;
    ``workspace ID --step N --into DIR`` gives each step's tree."""
    store = str(tmp_path / "store")
    model = f"incall-{uuid.uuid4().hex[:8]}"
    model_server.add_model(model, SCRIPT)
    task_queue = f"incall-{uuid.uuid4().hex[:10]}"
    address = server_address(client)
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    flags = ("--store", store, "--sticky-queue-timeout", "1")
    worker_a = await start_worker(address, task_queue, env, *flags)
    home = tmp_path / "home"
    config = AgentConfig(
        allow_run_command=True, command_allowlist=("python3",), heartbeat_timeout_seconds=2
    )
    handle = await start_agent(
        client, task_queue, f"openai:{model}", home, "five steps", config=config, id_prefix="inc"
    )
    while not (home / "partial.txt").exists():  # step 4's command is running on A
        await asyncio.sleep(0.05)
    await worker_a.kill()
    assert not (home / "done4.txt").exists()

    worker_b = await start_worker(address, task_queue, env, *flags)
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
        assert result.status is RunStatus.DONE, result
        assert tree(home) == AFTER[5]
        told = [r.body["messages"][-1] for r in model_server.requests_for(model)][4]
        assert told["role"] == "tool"
        assert told["content"].startswith("ERROR: outcome unknown: an earlier attempt of this")
        history = await handle.fetch_history()
        await replayer().replay_workflow(history)
        keep_history("workspace-snapshot-in-a-call-killed-midway", history)
        assert await activities_named(handle, "snapshot_workspace") == 0
        # Every call completed once; only step 4's was tried again.
        assert sorted(
            e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and e.activity_task_started_event_attributes.attempt > 1
        ) == [2]

        # One snapshot per step, step 4's of the completed command (the run answers where
        # its latest is while a worker polls its queue).
        cli = ("--address", address, "workspace", handle.id, "--store", store)
        listed = await run_cli(*cli, "--json", env=clean_env())
        assert listed.returncode == 0, listed.stderr
        assert [s["step"] for s in json.loads(listed.stdout)] == [1, 2, 3, 4, 5]
        for step, expected in AFTER.items():
            into = tmp_path / f"step-{step}"
            done = await run_cli(*cli, "--step", str(step), "--into", str(into), env=clean_env())
            assert done.returncode == 0, done.stderr
            assert tree(into) == expected, step
    finally:
        assert await worker_b.terminate() == 0
