"""Listing and calling a real MCP server's tools (tests/support/mcp_server.py), over stdio and over
streamable HTTP, through the two activities run by Temporal's ``ActivityEnvironment``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from tests.support.mcp_server import http_entry, http_server, stdio_entry
from tests.support.processes import ROOT, free_port
from treadle.activities.mcp import McpActivities, parse_mcp_config
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.store.conversation import ConversationStore
from treadle.workflows.agent.messages.mcp import McpCallRequest, McpListRequest, McpToolList
from treadle.workflows.agent.messages.models import ToolResult

SECRET = "hunter2"
ALL_TOOLS = {"add", "echo", "write_note", "fail", "crash", "slow", "meet", "big", "pid", "whoami"}


@pytest.fixture(scope="module")
def http_notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-http") / "notes.txt"


@pytest.fixture(scope="module")
def http_url(http_notes: Path) -> Iterator[str]:
    """The test server over streamable HTTP, requiring ``Authorization: Bearer hunter2``."""
    env = {"MCP_TEST_SECRET": SECRET, "MCP_TEST_NOTES": str(http_notes)}
    with http_server(free_port(), env) as url:
        yield url


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def mcp(
    transport: str, tmp_path: Path, http_url: str, http_notes: Path
) -> AsyncIterator[tuple[McpActivities, Path]]:
    """The activities with one server named ``test`` on ``transport``; and its notes file."""
    notes = tmp_path / "notes.txt"
    environ = {"MCP_TEST_NOTES": str(notes), "TEST_MCP_AUTH": f"Bearer {SECRET}"}
    if transport == "stdio":
        entry = stdio_entry("test", env=["MCP_TEST_NOTES"], timeout_seconds=20)
    else:
        entry = http_entry("test", http_url, headers_from_env={"Authorization": "TEST_MCP_AUTH"})
        notes = http_notes
    config = parse_mcp_config({"servers": [entry]})
    store = ConversationStore(FileBlobStore(tmp_path / "store"))
    async with McpActivities(config, environ=environ, store=store) as activities:
        yield activities, notes


async def listing(activities: McpActivities, **request: Any) -> McpToolList:
    result: McpToolList = await ActivityEnvironment().run(
        activities.list_mcp_tools, McpListRequest(**request)
    )
    return result


async def call(activities: McpActivities, tool: str, **arguments: Any) -> ToolResult:
    request = McpCallRequest(server="test", tool=tool, arguments=arguments, call_id="c1", step=1)
    result: ToolResult = await ActivityEnvironment().run(activities.call_mcp_tool, request)
    return result


async def test_listing_gives_namespaced_tools_with_schemas_and_annotations(
    mcp: tuple[McpActivities, Path],
) -> None:
    """Every tool is listed as mcp__test__<tool> with its annotation hints and its JSON schema,
    stored once in the worker's store and listed by key."""
    activities, _ = mcp
    tools = await listing(activities)
    assert tools.unavailable == {}
    assert set(tools.names()) == {f"mcp__test__{name}" for name in ALL_TOOLS}
    add = tools.find("mcp__test__add")
    assert add is not None
    assert (add.server, add.tool, add.description) == ("test", "add", "Add two integers.")
    assert add.schema_ref is not None and activities.store is not None
    schema = json.loads(await activities.store.get_text(add.schema_ref))
    assert add.schema_chars == len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))
    assert schema["type"] == "object"
    assert schema["properties"]["a"]["type"] == "integer"
    assert set(schema["required"]) == {"a", "b"}
    assert add.input_schema == {"type": "object", "properties": {}}  # a placeholder
    # readOnlyHint -> not mutating; not read-only -> mutating; destructiveHint false -> no
    # approval hint; no annotations at all -> mutating and destructive.
    flags = {t.tool: (t.mutating, t.needs_approval) for t in tools.tools}
    assert flags["add"] == (False, False)
    assert flags["write_note"] == (True, False)
    assert flags["fail"] == (True, True)
    assert add.timeout_seconds == activities.config.servers[0].timeout_seconds


async def test_read_only_and_mutating_tools_answer(mcp: tuple[McpActivities, Path]) -> None:
    """add and echo answer with their text; write_note changes the server's world."""
    activities, notes = mcp
    assert await call(activities, "add", a=2, b=40) == ToolResult(
        success=True, output="42", content_hashes={"mcp__test__add": _hash("42")}
    )
    echoed = await call(activities, "echo", text="héllo\nwörld")
    assert (echoed.success, echoed.output) == (True, "héllo\nwörld")
    written = await call(activities, "write_note", text="remember me")
    assert (written.success, written.output) == (True, "noted: remember me")
    assert "remember me" in notes.read_text()


async def test_a_failing_tool_is_an_error_observation(mcp: tuple[McpActivities, Path]) -> None:
    """isError results (a ToolError, an unexpected crash) come back as success=False data."""
    activities, _ = mcp
    failed = await call(activities, "fail")
    assert not failed.success
    assert failed.output == "ERROR: Error executing tool fail: the fail tool failed on purpose"
    crashed = await call(activities, "crash")
    assert (crashed.success, crashed.output) == (False, "ERROR: Error executing tool crash")


