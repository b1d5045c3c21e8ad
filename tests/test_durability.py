"""Runs survive their workers: a killed worker's run completes elsewhere without redoing work."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.conftest import keep_history, replayer
from tests.processes import clean_env, start_worker
from treadle.scripted_model import ScriptedModelServer
from workflows.agent.models import AgentConfig, AgentInput, AgentResult, Decision, RunStatus
from workflows.agent.workflow import AgentWorkflow

APPEND_ONCE = "python3 -c \"open('ran.log', 'a').write('ran\\n')\""


def _address(client: Client) -> str:
    return client.service_client.config.target_host


async def _wait_for_requests(models: ScriptedModelServer, model: str, count: int) -> None:
    for _ in range(300):
        if len(models.requests_for(model)) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the model never received {count} requests")


def _activity_counts(events: list, activity: str) -> tuple[int, int]:
    scheduled = [
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]
    completed = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
    ]
    return len(scheduled), len(completed)


async def test_worker_killed_mid_run_and_restarted(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """SIGKILL mid model call: a new worker finishes the run; the finished tool is not rerun."""
    model = f"crash-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": APPEND_ONCE}}]},
            {"content": "done after the crash", "delay": 3},
        ],
    )
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    workspace = tmp_path / "ws"
    first = await start_worker(_address(client), task_queue, env)
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentInput(
            task="append once",
            model=f"openai:{model}",
            workspace=str(workspace),
            config=AgentConfig(
                allow_run_command=True, command_allowlist=("python3",), heartbeat_timeout_seconds=2
            ),
        ),
        id=f"crash-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        execution_timeout=timedelta(minutes=3),
    )
    await _wait_for_requests(model_server, model, 2)  # the tool ran; the 2nd model call is live
    await first.kill()

    second = await start_worker(_address(client), task_queue, env)
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        assert await second.terminate() == 0

    assert result.status is RunStatus.DONE
    assert result.answer == "done after the crash"
    assert (workspace / "ran.log").read_text() == "ran\n"
    history = await handle.fetch_history()
    assert _activity_counts(list(history.events), "run_tool") == (1, 1)
    model_attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert max(model_attempts) >= 2  # the interrupted model call was retried on the new worker
    await replayer().replay_workflow(history)
    keep_history("test_worker_killed_mid_run_and_restarted-0", history)


async def test_sigterm_hands_in_flight_work_to_another_worker(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """SIGTERM: worker.py exits 0 and the interrupted call is retried by the next worker."""
    model = f"handover-{uuid.uuid4().hex[:8]}"
    model_server.add_model(model, [{"content": "finished elsewhere", "delay": 4}])
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    first = await start_worker(_address(client), task_queue, env, "--graceful-shutdown", "0.5")
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentInput(task="slow answer", model=f"openai:{model}", workspace=str(tmp_path)),
        id=f"handover-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        execution_timeout=timedelta(minutes=3),
    )
    await _wait_for_requests(model_server, model, 1)
    assert await first.terminate() == 0
    assert first.output[-1] == "Worker stopped."

    second = await start_worker(_address(client), task_queue, env)
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        assert await second.terminate() == 0
    assert result.answer == "finished elsewhere"
    assert len(model_server.requests_for(model)) == 2
    history = await handle.fetch_history()
    (second_attempt,) = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt == 2
    ]
    # Handed back by the shutting-down worker, not found dead after a heartbeat timeout.
    assert second_attempt.last_failure.application_failure_info.type == "WorkerShutdown"
    await replayer().replay_workflow(history)


async def test_a_pending_approval_survives_a_worker_restart(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A run waiting for a human outlives the worker that started it; the next one finishes it."""
    model = f"restart-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "x"}}]},
            {"content": "written"},
        ],
    )
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    first = await start_worker(_address(client), task_queue, env)
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentInput(
            task="write a",
            model=f"openai:{model}",
            workspace=str(tmp_path),
            config=AgentConfig(require_approval=("write_file",)),
        ),
        id=f"restart-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        execution_timeout=timedelta(minutes=3),
    )
    for _ in range(300):
        if (await handle.query(AgentWorkflow.state)).state == "WaitingForHuman":
            break
        await asyncio.sleep(0.1)
    await first.kill()

    second = await start_worker(_address(client), task_queue, env)
    try:
        decided = await handle.execute_update(AgentWorkflow.decide, Decision(action="approve"))
        result: AgentResult = await asyncio.wait_for(handle.result(), 60)
    finally:
        assert await second.terminate() == 0
    assert decided.tool == "write_file"
    assert result.answer == "written"
    assert (tmp_path / "a").read_text() == "x"
    assert len(model_server.requests_for(model)) == 2  # nothing before the wait was redone
    await replayer().replay_workflow(await handle.fetch_history())
