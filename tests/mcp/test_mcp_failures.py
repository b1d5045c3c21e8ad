"""MCP servers that are slow, down, killed, or change their tools: listings report them, calls
fail retryably or answer with an ERROR observation, and the worker's sessions recover."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.support.mcp_server import stdio_entry
from tests.support.processes import free_port
from treadle.activities.mcp import McpActivities, parse_mcp_config
from treadle.workflows.agent.messages.mcp import McpCallRequest, McpListRequest, McpToolList
from treadle.workflows.agent.messages.models import ToolResult

EVERY_TOOL = "add,echo,write_note,fail,crash,slow,big,pid,whoami"


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    """The file the test server reads its tool list from, on every listing and call."""
    path = tmp_path / "tools.txt"
    path.write_text(EVERY_TOOL)
    return path


@pytest.fixture
async def mcp(tools_file: Path) -> AsyncIterator[McpActivities]:
    """One stdio server ``test`` whose tool list follows ``tools_file``."""
    config = parse_mcp_config(
        {"servers": [stdio_entry("test", env=["MCP_TEST_TOOLS"], timeout_seconds=20)]}
    )
    async with McpActivities(config, environ={"MCP_TEST_TOOLS": str(tools_file)}) as activities:
        yield activities


async def listing(activities: McpActivities, refresh: bool = False) -> McpToolList:
    result: McpToolList = await ActivityEnvironment().run(
        activities.list_mcp_tools, McpListRequest(refresh=refresh)
    )
    return result


def request(tool: str, timeout: float | None = None, **arguments: Any) -> McpCallRequest:
    return McpCallRequest(
        server="test", tool=tool, arguments=arguments, call_id="c1", step=2, timeout_seconds=timeout
    )


async def failed_call(activities: McpActivities, call: McpCallRequest) -> ApplicationError:
    """The ApplicationError a call attempt fails with (what Temporal would retry)."""
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(activities.call_mcp_tool, call)
    return caught.value


async def test_a_slow_tool_over_its_timeout_fails_retryably_and_the_next_call_works(
    mcp: McpActivities,
) -> None:
    """Over its timeout a call fails with a retryable McpTimeoutError; the stuck session is
    replaced, so the retry (here: the next call) gets a fresh one and answers."""
    await listing(mcp)
    error = await failed_call(mcp, request("slow", timeout=0.5, seconds=30))
    assert error.type == "McpTimeoutError"
    assert not error.non_retryable
    assert error.message == "MCP server 'test' did not answer slow within 0.5s"
    answer = await mcp.call(request("add", a=1, b=1))
    assert (answer.success, answer.output) == (True, "2")
    assert mcp.sessions.opened == 2


async def test_a_long_call_heartbeats_while_it_waits(mcp: McpActivities) -> None:
    """While a tool runs, the attempt heartbeats (a third of the heartbeat timeout), saying what
    runs and for how long."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=1.5))
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    result: ToolResult = await env.run(mcp.call_mcp_tool, request("slow", seconds=1.6))
    assert result.output == "slept 1.6s"
    assert len(beats) >= 3
    assert beats[-1][-1].startswith("test/slow running for ")


async def test_servers_that_are_down_are_listed_unavailable_with_a_reason(
    tmp_path: Path, tools_file: Path
) -> None:
    """A missing program, a refused port, a process that never answers and one that exits are
    each one line in ``unavailable``; the healthy server is listed all the same."""
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]
    config = parse_mcp_config(
        {
            "servers": [
                stdio_entry("good", env=["MCP_TEST_TOOLS"]),
                {"name": "missing", "command": str(tmp_path / "no-such-server")},
                {"name": "refused", "url": f"http://127.0.0.1:{free_port()}/mcp"},
                {
                    "name": "silent",
                    "command": silent[0],
                    "args": silent[1:],
                    "list_timeout_seconds": 1,
                },
                {"name": "exits", "command": sys.executable, "args": ["-c", "pass"]},
            ]
        }
    )
    async with McpActivities(config, environ={"MCP_TEST_TOOLS": str(tools_file)}) as mcp:
        tools = await listing(mcp)
    assert tools.servers() == ("good",)
    assert tools.unavailable == {
        "missing": f"could not be started: {str(tmp_path / 'no-such-server')!r} not found",
        "refused": f"could not be reached at {config.servers[2].url}: "
        "All connection attempts failed",
        "silent": "did not complete the MCP handshake within 1s",
        "exits": "exited before completing the MCP handshake (see the worker's stderr)",
    }


