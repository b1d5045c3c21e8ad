"""An attempt lost to its worker (killed, or alive but too busy to answer in time) never makes a
completed effect happen twice, and never spends a model call's tries.

A worker process is started with a tool module of the test's own: ``append_and_stall`` appends
a line to a file, then blocks its worker's event loop for longer than its own timeout, as a
worker loaded past its cores does. Temporal schedules the next attempt while the first is
still finishing; that attempt finds the call marked sent and, on the same worker, takes the
first attempt's outcome instead of running the call again."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import activity_starts, replayer, start_agent, wait_for_requests
from tests.support.processes import clean_env, server_address, start_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

STALLING_TOOLS = """
import time
from pathlib import Path

from pydantic import Field

from treadle.activities.tools.custom import Tool, ToolArgs, ToolContext


class AppendArgs(ToolArgs):
    line: str = Field(description="The line to append to effects.log.")


async def append_and_stall(args: AppendArgs, context: ToolContext) -> str:
    with context.path("effects.log").open("a") as log:
        log.write(args.line + "\\n")
    time.sleep(STALL)  # the worker's event loop is blocked: nothing it sends goes out
    return "appended"


TOOLS = (
    Tool(
        name="append_and_stall",
        description="Append a line, then keep the worker busy.",
        args=AppendArgs,
        run=append_and_stall,
        mutating=True,
        timeout_seconds=TIMEOUT,
    ),
)
"""
STALL_TOOL = """
import time

from treadle.activities.tools.custom import Tool, ToolArgs, ToolContext


class StallArgs(ToolArgs):
    pass


async def stall(args: StallArgs, context: ToolContext) -> str:
    time.sleep(STALL)  # the worker's event loop is blocked: no heartbeat of any call goes out
    return "stalled"


TOOLS = (
    Tool(
        name="stall", description="Keep the worker busy.", args=StallArgs, run=stall,
        mutating=False,
    ),
)
"""
TIMEOUT_SECONDS = 2
STALL_SECONDS = 6
"""The tool blocks its worker three times as long as its attempt may take."""


async def test_a_change_whose_attempt_was_lost_on_a_busy_worker_is_not_made_again(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """The first attempt appended its line and its worker stalled past the attempt's timeout:
    the next attempt, on the same live worker, does not append again but returns what the
    first one returned; the file holds one line."""
    module = f"stalling_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        STALLING_TOOLS.replace("STALL", str(STALL_SECONDS)).replace("TIMEOUT", str(TIMEOUT_SECONDS))
    )
    model = f"stall-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "append_and_stall", "arguments": {"line": "once"}}]},
            {"content": "checked"},
        ],
    )
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url, PYTHONPATH=str(tmp_path))
    worker = await start_worker(server_address(client), task_queue, env, "--tools", module)
    workspace = tmp_path / "ws"
    try:
        handle = await start_agent(
            client, task_queue, f"openai:{model}", workspace, "append once", id_prefix="stall"
        )
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        assert await worker.terminate() == 0

    assert result.status is RunStatus.DONE
    assert (workspace / "effects.log").read_text() == "once\n"
    [observed] = [
        message
        for message in model_server.requests_for(model)[-1].body["messages"]
        if message["role"] == "tool"
    ]
    assert observed["content"] == "appended"
    history = await handle.fetch_history()
    # The second attempt may have been lost to the same stall; the last one reported. (No replay
    # here: the worker's tool module is not loaded in this process, and a run replays only
    # where its tools are.)
    assert max(started.attempt for started in activity_starts(history)) >= 2


async def test_a_model_call_lost_with_its_worker_spends_no_try(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A run allowed one try per model call: its worker is killed during the call, a new
    worker takes it up once the heartbeat timed out, and the run answers (a lost try is no
    try); the trace says it waited for a worker and that one took the call."""
    model = f"lost-{uuid.uuid4().hex[:8]}"
    model_server.add_model(model, [{"content": "answered after the crash", "delay": 3}])
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    first = await start_worker(server_address(client), task_queue, env)
    config = AgentConfig(model_max_attempts=1, heartbeat_timeout_seconds=2)
    handle = await start_agent(
        client, task_queue, f"openai:{model}", tmp_path, "answer", config=config, id_prefix="lost"
    )
    await wait_for_requests(model_server, model, 1)  # the call is with the model
    await first.kill()
    second = await start_worker(server_address(client), task_queue, env)
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
        trace = [(e.event, e.data) for e in (await handle.query(AgentWorkflow.trace)).entries]
    finally:
        assert await second.terminate() == 0

    assert result.status is RunStatus.DONE
    assert result.answer == "answered after the crash"
    waited = [data for event, data in trace if event == "WaitingForWorker"]
    assert len(waited) == 1 and waited[0].startswith("a worker stopped answering during call_model")
    assert ("WorkerAnswered", "a worker took the call") in trace
    history = await handle.fetch_history()
    assert {started.attempt for started in activity_starts(history)} == {
        1
    }  # new tries, not retries
    await replayer().replay_workflow(history)


