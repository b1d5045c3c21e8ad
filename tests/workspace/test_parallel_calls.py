"""Runs on a worker with a root (in this process): parallel calls of one step each start from
the step's snapshot, their snapshots are merged in call order, and a path two of them changed
keeps the later call's version, which the trace and the overridden call's observation say; a
step its calls snapshotted takes no second snapshot after its hooks."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import TEST_STORE, keep_history, replayer, start_agent
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests
from treadle.activities.workspace.follow import directory_name
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, RunStatus
from treadle.workflows.agent.messages.snapshots import SnapshotConfig
from treadle.workflows.agent.workflow import AgentWorkflow


def write(path: str, content: str) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


@pytest.mark.replay_corpus
async def test_parallel_calls_on_one_path_resolve_in_call_order(
    client: Client,
    model_server: ScriptedModelServer,
    rooted_worker: tuple[str, Path],
    tmp_path: Path,
) -> None:
    """Three parallel writes, two to ``same.txt``: the step's snapshot has every file and the
    second call's ``same.txt``; the first call's observation and the trace say it was
    overridden; the next step's read sees the merged workspace."""
    task_queue, root = rooted_worker
    model = f"parallel-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {
                "tool_calls": [
                    write("same.txt", "first"),
                    write("x.txt", "x"),
                    write("same.txt", "2"),
                ]
            },
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "same.txt"}}]},
            {"content": "done"},
        ],
    )
    handle = await start_agent(
        client, task_queue, f"openai:{model}", tmp_path / "home", "race", id_prefix="par"
    )
    result = await handle.result()
    assert result.status is RunStatus.DONE

    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    store = FileBlobStore(TEST_STORE)
    state = await Manifests(store).state(head.manifest)
    assert {p: await store.get(e[0]) for p, e in state.items()} == {
        "same.txt": b"2",
        "x.txt": b"x",
    }
    trace = await handle.query(AgentWorkflow.trace)
    merged = [e.data for e in trace.entries if e.event == "WorkspaceMerged"]
    assert len(merged) == 1 and "same.txt by calls 1, 3" in merged[0], merged
    seen = model_server.requests_for(model)
    told = [m for m in seen[1].body["messages"] if m.get("role") == "tool"]
    assert [("NOTE: same.txt was also changed" in str(m["content"])) for m in told] == [
        True,
        False,
        False,
    ]
    assert str(seen[2].body["messages"][-1]["content"]).endswith("2"), seen[2].body["messages"][-1]
    history = await handle.fetch_history()
    assert (root / directory_name(handle.id) / "same.txt").read_text() == "2"
    await replayer().replay_workflow(history)
    keep_history("workspace-follows-parallel-merge", history)


@pytest.mark.replay_corpus
async def test_a_step_snapshotted_by_its_calls_takes_no_second_snapshot(
    client: Client,
    model_server: ScriptedModelServer,
    rooted_worker: tuple[str, Path],
    tmp_path: Path,
) -> None:
    """Snapshots on, on a worker with a root: the calls' own snapshots are the steps'; no
    ``snapshot_workspace`` runs after the hooks, and the trace says whose they are."""
    task_queue, _root = rooted_worker
    model = f"own-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [write("a.txt", "1")]},
            {"tool_calls": [write("b.txt", "2")]},
            {"content": "done"},
        ],
    )
    handle = await start_agent(
        client, task_queue, f"openai:{model}", tmp_path / "home", "two",
        config=AgentConfig(snapshots=SnapshotConfig(enabled=True)), id_prefix="own",
    )  # fmt: skip
    assert (await handle.result()).status is RunStatus.DONE
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    chain = await Manifests(FileBlobStore(TEST_STORE)).chain(head.manifest)
    assert [m.step for _, m in chain] == [2, 1]
    trace = await handle.query(AgentWorkflow.trace)
    lines = [e.data for e in trace.entries if e.event == "WorkspaceSnapshot"]
    assert len(lines) == 2 and all("taken by its calls" in line for line in lines), lines
    history = await handle.fetch_history()
    kinds = {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert "snapshot_workspace" not in kinds and "run_tool" in kinds
    await replayer().replay_workflow(history)
    keep_history("workspace-follows-snapshots-on", history)