async def test_a_listing_past_its_limit_names_the_configured_limit(tools_file: Path) -> None:
    """A server slow to list is reported with its list_timeout_seconds and the start's share
    of it, not with what was left of it when listing began (it read 3.71595s for 10s)."""
    config = parse_mcp_config(
        {
            "servers": [
                stdio_entry(
                    "slow", env=["MCP_TEST_TOOLS", "MCP_TEST_LIST_DELAY"], list_timeout_seconds=10
                ),
                stdio_entry("quick", env=["MCP_TEST_TOOLS"]),
            ]
        }
    )
    environ = {"MCP_TEST_TOOLS": str(tools_file), "MCP_TEST_LIST_DELAY": "30"}
    async with McpActivities(config, environ=environ) as mcp:
        tools = await listing(mcp)
    assert tools.servers() == ("quick",)  # the other server's tools are offered all the same
    why = tools.unavailable["slow"]
    assert why.startswith("did not list its tools within its list_timeout_seconds of 10s")
    assert "the run lists it again at a later step" in why


async def test_calling_a_server_that_is_down_fails_retryably(tmp_path: Path) -> None:
    """A call to a server that cannot be started is a retryable McpUnavailableError (Temporal
    retries; the workflow then turns it into an ERROR observation)."""
    config = parse_mcp_config({"servers": [{"name": "test", "command": str(tmp_path / "nope")}]})
    async with McpActivities(config) as mcp:
        error = await failed_call(mcp, request("add", a=1, b=2))
    assert error.type == "McpUnavailableError"
    assert not error.non_retryable
    assert error.message == (
        f"MCP server 'test' could not be started: {str(tmp_path / 'nope')!r} not found"
    )


async def test_listings_are_cached_per_worker_until_refreshed(
    mcp: McpActivities, tools_file: Path
) -> None:
    """A second listing answers from the cache; refresh asks the server and sees its change."""
    first = await listing(mcp)
    assert "mcp__test__echo" in first.names()
    tools_file.write_text("add,slow")
    cached = await listing(mcp)
    assert cached == first
    fresh = await listing(mcp, refresh=True)
    assert set(fresh.names()) == {"mcp__test__add", "mcp__test__slow"}
    assert fresh.listed_at > first.listed_at
    assert mcp.sessions.opened == 1


async def test_a_vanished_tool_is_an_error_observation_and_updates_the_cache(
    mcp: McpActivities, tools_file: Path
) -> None:
    """A tool the server stopped offering since the run listed it: 'no longer offered', and
    the worker's cached listing no longer has it."""
    assert "mcp__test__echo" in (await listing(mcp)).names()
    tools_file.write_text("add")
    result: ToolResult = await ActivityEnvironment().run(
        mcp.call_mcp_tool, request("echo", text="hi")
    )
    assert result == ToolResult(
        success=False, output="ERROR: tool echo is no longer offered by server test"
    )
    assert (await listing(mcp)).names() == ("mcp__test__add",)


async def test_a_server_killed_between_calls_is_started_again(mcp: McpActivities) -> None:
    """A stdio server that died while idle is noticed before the next call, which starts a new
    one instead of failing."""
    pid = int((await mcp.call(request("pid"))).output)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60  # a watchdog against a hang, not a measured duration
    while mcp.sessions.is_open("test"):
        assert time.monotonic() < deadline, "the dead server's session still looks open"
        await asyncio.sleep(0.02)
    answer = await mcp.call(request("add", a=20, b=22))
    assert (answer.success, answer.output) == (True, "42")
    assert int((await mcp.call(request("pid"))).output) != pid
    assert mcp.sessions.opened == 2


async def test_a_server_killed_during_a_call_fails_the_attempt_retryably(
    mcp: McpActivities,
) -> None:
    """The call in flight when its server dies fails with a retryable error, not a hang."""
    pid = int((await mcp.call(request("pid"))).output)
    attempt = asyncio.create_task(failed_call(mcp, request("slow", seconds=30)))
    await asyncio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    error = await asyncio.wait_for(attempt, 60)  # a watchdog against a hang
    assert error.type == "McpUnavailableError"
    assert not error.non_retryable
    assert error.message == "MCP server 'test' closed the connection during slow"