START_WAIT_END = (
    "python3 -c \"import time; open('effects.log', 'a').write('start\\n'); time.sleep(3); "
    "open('effects.log', 'a').write('end\\n')\""
)


@pytest.mark.parametrize("tool_max_attempts", [3, 1], ids=["retried", "made-again"])
async def test_a_command_whose_attempt_the_server_gave_up_is_not_cut_short(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path, tool_max_attempts: int
) -> None:
    """A command runs beside a tool that blocks the worker's loop past the command's heartbeat
    timeout: the server gives the command's attempt up and the SDK cancels it as no longer
    found, but its command runs to its end (never cut in half) and the next attempt returns its
    outcome, or, when the worker could not even begin the attempt in time, that attempt runs
    nothing and the next one runs the command. Either way the command runs once, whole. With
    one attempt allowed (``made-again``), the lost attempt spends no attempt of the call: the
    workflow makes the call again as a new activity, which takes the first one's outcome or
    runs the command, and the run shows it waited for a worker."""
    module = f"stall_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(STALL_TOOL.replace("STALL", str(STALL_SECONDS)))
    model = f"gave-up-{uuid.uuid4().hex[:8]}"
    command = {"name": "run_command", "arguments": {"command": START_WAIT_END}}
    model_server.add_model(
        model,
        [
            {"tool_calls": [command, {"name": "stall", "arguments": {}}]},
            {"content": "done"},
        ],
    )
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url, PYTHONPATH=str(tmp_path))
    worker = await start_worker(server_address(client), task_queue, env, "--tools", module)
    workspace = tmp_path / "ws"
    config = AgentConfig(
        allow_run_command=True,
        command_allowlist=("python3",),
        heartbeat_timeout_seconds=2,
        tool_max_attempts=tool_max_attempts,
    )
    try:
        handle = await start_agent(
            client, task_queue, f"openai:{model}", workspace, "run it", config=config,
            id_prefix="gave-up",
        )  # fmt: skip
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
        trace = [e.event for e in (await handle.query(AgentWorkflow.trace)).entries]
    finally:
        assert await worker.terminate() == 0

    assert result.status is RunStatus.DONE
    assert (workspace / "effects.log").read_text() == "start\nend\n"
    observed = {
        message["content"]
        for message in model_server.requests_for(model)[-1].body["messages"]
        if message["role"] == "tool"
    }
    assert observed == {"exit code 0\n(no output)", "stalled"}
    history = await handle.fetch_history()
    if tool_max_attempts > 1:
        # The command's activity was given up at least once: its last attempt is not its first.
        assert max(started.attempt for started in activity_starts(history)) >= 2
    else:
        # Each activity had one attempt: the command's was made again as a new one.
        assert {started.attempt for started in activity_starts(history)} == {1}
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        assert scheduled.count("run_tool") >= 3  # the stall, and the command twice or more
        assert "WaitingForWorker" in trace
