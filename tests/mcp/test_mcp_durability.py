"""MCP activities in real worker processes against a real stdio server that is slow to start:
heartbeats keep a slow start from being a heartbeat timeout, and a mutating call whose worker
was SIGKILLed after sending it is not sent again; the model is told its outcome is unknown."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

from tests.support.processes import (
    ROOT,
    WorkerProcess,
    clean_env,
    poll_until_killed,
    serve_command,
    server_address,
    start_python,
)
from tests.support.slow_link import SlowLink
from treadle.activities.mcp import McpActivities, parse_mcp_config
from treadle.activities.sent_marks import outcome_unknown
from treadle.connection import connect
from treadle.workflows.agent.messages.mcp import McpCallRequest, McpListRequest, McpToolList
from treadle.workflows.agent.messages.models import ToolResult

HEARTBEAT_SECONDS = 2
"""The agent's default heartbeat timeout."""
START_DELAY_SECONDS = 3
"""The server answers nothing for this long after it is started: longer than the heartbeat
timeout, so only heartbeats sent while it starts keep the attempt alive."""
LINK_DELAY_SECONDS = 0.5
"""What the killed worker sends reaches the server this late: longer than a beat takes to
leave a quiet worker, well within the heartbeat timeout."""


def _options() -> dict[str, Any]:
    """Each test activity's options: a dead worker's attempt is noticed quickly, and retried."""
    return {
        "start_to_close_timeout": timedelta(minutes=2),
        "heartbeat_timeout": timedelta(seconds=HEARTBEAT_SECONDS),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(milliseconds=200), maximum_attempts=3
        ),
    }


@workflow.defn(sandboxed=False)
class McpListOnceWorkflow:
    @workflow.run
    async def run(self, request: McpListRequest) -> McpToolList:
        return await workflow.execute_activity_method(
            McpActivities.list_mcp_tools, request, **_options()
        )


@workflow.defn(sandboxed=False)
class McpCallOnceWorkflow:
    @workflow.run
    async def run(self, request: McpCallRequest) -> ToolResult:
        return await workflow.execute_activity_method(
            McpActivities.call_mcp_tool, request, **_options()
        )


async def serve(address: str, task_queue: str, notes: str) -> None:
    """The worker process of these tests: the two workflows and the real MCP activities, with
    the slow server configured (the SDK not imported before the first MCP use)."""
    config = parse_mcp_config(
        {
            "servers": [
                {
                    "name": "test",
                    "command": sys.executable,
                    "args": [
                        "-m",
                        "tests.mcp.slow_server",
                        "--start-delay",
                        str(START_DELAY_SECONDS),
                    ],
                    "cwd": str(ROOT),
                    "env": ["MCP_TEST_NOTES"],
                    "list_timeout_seconds": 60,
                }
            ]
        }
    )
    client = await connect(address=address, namespace="default")
    async with McpActivities(config, environ={"MCP_TEST_NOTES": notes}) as mcp:
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[McpListOnceWorkflow, McpCallOnceWorkflow],
            activities=[mcp.list_mcp_tools, mcp.call_mcp_tool],
            max_cached_workflows=0,
        )
        await poll_until_killed(worker)


SERVE = serve_command(__name__, 3)


async def start_mcp_worker(
    client: Client, task_queue: str, notes: Path, address: str | None = None
) -> WorkerProcess:
    """The test's worker process, reaching the server at ``address`` (by default directly)."""
    address = address or client.service_client.config.target_host
    return await start_python(
        ["-c", SERVE, address, task_queue, str(notes)],
        clean_env(),
        ready=lambda line: line == "Worker polling",
        what="the MCP worker",
    )


async def attempts(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """The attempt number of every activity start the run's history records (one per
    activity: the last attempt's)."""
    history = await handle.fetch_history()
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]


async def test_a_slow_first_start_is_listed_in_one_attempt_without_a_traceback(
    client: Client, tmp_path: Path
) -> None:
    """A fresh worker (the SDK not loaded yet) lists a server that takes longer than the
    heartbeat timeout to start: one attempt, the tools listed, no CancelledError logged."""
    task_queue = f"test-mcp-slow-{uuid.uuid4().hex[:12]}"
    worker = await start_mcp_worker(client, task_queue, tmp_path / "notes")
    try:
        handle = await client.start_workflow(
            McpListOnceWorkflow.run,
            McpListRequest(),
            id=f"mcp-slow-list-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=3),
        )
        listed: McpToolList = await asyncio.wait_for(handle.result(), 120)
    finally:
        await worker.terminate()
    assert "mcp__test__note_and_wait" in listed.names()
    assert listed.unavailable == {}
    assert await attempts(handle) == [1]
    output = "\n".join(worker.output)
    assert "CancelledError" not in output
    assert "Traceback" not in output


async def test_a_mutating_call_whose_worker_died_is_not_sent_again(
    client: Client, tmp_path: Path
) -> None:
    """The worker is SIGKILLed while the server runs a mutating call (the server started
    slowly, so the attempt heartbeated before it sent the call), and what the worker sends
    reaches the Temporal server late (``SlowLink``: a heartbeat not yet delivered when it dies
    is lost with it). The call was sent only once the server held its sent mark, so the next
    attempt, on another worker, does not call again: the notes hold one line, and the model
    reads that the outcome is unknown."""
    notes = tmp_path / "notes"
    task_queue = f"test-mcp-kill-{uuid.uuid4().hex[:12]}"
    async with SlowLink(server_address(client), delay=LINK_DELAY_SECONDS) as link:
        first = await start_mcp_worker(client, task_queue, notes, link.address)
        try:
            handle = await client.start_workflow(
                McpCallOnceWorkflow.run,
                McpCallRequest(
                    server="test",
                    tool="note_and_wait",
                    arguments={"text": "S", "seconds": 30},
                    call_id="call-1",
                    step=1,
                ),
                id=f"mcp-kill-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
                execution_timeout=timedelta(minutes=3),
            )
            deadline = asyncio.get_running_loop().time() + 120  # a watchdog, not a measurement
            while not (notes.exists() and notes.read_text()):
                assert asyncio.get_running_loop().time() < deadline, "the call never reached it"
                await asyncio.sleep(0.05)
        finally:
            await first.kill()

    second = await start_mcp_worker(client, task_queue, notes)
    try:
        result: ToolResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        await second.terminate()

    unknown = outcome_unknown("test/note_and_wait")
    assert result == ToolResult(success=False, output=f"ERROR: {unknown}")
    assert result.output.startswith("ERROR: outcome unknown: an earlier attempt of this ")
    assert notes.read_text() == "S\n"
    assert await attempts(handle) == [2]  # history keeps a retried activity's last start