async def test_invalid_arguments_come_back_as_the_servers_schema_error(
    mcp: tuple[McpActivities, Path],
) -> None:
    """Arguments the server's schema refuses are an ERROR observation naming the fields."""
    activities, _ = mcp
    result = await call(activities, "add", a="not a number")
    assert not result.success
    assert result.output.startswith("ERROR: Error executing tool add: 2 validation errors")
    assert "\na\n" in result.output and "\nb\n" in result.output


async def test_a_long_output_is_capped_and_stored_like_built_in_tools(
    mcp: tuple[McpActivities, Path],
) -> None:
    """Over max_output_chars the text is cut; over the door's threshold it goes to the store and
    the result carries a preview and the reference."""
    activities, _ = mcp
    request = McpCallRequest(
        server="test", tool="big", arguments={"chars": 5000}, call_id="c", max_output_chars=3000
    )
    result: ToolResult = await ActivityEnvironment().run(activities.call_mcp_tool, request)
    assert result.success
    assert result.output_ref is not None
    assert activities.store is not None
    whole = await activities.store.get_text(result.output_ref)
    assert whole.startswith("0123456789" * 7)
    assert whole.endswith("\n[... 2000 more characters cut]")
    assert result.output_chars == len(whole)
    assert "characters stored, the model sees them" in result.output
    assert len(result.output) < 1000


async def test_a_server_not_configured_here_is_reported_not_raised(
    mcp: tuple[McpActivities, Path],
) -> None:
    """Listing an unknown server names it unavailable; calling it is an ERROR observation."""
    activities, _ = mcp
    tools = await listing(activities, servers=("test", "elsewhere"))
    assert tools.unavailable == {"elsewhere": "not configured on this worker (configured: test)"}
    assert tools.servers() == ("test",)
    request = McpCallRequest(server="elsewhere", tool="x", call_id="c")
    result: ToolResult = await ActivityEnvironment().run(activities.call_mcp_tool, request)
    assert result == ToolResult(
        success=False, output="ERROR: MCP server 'elsewhere' is not configured on this worker"
    )


async def test_one_session_serves_every_call(mcp: tuple[McpActivities, Path]) -> None:
    """Listings and calls reuse the worker's session: the server is started (or reached) once."""
    activities, _ = mcp
    await listing(activities)
    for n in range(5):
        assert (await call(activities, "add", a=n, b=n)).output == str(2 * n)
    assert activities.sessions.opened == 1
    assert activities.sessions.is_open("test")


async def test_parallel_calls_share_the_session_and_run_concurrently(
    mcp: tuple[McpActivities, Path],
) -> None:
    """Five calls at once are in the server together, over the one session: each waits until
    all five have arrived, which calls sent one after another never would."""
    activities, _ = mcp
    results = await asyncio.gather(
        *(call(activities, "meet", group="g", count=5) for _ in range(5))
    )
    assert [r.output for r in results] == ["met"] * 5
    assert activities.sessions.opened == 1


async def test_a_worker_without_mcp_servers_lists_none() -> None:
    """The activities with no config (what build_worker registers by default) list nothing."""
    async with McpActivities() as activities:
        tools = await listing(activities)
    assert (tools.tools, tools.unavailable) == ((), {})


def test_a_worker_without_mcp_servers_does_not_load_the_sdk() -> None:
    """worker.py imports the MCP activities but not the mcp SDK (a second of start-up) until
    a server is used."""
    code = "import sys, worker; print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'))"
    probe = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert probe.stdout.strip() == "[]", probe.stderr


async def test_only_the_variables_named_reach_a_stdio_server(tmp_path: Path) -> None:
    """env names the variables passed through; any other variable of the worker stays out."""
    config = parse_mcp_config(
        {
            "servers": [
                stdio_entry("told", env=["MCP_TEST_SECRET"]),
                stdio_entry("untold"),
            ]
        }
    )
    async with McpActivities(config, environ={"MCP_TEST_SECRET": "s3"}) as activities:
        for server, expected in (("told", "s3"), ("untold", "(unset)")):
            request = McpCallRequest(server=server, tool="whoami", call_id="c")
            result = await activities.call(request)
            assert result.output == expected


async def test_http_headers_come_from_the_workers_environment(http_url: str) -> None:
    """Without the header the server refuses (listed unavailable); with it, tools are listed."""
    config = parse_mcp_config(
        {
            "servers": [
                http_entry("open", http_url, headers_from_env={"Authorization": "AUTH"}),
                http_entry("closed", http_url),
            ]
        }
    )
    async with McpActivities(config, environ={"AUTH": f"Bearer {SECRET}"}) as activities:
        tools = await listing(activities)
    assert tools.servers() == ("open",)
    assert set(tools.unavailable) == {"closed"}
    assert tools.unavailable["closed"] == "refused the connection: HTTP 401 Unauthorized"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
