"""Scheduled agents over hours, on the time-skipping test server: a schedule that stops firing
(paused) shows as a missed check-in, and a run past its max runtime as a timeout.

The test server has no Schedules API, so each slot is started here exactly as the schedule's
action would start it (the action ``build_schedule`` makes, with its input); the monitor is the
one ``schedule create`` makes (``ensure_monitor``). The hours between are skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, ScheduleActionStartWorkflow, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.support.harness import replayer, scripted_worker
from tests.support.monitors import until, view
from treadle.activities.model.activity import http_client
from treadle.agent_schedules import build_schedule, ensure_monitor
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, RunStatus
from treadle.workflows.monitors.models import CheckInStatus, Health, monitor_workflow_id
from treadle.workflows.monitors.workflow import MonitorWorkflow
from treadle.workflows.scheduled.models import AgentSchedule, ScheduledRunInput, ScheduledRunResult
from treadle.workflows.scheduled.workflow import ScheduledAgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "nightly notes"}}


class Slots:
    """A worker on the time-skipping server, and scheduled agents whose slots it runs."""

    def __init__(
        self, client: Client, task_queue: str, models: ScriptedModelServer, workspace: Path
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.models = models
        self.workspace = workspace
        self.handles: list[WorkflowHandle[Any, Any]] = []

    async def create(self, turns: list[Mapping[str, Any]], **fields: Any) -> AgentSchedule:
        """A scheduled agent running the scripted ``turns``, and its monitor (as created)."""
        model = f"ts-{uuid.uuid4().hex[:10]}"
        self.models.add_model(model, turns)
        config = {**fields.pop("config", {}), "search_attributes": False}
        plan = AgentSchedule.model_validate(
            {
                "name": f"ts-{uuid.uuid4().hex[:10]}",
                "every_minutes": 60,
                **fields,
                "agent": AgentInput(
                    task="Write tonight's notes.",
                    model=f"openai:{model}",
                    workspace=str(self.workspace),
                    # The time-skipping server registers no search attributes.
                    config=AgentConfig.model_validate(config),
                ),
            }
        )
        assert await ensure_monitor(self.client, plan, self.task_queue)
        self.handles.append(self.monitor(plan))
        return plan

    def monitor(self, plan: AgentSchedule) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle_for(
            MonitorWorkflow.run, monitor_workflow_id(plan.name)
        )

    async def fire(self, plan: AgentSchedule) -> WorkflowHandle[Any, ScheduledRunResult]:
        """Start one slot as the schedule's action does: same workflow, input and queue."""
        action = build_schedule(plan, self.task_queue).action
        assert isinstance(action, ScheduleActionStartWorkflow)
        (run_input,) = action.args
        assert isinstance(run_input, ScheduledRunInput)
        handle = await self.client.start_workflow(
            ScheduledAgentWorkflow.run,
            run_input,
            id=f"{action.id}-{uuid.uuid4().hex[:8]}",
            task_queue=action.task_queue or self.task_queue,
        )
        self.handles.append(handle)
        return handle


@pytest.fixture
async def slots(
    time_skipping: WorkflowEnvironment, model_server: ScriptedModelServer, tmp_path: Path
) -> AsyncIterator[Slots]:
    """Monitors and slots left running are terminated: the test server only skips time while
    no workflow task is outstanding."""
    task_queue = f"ts-{uuid.uuid4().hex[:12]}"
    s = Slots(time_skipping.client, task_queue, model_server, tmp_path)
    async with http_client() as http, scripted_worker(s.client, task_queue, model_server, http):
        yield s
        for handle in s.handles:
            if (await handle.describe()).close_time is None:
                await handle.terminate(reason="test over")


async def test_a_paused_schedule_shows_as_a_missed_check_in(
    time_skipping: WorkflowEnvironment, slots: Slots
) -> None:
    """A slot runs and checks in ok; then no slot comes (the schedule is paused), and an hour
    and the margin later the monitor writes a missed check-in and turns missed."""
    plan = await slots.create([{"content": "Notes written."}], margin_minutes=5)
    slot = await slots.fire(plan)
    outcome = await slot.result()
    assert (outcome.status, outcome.answer) == (RunStatus.DONE, "Notes written.")
    # The OK check-in (the server may already be skipping towards the next slot's time, on a
    # loaded machine, so the view may show the miss too).
    ok = await until(
        slots.monitor(plan), lambda v: CheckInStatus.OK in {c.status for c in v.recent}
    )
    [checked_in] = [c for c in ok.recent if c.status is CheckInStatus.OK]
    assert checked_in.finished_at is not None

    await time_skipping.sleep(timedelta(minutes=70))
    missed = await until(slots.monitor(plan), lambda v: v.health is Health.MISSED)
    assert [c.status for c in missed.recent] == [CheckInStatus.MISSED, CheckInStatus.OK]
    expected = missed.recent[0].expected_at
    # The run after the one that checked in, an hour later, never came.
    assert expected is not None
    assert timedelta(minutes=55) <= expected - checked_in.finished_at <= timedelta(minutes=65)
    assert missed.recent[0].output is not None
    assert missed.recent[0].output.startswith("missed: no check-in for the run expected at")
    await replayer().replay_workflow(await slot.fetch_history())


async def test_a_run_over_its_max_runtime_is_a_timeout(
    time_skipping: WorkflowEnvironment, slots: Slots
) -> None:
    """A run that waits for approval is in progress; past its max runtime (30 minutes) the
    monitor records the run as a timeout."""
    plan = await slots.create(
        [{"tool_calls": [WRITE]}, {"content": "written"}],
        max_runtime_minutes=30,
        config={"require_approval": ["write_file"]},
    )
    await slots.fire(plan)
    running = await until(slots.monitor(plan), lambda v: v.open_run is not None)
    assert running.recent[0].status is CheckInStatus.IN_PROGRESS

    await time_skipping.sleep(timedelta(minutes=31))
    timed_out = await until(slots.monitor(plan), lambda v: v.health is Health.TIMEOUT)
    checkin = timed_out.recent[0]
    assert (checkin.status, timed_out.open_run) == (CheckInStatus.TIMEOUT, None)
    assert checkin.output is not None and "30 min max runtime" in checkin.output
    assert (await view(slots.monitor(plan))).consecutive_failures == 1
