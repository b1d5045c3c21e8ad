"""Runs survive their workers: a killed worker's run completes elsewhere without redoing work."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.commands import BWRAP_WORKS, gone_within, pids_with
from tests.support.harness import (
    activity_starts,
    keep_history,
    replayer,
    start_agent,
    wait_for_requests,
)
from tests.support.processes import clean_env, server_address, start_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentResult, Decision, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

APPEND_ONCE = "python3 -c \"open('ran.log', 'a').write('ran\\n')\""

RUN_PYTHON = AgentConfig(
    allow_run_command=True, command_allowlist=("python3",), heartbeat_timeout_seconds=2
)
"""A run that may start python3, and notices a dead worker two seconds after its last beat."""


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


@pytest.mark.replay_corpus
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
    first = await start_worker(server_address(client), task_queue, env)
    handle = await start_agent(
        client, task_queue, f"openai:{model}", workspace, "append once",
        config=RUN_PYTHON, id_prefix="crash",
    )  # fmt: skip
    await wait_for_requests(model_server, model, 2)  # the tool ran; the 2nd model call is live
    await first.kill()

    second = await start_worker(server_address(client), task_queue, env)
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        assert await second.terminate() == 0

    assert result.status is RunStatus.DONE
    assert result.answer == "done after the crash"
    assert (workspace / "ran.log").read_text() == "ran\n"
    history = await handle.fetch_history()
    assert _activity_counts(list(history.events), "run_tool") == (1, 1)
    model_attempts = [started.attempt for started in activity_starts(history)]
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
    address = server_address(client)
    first = await start_worker(address, task_queue, env, "--graceful-shutdown", "0.5")
    handle = await start_agent(
        client, task_queue, f"openai:{model}", tmp_path, "slow answer", id_prefix="handover"
    )
    await wait_for_requests(model_server, model, 1)
    assert await first.terminate() == 0
    assert first.output[-1] == "Worker stopped."

    second = await start_worker(server_address(client), task_queue, env)
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        assert await second.terminate() == 0
    assert result.answer == "finished elsewhere"
    assert len(model_server.requests_for(model)) == 2
    history = await handle.fetch_history()
    (second_attempt,) = [started for started in activity_starts(history) if started.attempt == 2]
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
    first = await start_worker(server_address(client), task_queue, env)
    handle = await start_agent(
        client, task_queue, f"openai:{model}", tmp_path, "write a",
        config=AgentConfig(require_approval=("write_file",)), id_prefix="restart",
    )  # fmt: skip
    for _ in range(300):
        if (await handle.query(AgentWorkflow.state)).state == "WaitingForHuman":
            break
        await asyncio.sleep(0.1)
    await first.kill()

    second = await start_worker(server_address(client), task_queue, env)
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


# Attempt 1 starts a child that logs 'start <token>', waits for the file 'release', then logs
# 'end <token>'; each copy has its own token, so the log tells the copies apart.
RELEASED_JOB = """
import os, subprocess, sys, time, uuid
if len(sys.argv) == 1:
    subprocess.run([sys.executable, sys.argv[0], uuid.uuid4().hex], check=True)
else:
    with open("ran.log", "a") as log:
        log.write(f"start {sys.argv[1]}\\n")
    deadline = time.monotonic() + 120
    while not os.path.exists("release") and time.monotonic() < deadline:
        time.sleep(0.05)
    with open("ran.log", "a") as log:
        log.write(f"end {sys.argv[1]}\\n")
"""


async def _wait_for_lines(path: Path, count: int) -> list[str]:
    for _ in range(1200):
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path.name} never had {count} lines")


@pytest.mark.parametrize(
    "confined",
    [
        pytest.param(
            True, marks=pytest.mark.skipif(not BWRAP_WORKS, reason="bubblewrap does not work")
        ),
        False,
    ],
    ids=["bwrap", "argument-checks-only"],
)
async def test_a_command_dies_with_its_worker_and_runs_once_after_the_retry(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path, confined: bool
) -> None:
    """SIGKILL to the worker mid-command kills the command's processes (at once, or when the
    retry starts); the retried attempt runs the only copy that completes."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = f"job-{uuid.uuid4().hex[:8]}.py"
    (workspace / script).write_text(RELEASED_JOB)
    model = f"command-crash-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {
                "tool_calls": [
                    {"name": "run_command", "arguments": {"command": f"python3 {script}"}}
                ]
            },
            {"content": "ran once"},
        ],
    )
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    if not confined:
        # A worker without bwrap on its PATH: argument checks only, as on a machine without it.
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "python3").symlink_to(sys.executable)
        env["PATH"] = str(bin_dir)
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    first = await start_worker(server_address(client), task_queue, env)
    handle = await start_agent(
        client, task_queue, f"openai:{model}", workspace, "run the job once",
        config=RUN_PYTHON, id_prefix="command-crash",
    )  # fmt: skip
    log = workspace / "ran.log"
    second = None
    try:
        await _wait_for_lines(log, 1)
        first_attempt = pids_with(script)
        assert len(first_attempt) >= 2  # the command and its child (and bwrap's, when confined)
        await first.kill()

        second = await start_worker(server_address(client), task_queue, env)
        await _wait_for_lines(log, 2)  # the retried attempt's copy has started
        (workspace / "release").touch()
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        (workspace / "release").touch()
        if second is not None:
            assert await second.terminate() == 0

    assert result.answer == "ran once"
    (start_1, token_1), (start_2, token_2), *rest = (
        line.split() for line in log.read_text().splitlines()
    )
    assert (start_1, start_2) == ("start", "start")
    assert token_1 != token_2
    assert rest == [["end", token_2]]  # only the retried copy completed
    assert gone_within(first_attempt, seconds=5)  # nothing of attempt 1 is left
    assert gone_within(pids_with(script), seconds=5)
    history = await handle.fetch_history()
    assert 2 in [started.attempt for started in activity_starts(history)]
    await replayer().replay_workflow(history)
