"""The MCP activities under a real Temporal server: listed and called from a workflow by
method, with Temporal owning the retries of a server that does not answer."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.worker import Worker

from tests.support.mcp_server import stdio_entry
from treadle.activities.mcp import McpActivities, parse_mcp_config
from treadle.workflows.agent.messages.mcp import McpCallRequest, McpListRequest, McpToolList
from treadle.workflows.agent.messages.models import ToolResult
from treadle.workflows.base import Frozen, failure_message


class ProbeInput(Frozen):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    max_attempts: int = 3


class ProbeResult(Frozen):
    tools: McpToolList
    result: ToolResult | None = None
    failure: str | None = None
    failure_type: str | None = None
    retry_state: str | None = None


@workflow.defn(sandboxed=False)
class McpProbeWorkflow:
    """Lists the worker's MCP tools, then calls one as the agent loop would."""

    @workflow.run
    async def run(self, probe: ProbeInput) -> ProbeResult:
        tools = await workflow.execute_activity_method(
            McpActivities.list_mcp_tools,
            McpListRequest(),
            start_to_close_timeout=timedelta(seconds=30),
        )
        info = tools.find(f"mcp__test__{probe.tool}")
        request = McpCallRequest(
            server="test", tool=probe.tool, arguments=probe.arguments, call_id="call-1", step=1
        )
        try:
            result = await workflow.execute_activity_method(
                McpActivities.call_mcp_tool,
                request,
                summary=f"step 1 · mcp__test__{probe.tool}",
                start_to_close_timeout=info.attempt_timeout() if info else timedelta(seconds=30),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=200),
                    maximum_attempts=probe.max_attempts,
                ),
            )
        except ActivityError as exc:
            cause = exc.cause
            return ProbeResult(
                tools=tools,
                failure=failure_message(exc),
                failure_type=cause.type if isinstance(cause, ApplicationError) else None,
                retry_state=exc.retry_state.name if exc.retry_state else None,
            )
        return ProbeResult(tools=tools, result=result)


@pytest.fixture
async def run_probe(client: Client, tmp_path: Path) -> AsyncIterator[Any]:
    """Run ``McpProbeWorkflow`` on a fresh task queue against a worker with ``entry``."""
    activities: list[McpActivities] = []

    async def run(entry: dict[str, Any], probe: ProbeInput) -> ProbeResult:
        mcp = McpActivities(parse_mcp_config({"servers": [entry]}))
        activities.append(mcp)
        task_queue = f"test-mcp-{uuid.uuid4().hex[:12]}"
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[McpProbeWorkflow],
            activities=[mcp.list_mcp_tools, mcp.call_mcp_tool],
        ):
            result: ProbeResult = await client.execute_workflow(
                McpProbeWorkflow.run,
                probe,
                id=f"mcp-probe-{uuid.uuid4().hex[:12]}",
                task_queue=task_queue,
                execution_timeout=timedelta(seconds=60),
            )
            return result

    yield run
    for mcp in activities:
        await mcp.aclose()


async def test_a_workflow_lists_and_calls_a_tool_through_temporal(run_probe: Any) -> None:
    """The listing and the call are activities whose typed results reach the workflow."""
    outcome: ProbeResult = await run_probe(
        stdio_entry("test"), ProbeInput(tool="add", arguments={"a": 2, "b": 3})
    )
    assert "mcp__test__add" in outcome.tools.names()
    assert outcome.result is not None
    assert (outcome.result.success, outcome.result.output) == (True, "5")


async def test_a_server_that_stays_down_exhausts_the_retry_policy(
    run_probe: Any, tmp_path: Path
) -> None:
    """The listing reports the server; each call attempt fails retryably, Temporal retries up
    to the policy's limit, and the workflow gets one clear failure to make an observation of."""
    missing = str(tmp_path / "gone")
    outcome: ProbeResult = await run_probe(
        {"name": "test", "command": missing}, ProbeInput(tool="add", max_attempts=2)
    )
    assert outcome.tools.unavailable == {"test": f"could not be started: {missing!r} not found"}
    assert outcome.result is None
    assert outcome.failure_type == "McpUnavailableError"
    assert outcome.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED.name
    assert outcome.failure == f"MCP server 'test' could not be started: {missing!r} not found"
