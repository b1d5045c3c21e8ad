"""An MCP client starts a run through Treadle's MCP server, follows it to the call waiting for
a person, approves it and reads the answer; a refusal comes back as the tool's error with the
run's reason; over streamable HTTP the same server answers behind the API's guard."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import httpx
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.support.harness import Harness
from tests.support.processes import ROOT, clean_env, start_service
from treadle.cli.defaults import DEFAULT_MODEL, DEMO_MODEL, DEMO_TASK_QUEUE
from treadle.workflows.agent.messages.models import AgentInput
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from mcp"}}


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """The tool's structured answer; a tool error raises with its text."""
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(part, "text", "") for part in result.content)
    if result.is_error:
        raise ToolFailed(text)
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    return json.loads(text)


class ToolFailed(Exception):
    pass


async def follow_until(
    client: Client, run_id: str, kind: str, after: int = 0
) -> tuple[dict[str, Any], int]:
    """Follow the run (follow_run, again and again) until an event of ``kind``."""
    for _ in range(60):
        followed = await call(client, "follow_run", run_id=run_id, after=after, wait_seconds=5)
        after = followed["next"]
        for event in followed["events"]:
            if event["kind"] == kind:
                return event, after
    raise AssertionError(f"no {kind} event in run {run_id}")


async def drive_a_run(client: Client, harness: Harness) -> None:
    """Start, follow to the approval, refuse a bad approval, approve, follow to the end."""
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"start_run", "follow_run", "approve", "reject", "answer", "run_status"} <= names
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Written from MCP."})
    started = await call(
        client, "start_run", task="Write the notes.", model=model,
        workspace=str(harness.workspace), require_approval=["write_file"],
    )  # fmt: skip
    run_id = started["id"]
    harness.handles.append(harness.client.get_workflow_handle(run_id))
    waiting, after = await follow_until(client, run_id, "approval_needed")
    assert waiting["tool"] == "write_file"
    try:
        await call(client, "approve", run_id=run_id, call_id="call_nope")
    except ToolFailed as exc:
        assert "refused" in str(exc)
    else:
        raise AssertionError("an unknown call id was approved")
    approved = await call(client, "approve", run_id=run_id, call_id=waiting["call_id"])
    assert approved["done"] == "approved"
    await follow_until(client, run_id, "ended", after)
    status = await call(client, "run_status", run_id=run_id)
    assert status["state"] == "Done" and status["final_answer"] == "Written from MCP."
    assert (harness.workspace / "notes.md").read_text() == "from mcp"


async def test_an_mcp_client_starts_follows_and_approves_a_run_over_stdio(
    harness: Harness,
) -> None:
    """Over stdio (the server is the client's child process, as Claude Desktop starts it):
    the run is started, followed to its approval, approved, and read to its answer."""
    parameters = StdioServerParameters(
        command=sys.executable,
        args=[str(ROOT / "starter.py"), *harness.cli_args(), "serve", "mcp"],
        env=clean_env(),
        cwd=str(ROOT),
    )
    async with Client(parameters, read_timeout_seconds=60) as client:
        await drive_a_run(client, harness)


async def test_an_mcp_client_drives_a_run_over_streamable_http(harness: Harness) -> None:
    """Over streamable HTTP on loopback: the same tools, the same run; a request naming
    another host is refused by the guard the API uses."""
    process, line = await start_service(*harness.cli_args(), "serve", "mcp", "--http",
                                        "--port", "0")  # fmt: skip
    try:
        assert line.startswith("Treadle's MCP server on http://127.0.0.1:"), line
        url = line.split()[4]
        async with Client(streamable_http_client(url), read_timeout_seconds=60) as client:
            await drive_a_run(client, harness)
        async with httpx.AsyncClient() as http:
            foreign = await http.post(url, headers={"Host": "evil.example"}, json={})
        assert foreign.status_code == 421 and foreign.json()["error"]
    finally:
        process.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()


async def started_model(harness: Harness, run_id: str) -> str:
    """The model a run was started with, as its first event holds it."""
    history = await harness.client.get_workflow_handle(run_id).fetch_history()
    attributes = history.events[0].workflow_execution_started_event_attributes
    [agent_input] = await harness.client.data_converter.decode(
        attributes.input.payloads, [AgentInput]
    )
    assert isinstance(agent_input, AgentInput)
    return agent_input.model


async def test_start_run_without_a_model_gets_the_servers_or_the_queues(harness: Harness) -> None:
    """Issue 40: a run start_run starts without a model runs with ``serve mcp --model``'s, and
    without that with the queue's: on the demo's queue the demo's scripted model (the only one
    its worker answers), as ``ui``, ``api`` and ``run`` give it; elsewhere openai:gpt-4o."""
    address = harness.client.service_client.config.target_host

    async def start(queue: str, *options: str) -> str:
        command = ["--address", address, "--task-queue", queue, "serve", "mcp", *options]
        parameters = StdioServerParameters(
            command=sys.executable,
            args=[str(ROOT / "starter.py"), *command],
            env=clean_env(),
            cwd=str(ROOT),
        )
        async with Client(parameters, read_timeout_seconds=60) as client:
            started = await call(
                client, "start_run", task="Say it.", workspace=str(harness.workspace)
            )
        run_id: str = started["id"]
        return run_id

    model = harness.script({"content": "Done by the server's model."})
    run_id = await start(harness.task_queue, "--model", model)
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    harness.handles.append(handle)
    assert (await handle.result()).answer == "Done by the server's model."

    # No worker of the suite serves these queues: the run's start says which model it got.
    for queue, expected in ((DEMO_TASK_QUEUE, DEMO_MODEL), (f"nobody-{run_id}", DEFAULT_MODEL)):
        run_id = await start(queue)
        try:
            assert await started_model(harness, run_id) == expected
        finally:
            await harness.client.get_workflow_handle(run_id).terminate("checked its model")
