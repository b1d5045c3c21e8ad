"""A run with snapshots on records its workspace after every step whose tools changed it: one
manifest per changing step, the key in the run's state, what was left out in the manifest and
the snapshot's line."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from tests.support.harness import Harness
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests
from treadle.workflows.agent.messages.models import RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


def read(path: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": path}}]}


SNAPSHOTS = {"enabled": True}


@pytest.mark.replay_corpus
async def test_each_changing_step_is_one_snapshot(harness: Harness, store: FileBlobStore) -> None:
    """Three writing steps and a reading one: three manifests, chained, each holding its
    step's tree; the reading step takes none."""
    model = harness.script(
        write("a.txt", "one"),
        read("a.txt"),
        write("src/b.py", "print(2)"),
        write("a.txt", "three"),
        {"content": "done"},
    )
    handle = await harness.start(model, snapshots=SNAPSHOTS)
    assert (await handle.result()).status is RunStatus.DONE
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    manifests = Manifests(store)
    chain = await manifests.chain(head.manifest)
    assert [m.step for _, m in chain] == [4, 3, 1]
    trees = [await manifests.state(key) for key, _ in reversed(chain)]
    assert [sorted(t) for t in trees] == [["a.txt"], ["a.txt", "src/b.py"], ["a.txt", "src/b.py"]]
    contents = [await store.get(t["a.txt"][0]) for t in trees]
    assert contents == [b"one", b"one", b"three"]
    trace = await handle.query(AgentWorkflow.trace)
    lines = [e.data for e in trace.entries if e.event == "WorkspaceSnapshot"]
    assert len(lines) == 3 and all("taken by its calls · manifest" in line for line in lines)
    # Each taken inside its call: no snapshot activity at all.
    assert await snapshot_history(handle) == []


async def snapshot_history(handle: WorkflowHandle[Any, Any]) -> list[tuple[int, int]]:
    """(events, bytes) of each ``snapshot_workspace`` call in the run's history."""
    history = await handle.fetch_history()
    scheduled = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "snapshot_workspace"
    }
    costs = {event_id: [0, 0] for event_id in scheduled}
    for e in history.events:
        owner = e.event_id if e.event_id in scheduled else None
        for attrs in (
            e.activity_task_started_event_attributes,
            e.activity_task_completed_event_attributes,
        ):
            if attrs.scheduled_event_id in scheduled:
                owner = attrs.scheduled_event_id
        if owner is not None:
            costs[owner][0] += 1
            costs[owner][1] += e.ByteSize()
    return [(events, size) for events, size in costs.values()]


async def test_exclusions_are_counted_and_named(
    harness: Harness, store: FileBlobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Ignored directories and files over the size cap are left out, and the manifest and the
    worker's log line of the snapshot (taken in the call) say how many and which."""
    caplog.set_level(logging.INFO, logger="temporalio.activity")
    (harness.workspace / "node_modules" / "left").mkdir(parents=True)
    (harness.workspace / "node_modules" / "left" / "x.js").write_text("x")
    (harness.workspace / "big.bin").write_bytes(os.urandom(2000))
    model = harness.script(write("kept.txt", "k"), {"content": "done"})
    config = {"enabled": True, "max_file_bytes": 1000}
    handle = await harness.start(model, snapshots=config)
    assert (await handle.result()).status is RunStatus.DONE
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    manifest = await Manifests(store).get(head.manifest)
    assert manifest.excluded == {"node_modules": 1, "over 1000 bytes": 1}
    assert set(manifest.excluded_examples) == {"node_modules", "big.bin"}
    assert sorted(await Manifests(store).state(head.manifest)) == ["kept.txt"]
    [line] = [
        r.__dict__["detail"]
        for r in caplog.records
        if r.getMessage().startswith("workspace.snapshot (")
    ]
    assert "left out 2" in line and "node_modules" in line and "big.bin" in line


async def test_snapshots_off_take_none(harness: Harness) -> None:
    """With the config switch off a run takes no snapshot, in its calls or after them."""
    model = harness.script(write("a.txt", "one"), {"content": "done"})
    handle = await harness.start(model, snapshots={"enabled": False})
    assert (await handle.result()).status is RunStatus.DONE
    assert (await handle.query(AgentWorkflow.workspace)).manifest is None
    history = await handle.fetch_history()
    assert "snapshot_workspace" not in history.to_json()


async def test_continue_as_new_carries_the_latest_snapshot(
    harness: Harness, store: FileBlobStore
) -> None:
    """A run that continues as new every few steps keeps one chain of snapshots: the last
    run's latest manifest leads back, parent by parent, to the first run's first."""
    steps = 8
    model = harness.script(*(write(f"f{i}.txt", str(i)) for i in range(steps)), {"content": "done"})
    handle = await harness.start(model, snapshots=SNAPSHOTS, continue_as_new_after_events=20)
    assert (await handle.result()).status is RunStatus.DONE
    described = await handle.describe()
    assert described.run_id != handle.first_execution_run_id  # it did continue as new
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    chain = await Manifests(store).chain(head.manifest)
    assert [m.step for _, m in reversed(chain)] == list(range(1, steps + 1))
    assert sorted(await Manifests(store).state(head.manifest)) == [
        f"f{i}.txt" for i in range(steps)
    ]
