"""A run's durable workspace and scheduled agents from Python through ``AgentClient``: snapshots
listed, a step's files, a step checked out, two compared; a scheduled agent created, listed,
shown, paused and deleted."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import Harness
from treadle.client import (
    AgentClient,
    CreateAction,
    ScheduleConflict,
    ScheduleNotFound,
    WorkspaceUnavailable,
)
from treadle.workflows.agent.messages.config import AgentConfig, AgentInput
from treadle.workflows.agent.messages.models import RunStatus
from treadle.workflows.scheduled.models import AgentSchedule


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


async def test_a_runs_snapshots_are_listed_read_checked_out_and_compared(
    harness: Harness, agents: AgentClient, track: Callable[[str], str], tmp_path: Path
) -> None:
    """Two writing steps are two snapshots; the first step's files, its check-out into a fresh
    directory and the difference to the second are what the run wrote."""
    model = harness.script(
        write("a.txt", "one"), write("b.txt", "two"), {"content": "Both written."}
    )
    started = await agents.start(
        AgentInput(
            task="Write two files.",
            model=model,
            workspace=str(harness.workspace),
            config=AgentConfig.model_validate({"snapshots": {"enabled": True}}),
        )
    )
    track(started.id)
    assert (await agents.result(started.id)).status is RunStatus.DONE

    snapshots = await agents.workspace.snapshots(started.id)
    assert [s.step for s in snapshots] == [1, 2]
    assert [(s.files, s.changed) for s in snapshots] == [(1, 1), (2, 1)]
    files = await agents.workspace.files(started.id, 1)
    assert [(f.path, f.size) for f in files] == [("a.txt", 3)]

    into = tmp_path / "step-1"
    done = await agents.workspace.checkout(started.id, into, step=1)
    assert (done.step, done.written, done.removed) == (1, ("a.txt",), ())
    assert sorted(p.name for p in into.iterdir()) == ["a.txt"]
    assert (into / "a.txt").read_text() == "one"

    changes = await agents.workspace.diff(started.id, 1, 2)
    assert [(c.kind, c.path) for c in changes] == [("A", "b.txt")]
    with pytest.raises(WorkspaceUnavailable, match="no snapshot at or before step 0"):
        await agents.workspace.files(started.id, 0)


async def test_a_run_without_snapshots_says_so(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """A run that took no snapshot is ``WorkspaceUnavailable``, saying why."""
    model = harness.script(write("a.txt", "one"), {"content": "ok"})
    started = await agents.start(
        AgentInput(
            task="Write.",
            model=model,
            workspace=str(harness.workspace),
            config=AgentConfig.model_validate({"snapshots": {"enabled": False}}),
        )
    )
    track(started.id)
    await agents.result(started.id)
    with pytest.raises(WorkspaceUnavailable, match="has no workspace snapshot"):
        await agents.workspace.snapshots(started.id)


async def test_a_scheduled_agent_is_created_listed_shown_paused_and_deleted(
    harness: Harness, agents: AgentClient
) -> None:
    """create is idempotent and refuses other settings under the same name; list and show find
    it with its monitor; pause and unpause change its state; delete removes it."""
    name = f"nightly-{uuid.uuid4().hex[:8]}"
    plan = AgentSchedule(
        name=name,
        every_minutes=60,
        agent=AgentInput(
            task="Tidy the notes.", model="openai:x", workspace=str(harness.workspace)
        ),
    )
    schedules = agents.schedules
    try:
        created = await schedules.create(plan)
        assert created.action is CreateAction.CREATED
        assert created.deployed.task_queue == harness.task_queue
        assert (await schedules.create(plan)).action is CreateAction.UNCHANGED
        other = plan.model_copy(update={"every_minutes": 30})
        with pytest.raises(ScheduleConflict, match="already exists with other settings"):
            await schedules.create(other)

        listed = [row for row in await schedules.list() if row.name == name]
        assert [(row.state, row.task) for row in listed] == [("active", "Tidy the notes.")]
        shown = await schedules.show(name)
        assert shown.deployed.schedule == plan and shown.running == ()
        assert shown.monitor is not None and shown.monitor.slug == name

        assert (await schedules.pause(name, "quiet week")).schedule == plan
        paused = await schedules.get(name)
        assert (paused.paused, paused.note) == (True, "quiet week")
        await schedules.unpause(name)
        assert not (await schedules.get(name)).paused
    finally:
        with contextlib.suppress(ScheduleNotFound):
            await schedules.delete(name)
    with pytest.raises(ScheduleNotFound, match=f"no scheduled agent {name!r}"):
        await schedules.get(name)
    with pytest.raises(ScheduleNotFound):
        await schedules.delete(name)
