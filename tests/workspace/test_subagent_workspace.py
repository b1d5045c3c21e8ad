"""A sub-agent shares its parent's workspace on a worker with a root (in this process): the
child starts from the parent's latest snapshot, in a copy of its own, and its final snapshot is
merged into the parent's when it ends, so the parent's next call, its hooks, its progress
tracking and ``starter.py workspace PARENT_ID`` see what the child changed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.support.family import child, delegate, observations, starter
from tests.support.harness import TEST_STORE, Harness, replay_finished
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests
from treadle.activities.workspace.follow import directory_name
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


def write(path: str, content: str) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


def read(path: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": path}}


@pytest.fixture
async def rooted(
    request: pytest.FixtureRequest,
    client: Client,
    model_server: ScriptedModelServer,
    rooted_worker: tuple[str, Path],
    tmp_path: Path,
) -> AsyncIterator[tuple[Harness, Path]]:
    """A harness on a worker with ``--workspace-root``: (harness, root). Every finished run,
    children included, is replay-checked."""
    task_queue, root = rooted_worker
    home = tmp_path / "home"
    home.mkdir()
    h = Harness(client, task_queue, model_server, home)
    yield h, root
    await replay_finished(request, h)


async def tree_of(manifest: str) -> dict[str, bytes]:
    store = FileBlobStore(TEST_STORE)
    state = await Manifests(store).state(manifest)
    return {path: await store.get(entry[0]) for path, entry in state.items()}


def writes_then_delegates(harness: Harness) -> tuple[str, list[dict[str, Any]]]:
    """A child that reads ``a.txt`` and writes ``kid.txt``, and the parent's first two turns:
    write ``a.txt``, then delegate to it."""
    kid = harness.script(
        {"tool_calls": [read("a.txt")]},
        {"tool_calls": [write("kid.txt", "from the child")]},
        {"content": "wrote kid.txt"},
    )
    return kid, [
        {"tool_calls": [write("a.txt", "from the parent")]},
        {"tool_calls": [delegate("read a.txt, write kid.txt", kid, "call_kid")]},
    ]


@pytest.mark.replay_corpus
async def test_a_child_sees_its_parents_files_and_the_parent_sees_the_childs(
    rooted: tuple[Harness, Path], tmp_path: Path
) -> None:
    """The parent writes ``a.txt`` and delegates; the child reads it (its observation is the
    parent's content) and writes ``kid.txt``; the parent then reads ``kid.txt``. The merge is
    in the parent's trace, its hooks and progress count the child's file, and ``workspace
    PARENT_ID --into DIR`` has both files."""
    harness, root = rooted
    kid, parent_writes_and_delegates = writes_then_delegates(harness)
    parent = harness.script(
        *parent_writes_and_delegates,
        {"tool_calls": [read("kid.txt")]},
        {"content": "both there"},
    )
    handle = await harness.start(parent, subagents={"models": [kid]})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error

    # The child's first call saw the parent's file, in a copy of its own.
    seen = observations(harness, kid, 1)
    assert seen["call_t0_0"].endswith("from the parent"), seen
    kid_handle = child(harness, handle, "call_kid")
    done: AgentResult = await kid_handle.result()
    assert done.status is RunStatus.DONE and done.workspace_snapshot is not None
    assert (root / directory_name(kid_handle.id) / "a.txt").read_text() == "from the parent"
    # The parent's next call saw the child's file.
    seen = observations(harness, parent, 3)
    assert seen["call_t2_0"].endswith("from the child"), seen
    assert (root / directory_name(handle.id) / "kid.txt").read_text() == "from the child"

    trace = await handle.query(AgentWorkflow.trace)
    merged = [e.data for e in trace.entries if e.event == "WorkspaceMerged"]
    assert len(merged) == 1 and "1 call merged, 1 changed" in merged[0], merged
    hooks = [e.data for e in trace.entries if e.event == "HookRun"]
    assert "changed: kid.txt" in hooks, hooks
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.progress is not None and status.progress.files_modified == 2

    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    assert await tree_of(head.manifest) == {
        "a.txt": b"from the parent",
        "kid.txt": b"from the child",
    }
    into = tmp_path / "checked-out"
    done_cli = await starter(harness, "workspace", handle.id, "--into", str(into))
    assert done_cli.returncode == 0, done_cli.stderr
    assert (into / "a.txt").read_text() == "from the parent"
    assert (into / "kid.txt").read_text() == "from the child"


@pytest.mark.replay_corpus
async def test_parallel_children_are_merged_in_call_order(
    rooted: tuple[Harness, Path],
) -> None:
    """Two children started in one step both write ``same.txt`` and one file of their own:
    the parent's workspace has both own files and the later call's ``same.txt``, and the
    ``WorkspaceMerged`` line names the path both changed."""
    harness, _root = rooted
    first = harness.script(
        {"tool_calls": [write("same.txt", "first"), write("one.txt", "1")]},
        {"content": "first done", "delay": 0.5},
    )
    second = harness.script(
        {"tool_calls": [write("same.txt", "second"), write("two.txt", "2")]},
        {"content": "second done"},
    )
    parent = harness.script(
        {
            "tool_calls": [
                delegate("write same.txt and one.txt", first, "call_1"),
                delegate("write same.txt and two.txt", second, "call_2"),
            ]
        },
        {"tool_calls": [read("same.txt")]},
        {"content": "merged"},
    )
    handle = await harness.start(parent, subagents={"models": [first, second]})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    for call_id in ("call_1", "call_2"):
        assert (await child(harness, handle, call_id).result()).status is RunStatus.DONE

    trace = await handle.query(AgentWorkflow.trace)
    merged = [e.data for e in trace.entries if e.event == "WorkspaceMerged"]
    assert len(merged) == 1 and "same.txt by calls 1, 2" in merged[0], merged
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    assert await tree_of(head.manifest) == {
        "same.txt": b"second",
        "one.txt": b"1",
        "two.txt": b"2",
    }
    seen = observations(harness, parent, 2)
    assert seen["call_t1_0"].endswith("second"), seen


@pytest.mark.replay_corpus
async def test_without_a_root_the_child_works_in_the_same_directory(harness: Harness) -> None:
    """A worker without a root, snapshots on: parent and child use the run's ``--workspace``
    (the child reads the parent's file there); the child's snapshots chain on the parent's,
    and the parent's latest snapshot, merged with the child's, holds both files."""
    kid, parent_writes_and_delegates = writes_then_delegates(harness)
    parent = harness.script(
        *parent_writes_and_delegates,
        {"content": "both there"},
    )
    handle = await harness.start(parent, subagents={"models": [kid]}, snapshots={"enabled": True})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert observations(harness, kid, 1)["call_t0_0"].endswith("from the parent")
    assert (await child(harness, handle, "call_kid").result()).status is RunStatus.DONE
    assert (harness.workspace / "kid.txt").read_text() == "from the child"
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    assert await tree_of(head.manifest) == {
        "a.txt": b"from the parent",
        "kid.txt": b"from the child",
    }
