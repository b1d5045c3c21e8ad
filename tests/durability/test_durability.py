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
from tests.support.tries import failed_model_tries
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
    # The interrupted model call was made again on the new worker, as a try of its own.
    assert _activity_counts(list(history.events), "call_model") == (3, 2)
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
    # Handed back by the shutting-down worker (not found dead after a heartbeat timeout), and
    # made again at once as a new try: no backoff timer, no try spent.
    [handed_back] = failed_model_tries(history)
    assert handed_back.waited is None
    failures = [
        e.activity_task_failed_event_attributes.failure
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert [f.application_failure_info.type for f in failures] == ["WorkerShutdown"]
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
    ("confined", "tool_max_attempts"),
    [
        pytest.param(
            True, 3, marks=pytest.mark.skipif(not BWRAP_WORKS, reason="bubblewrap does not work")
        ),
        (False, 3),
        (False, 1),
    ],
    ids=["bwrap", "argument-checks-only", "made-again"],
)
async def test_a_command_whose_worker_died_is_never_run_again(
    client: Client,
    model_server: ScriptedModelServer,
    tmp_path: Path,
    confined: bool,
    tool_max_attempts: int,
) -> None:
    """SIGKILL to the worker mid-command kills the command's processes (at once, or when the
    retry starts); the retried attempt finds the call marked sent and does not run it again:
    the model reads that the outcome is unknown, and the command started once. With one
    attempt allowed (``made-again``) the lost attempt spends none: the workflow makes the call
    again as a new activity, told the one before had marked it sent."""
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
            {"content": "told the outcome is unknown"},
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
        config=RUN_PYTHON.model_copy(update={"tool_max_attempts": tool_max_attempts}),
        id_prefix="command-crash",
    )  # fmt: skip
    log = workspace / "ran.log"
    second = None
    try:
        await _wait_for_lines(log, 1)
        first_attempt = pids_with(script)
        assert len(first_attempt) >= 2  # the command and its child (and bwrap's, when confined)
        await first.kill()

        second = await start_worker(server_address(client), task_queue, env)
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        (workspace / "release").touch()
        if second is not None:
            assert await second.terminate() == 0

    assert result.answer == "told the outcome is unknown"
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    [(start, _token)] = (line.split() for line in lines)
    assert start == "start"  # one copy started, none ran again, and the killed one never ended
    assert gone_within(first_attempt, seconds=5)  # nothing of attempt 1 is left
    assert gone_within(pids_with(script), seconds=5)
    observed = model_server.requests_for(model)[-1].body["messages"][-1]
    assert observed["role"] == "tool"
    assert observed["content"].startswith("ERROR: outcome unknown: an earlier attempt of this")
    history = await handle.fetch_history()
    if tool_max_attempts > 1:
        assert 2 in [started.attempt for started in activity_starts(history)]
    else:
        # The first activity timed out with its worker; the call was made again, and answered.
        assert _activity_counts(history.events, "run_tool") == (2, 1)
    await replayer().replay_workflow(history)
