"""MCP tools inside real agent runs: a worker with real MCP servers
(``tests/support/mcp_server.py``, over stdio and streamable HTTP), a scripted model speaking the
OpenAI protocol, and the run offering, approving, refusing, calling and tracking the servers'
tools like any other."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.harness import tool_messages
from tests.support.mcp_runs import McpHarness, call, offered
from tests.support.mcp_server import http_entry, http_server, stdio_entry
from tests.support.processes import free_port
from tests.support.stream import events
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    ApproveSignal,
    RejectSignal,
    RunStatus,
)
from treadle.workflows.agent.workflow import AgentWorkflow


async def trace_data(handle: Any, event: str) -> list[str]:
    trace = await handle.query(AgentWorkflow.trace)
    return [e.data for e in trace.entries if e.event == event]


@pytest.mark.replay_corpus
async def test_a_run_offers_and_calls_a_stdio_servers_tools(mcp_harness: McpHarness) -> None:
    async with mcp_harness(stdio_entry("calc")) as h:
        model = h.script(
            {"tool_calls": [call("mcp__calc__add", a=2, b=3), call("mcp__calc__echo", text="hi")]},
            {"content": "2 + 3 is 5"},
        )
        handle = await h.start(model, mcp_servers=["calc"])
        result: AgentResult = await handle.result()
        assert (result.status, result.answer) == (RunStatus.DONE, "2 + 3 is 5")
        first, second = h.requests(model)
        tools = offered(first)
        # Offered with the server's own schema and description, beside the built-in tools.
        assert tools["mcp__calc__add"]["description"] == "Add two integers."
        assert set(tools["mcp__calc__add"]["parameters"]["properties"]) == {"a", "b"}
        assert "read_file" in tools
        assert [m["content"] for m in tool_messages(second)] == ["5", "hi"]
        [listed] = await trace_data(handle, "McpToolsListed")
        assert listed.startswith("10 MCP tool(s) from calc")
        kinds = [(e.kind, e.ok) for e in await events(handle) if e.kind == "mcp_tools"]
        assert kinds == [("mcp_tools", True)]
        finished = [e for e in await events(handle) if e.kind == "tool_finished"]
        assert {(e.tool, e.ok) for e in finished} == {
            ("mcp__calc__add", True),
            ("mcp__calc__echo", True),
        }
        # A call's target (progress tracking, one-line summaries) is its arguments as compact
        # JSON when none of them names a path, URL, command or the like.
        assert {e.target for e in finished} == {'{"a":2,"b":3}', '{"text":"hi"}'}
        # Its server answered: no listing again, and so no patch marker to pay for.
        assert patch_markers(await handle.fetch_history()) == []


async def test_a_run_calls_a_streamable_http_servers_tool(mcp_harness: McpHarness) -> None:
    port = free_port()
    with http_server(port, {}) as url:
        async with mcp_harness(http_entry("web", url)) as h:
            model = h.script(
                {"tool_calls": [call("mcp__web__echo", text="over http")]},
                {"content": "done"},
            )
            handle = await h.start(model, mcp_servers="*")
            assert (await handle.result()).status is RunStatus.DONE
            [_, second] = h.requests(model)
            assert [m["content"] for m in tool_messages(second)] == ["over http"]


async def test_the_servers_hints_decide_approval_unless_the_run_says_otherwise(
    mcp_harness: McpHarness, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    entry = stdio_entry("box", env=["MCP_TEST_NOTES"])
    os.environ["MCP_TEST_NOTES"] = str(notes)
    try:
        async with mcp_harness(entry) as h:
            # ``crash`` carries no annotations: it may change anything, so it waits; ``echo``
            # is read-only and runs at once; ``write_note`` is marked non-destructive.
            model = h.script(
                {
                    "tool_calls": [
                        call("mcp__box__echo", text="a"),
                        call("mcp__box__crash"),
                        call("mcp__box__write_note", text="kept"),
                    ]
                },
                {"content": "ok"},
            )
            handle = await h.start(model, mcp_servers=["box"])
            status = await h.wait_for_state(handle, "WaitingForHuman")
            assert [p.tool for p in status.pending_approvals] == ["mcp__box__crash"]
            await handle.signal(AgentWorkflow.reject, RejectSignal(reason="not today"))
            assert (await handle.result()).status is RunStatus.DONE
            observations = [m["content"] for m in tool_messages(h.requests(model)[1])]
            assert observations[0] == "a"
            assert "not today" in observations[1]
            assert observations[2] == "noted: kept"
            assert notes.read_text() == "kept\n"

            # ``all``: every MCP call waits, the read-only one too; approved, it runs.
            model = h.script({"tool_calls": [call("mcp__box__echo", text="b")]}, {"content": "k"})
            handle = await h.start(model, mcp_servers=["box"], mcp_approval="all")
            status = await h.wait_for_state(handle, "WaitingForHuman")
            assert [p.arguments for p in status.pending_approvals] == [{"text": "b"}]
            await handle.signal(AgentWorkflow.approve, ApproveSignal())
            assert (await handle.result()).status is RunStatus.DONE
            assert [m["content"] for m in tool_messages(h.requests(model)[1])] == ["b"]
    finally:
        os.environ.pop("MCP_TEST_NOTES", None)


async def test_a_modified_mcp_call_runs_with_the_humans_arguments(
    mcp_harness: McpHarness,
) -> None:
    async with mcp_harness(stdio_entry("calc")) as h:
        model = h.script({"tool_calls": [call("mcp__calc__add", a=1, b=1)]}, {"content": "ok"})
        handle = await h.start(
            model, mcp_servers=["calc"], require_approval=["mcp__calc__add"], mcp_approval="listed"
        )
        status = await h.wait_for_state(handle, "WaitingForHuman")
        assert [p.arguments for p in status.pending_approvals] == [{"a": 1, "b": 1}]
        await handle.signal("modify", {"arguments": {"a": 40, "b": 2}})
        assert (await handle.result()).status is RunStatus.DONE
        assert [m["content"] for m in tool_messages(h.requests(model)[1])] == ["42"]


async def test_blacklisted_and_unoffered_mcp_tools_are_error_observations(
    mcp_harness: McpHarness,
) -> None:
    async with mcp_harness(stdio_entry("calc")) as h:
        model = h.script(
            {"tool_calls": [call("mcp__calc__echo", text="x")]},
            {"tool_calls": [call("mcp__calc__nope"), call("mcp__other__add", a=1, b=2)]},
            {"tool_calls": [{"name": "mcp__calc__add", "arguments": "[1, 2]"}]},
            {"content": "gave up"},
        )
        handle = await h.start(
            model,
            mcp_servers=["calc"],
            blacklisted_tools=["mcp__calc__echo"],
            mcp_approval="listed",
        )
        assert (await handle.result()).status is RunStatus.DONE
        first, second, third, fourth = h.requests(model)
        assert "mcp__calc__echo" not in offered(first) and "mcp__calc__add" in offered(first)
        assert tool_messages(second)[0]["content"] == (
            "ERROR: tool mcp__calc__echo is not available in this run"
        )
        assert [m["content"] for m in tool_messages(third)[1:]] == [
            "ERROR: tool mcp__calc__nope is not offered in this run",
            "ERROR: tool mcp__other__add is not offered in this run",
        ]
        bad_arguments = tool_messages(fourth)[-1]
        assert bad_arguments["content"] == (
            "ERROR: arguments for mcp__calc__add must be a JSON object, not list"
        )


async def test_arguments_that_parse_but_cannot_be_sent_are_error_observations(
    mcp_harness: McpHarness,
) -> None:
    """A lone surrogate, nesting past the serialiser's depth, a call id no request accepts:
    each is the call's ERROR and the run goes on (none may fail its workflow task)."""
    deep = '{"text": ' + "[" * 400 + "]" * 400 + "}"
    async with mcp_harness(stdio_entry("calc")) as h:
        model = h.script(
            {
                "tool_calls": [
                    {"name": "mcp__calc__echo", "arguments": '{"text": "\\ud800"}'},
                    {"name": "mcp__calc__echo", "arguments": deep},
                    {"id": "c" * 250, "name": "mcp__calc__echo", "arguments": {"text": "x"}},
                ]
            },
            {"content": "survived"},
        )
        handle = await h.start(model, mcp_servers=["calc"], mcp_approval="listed")
        result: AgentResult = await handle.result()
        assert (result.status, result.answer) == (RunStatus.DONE, "survived")
        observations = [m["content"] for m in tool_messages(h.requests(model)[1])]
        assert observations[0].startswith("ERROR: arguments for mcp__calc__echo cannot be sent")
        assert observations[1].startswith("ERROR: arguments for mcp__calc__echo cannot be sent")
        assert observations[2].startswith("ERROR: mcp__calc__echo cannot be called: call_id")


@pytest.mark.replay_corpus
async def test_a_tool_that_vanishes_under_a_live_run_is_an_error_and_no_longer_offered(
    mcp_harness: McpHarness, tmp_path: Path
) -> None:
    tools_file = tmp_path / "tools.txt"
    tools_file.write_text("add,echo")
    os.environ["MCP_TEST_TOOLS"] = str(tools_file)
    try:
        async with mcp_harness(stdio_entry("calc", env=["MCP_TEST_TOOLS"])) as h:
            model = h.script(
                {"tool_calls": [call("mcp__calc__echo", text="still there?")]},
                {"content": "it went away"},
            )
            handle = await h.start(
                model,
                mcp_servers=["calc"],
                require_approval=["mcp__calc__echo"],
                mcp_approval="listed",
            )
            await h.wait_for_state(handle, "WaitingForHuman")
            tools_file.write_text("add")  # the server stops offering echo while the run waits
            await handle.signal(AgentWorkflow.approve, ApproveSignal())
            assert (await handle.result()).status is RunStatus.DONE
            first, second = h.requests(model)
            assert "mcp__calc__echo" in offered(first)
            assert tool_messages(second)[0]["content"] == (
                "ERROR: tool echo is no longer offered by server calc"
            )
            assert "mcp__calc__echo" not in offered(second)
            assert "mcp__calc__add" in offered(second)
            [vanished] = await trace_data(handle, "McpToolVanished")
            assert vanished.startswith("mcp__calc__echo")
    finally:
        os.environ.pop("MCP_TEST_TOOLS", None)


async def test_a_server_that_is_down_is_a_trace_line_not_a_failed_run(
    mcp_harness: McpHarness, tmp_path: Path
) -> None:
    down = {"name": "down", "command": str(tmp_path / "no-such-server"), "list_timeout_seconds": 2}
    async with mcp_harness(stdio_entry("calc"), down) as h:
        model = h.script(
            {"tool_calls": [call("mcp__down__anything"), call("mcp__calc__add", a=1, b=2)]},
            {"content": "worked around it"},
        )
        handle = await h.start(model, mcp_servers="*", mcp_approval="listed")
        result: AgentResult = await handle.result()
        assert (result.status, result.answer) == (RunStatus.DONE, "worked around it")
        [listed] = await trace_data(handle, "McpToolsListed")
        assert "from calc" in listed and "unavailable: down: could not be started" in listed
        [event] = [e for e in await events(handle) if e.kind == "mcp_tools"]
        assert event.ok is False
        assert [m["content"] for m in tool_messages(h.requests(model)[1])] == [
            "ERROR: tool mcp__down__anything is not offered in this run "
            "(MCP servers unavailable: down)",
            "3",
        ]


def patch_markers(history: Any) -> list[str]:
    """The patch markers a run's history holds (``workflow.patched`` on a new path)."""
    return [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]


@pytest.mark.replay_corpus
async def test_a_server_too_slow_at_its_first_listing_is_listed_again_and_its_tools_join(
    mcp_harness: McpHarness, tmp_path: Path
) -> None:
    """Issue 40: a server whose first listing missed its list_timeout_seconds (a server slow
    under load) is not lost for the run: it is listed again before the next step and its tools
    are offered from then on; meanwhile the model reads that it is not listed yet, why (the
    configured limit) and when it is asked again."""
    os.environ["MCP_TEST_SLOW_ONCE"] = str(tmp_path / "listed-once")
    try:
        entry = stdio_entry("calc", env=["MCP_TEST_SLOW_ONCE"], list_timeout_seconds=10)
        async with mcp_harness(entry) as h:
            model = h.script(
                {"tool_calls": [call("mcp__calc__add", a=2, b=3)]},
                {"tool_calls": [call("mcp__calc__add", a=2, b=3)]},
                {"content": "2 + 3 is 5"},
            )
            handle = await h.start(model, mcp_servers=["calc"])
            result: AgentResult = await handle.result()
            assert (result.status, result.answer) == (RunStatus.DONE, "2 + 3 is 5")
            first, second, third = h.requests(model)
            assert "mcp__calc__add" not in offered(first)
            assert "mcp__calc__add" in offered(second)
            assert [m["content"] for m in tool_messages(third)] == [
                "ERROR: tool mcp__calc__add is not offered in this run "
                "(MCP servers unavailable: calc)",
                "5",
            ]
            notes = [m["content"] for m in third["messages"] if m["role"] == "user"][1:]
            assert len(notes) == 2, notes
            assert notes[0].startswith(
                "MCP server(s) not listed: calc (did not list its tools within its "
                "list_timeout_seconds of 10s"
            )
            assert "the run lists them again before step 2" in notes[0]
            assert notes[1].startswith("MCP server(s) calc answered: offered from now on:")
            assert "mcp__calc__add" in notes[1]
            [again] = await trace_data(handle, "McpToolsRelisted")
            assert again.startswith("1 of 4 for calc: 10 MCP tool(s) from calc")
            kinds = [e.ok for e in await events(handle) if e.kind == "mcp_tools"]
            assert kinds == [False, True]
            assert patch_markers(await handle.fetch_history()) == ["core_patch"]
    finally:
        os.environ.pop("MCP_TEST_SLOW_ONCE", None)


async def test_a_server_that_stops_answering_ends_in_an_error_observation(
    mcp_harness: McpHarness,
) -> None:
    """The server goes away after the listing: the call's attempts fail, Temporal retries
    them, and once they run out the model reads an ERROR and the run goes on."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(http_server(free_port(), {}))
        entry = http_entry("web", url, list_timeout_seconds=2, timeout_seconds=2)
        async with mcp_harness(entry) as h:
            model = h.script(
                {"tool_calls": [call("mcp__web__add", a=1, b=2)]},
                {"content": "the server was gone"},
            )
            handle = await h.start(
                model,
                mcp_servers=["web"],
                require_approval=["mcp__web__add"],
                mcp_approval="listed",
                tool_max_attempts=2,
            )
            await h.wait_for_state(handle, "WaitingForHuman")
            stack.close()  # the server stops while the run waits for its approval
            await handle.signal(AgentWorkflow.approve, ApproveSignal())
            result: AgentResult = await handle.result()
            assert (result.status, result.answer) == (RunStatus.DONE, "the server was gone")
            [observation] = tool_messages(h.requests(model)[1])
            assert observation["content"].startswith("ERROR: mcp__web__add failed:")
            history = await handle.fetch_history()
            attempts = [
                e.activity_task_started_event_attributes.attempt
                for e in history.events
                if e.HasField("activity_task_started_event_attributes")
            ]
            assert max(attempts) == 2  # Temporal retried the call, as its policy says


async def test_a_slow_tool_times_out_into_an_error_observation(mcp_harness: McpHarness) -> None:
    async with mcp_harness(stdio_entry("calc", timeout_seconds=1)) as h:
        model = h.script(
            {"tool_calls": [call("mcp__calc__slow", seconds=30)]},
            {"content": "too slow"},
        )
        handle = await h.start(model, mcp_servers=["calc"], tool_max_attempts=2)
        result: AgentResult = await handle.result()
        assert result.status is RunStatus.DONE
        [observation] = tool_messages(h.requests(model)[1])
        assert observation["content"].startswith("ERROR: mcp__calc__slow failed:")
        assert "1" in observation["content"]


async def test_repeated_failing_mcp_calls_are_stuck(mcp_harness: McpHarness) -> None:
    async with mcp_harness(stdio_entry("calc")) as h:
        model = h.script(*[{"tool_calls": [call("mcp__calc__fail")]}] * 5, {"content": "x"})
        handle = await h.start(model, mcp_servers=["calc"], mcp_approval="listed", recovery="halt")
        result: AgentResult = await handle.result()
        assert result.status is RunStatus.HALTED
        assert "mcp__calc__fail" in (result.error or "")


def test_mcp_settings_are_checked_when_the_run_is_started() -> None:
    config = AgentConfig(mcp_servers="files, search", tools=["read_file", "mcp__files__read"])
    assert config.mcp_servers == ("files", "search")
    assert AgentConfig(mcp_servers="*", require_approval=["mcp__any__tool"]).mcp_servers == ("*",)
    with pytest.raises(ValidationError, match="not a server name"):
        AgentConfig(mcp_servers=["Files"])
    with pytest.raises(ValidationError, match="cannot be mixed"):
        AgentConfig(mcp_servers=["*", "files"])
    with pytest.raises(ValidationError, match="mcp_servers does not list"):
        AgentConfig(tools=["mcp__files__read"])
    with pytest.raises(ValidationError, match="unknown tool name"):
        AgentConfig(mcp_servers=["files"], tools=["mcp__files__bad.name"])
    with pytest.raises(ValidationError, match="mcp_approval"):
        AgentConfig(mcp_approval="sometimes")  # type: ignore[arg-type]
    # A blacklist may name any MCP tool: it only ever takes tools away.
    assert AgentConfig(blacklisted_tools=["mcp__x__y"]).blacklisted_tools == ("mcp__x__y",)
    assert json.loads(AgentConfig().model_dump_json())["mcp_servers"] == []


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_both_protocols_offer_tools_outside_the_catalogue_with_their_schemas(
    protocol: str,
) -> None:
    from treadle.activities.model import anthropic_messages, openai_chat
    from treadle.workflows.agent.messages.models import ChatMessage, ModelRequest, ToolSchema

    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    request = ModelRequest(
        model=f"{protocol}:m",
        messages=(ChatMessage(role="user", content="hi"),),
        tools=("read_file",),
        tool_schemas=(
            ToolSchema(name="mcp__s__find", description="Find things.", parameters=schema),
            # A name the catalogue already offers is offered once.
            ToolSchema(name="read_file", description="shadow", parameters={"type": "object"}),
        ),
    )
    if protocol == "openai":
        body = openai_chat.build_body(request, "m")
        tools = {t["function"]["name"]: t["function"] for t in body["tools"]}
        assert tools["mcp__s__find"]["parameters"] == schema
    else:
        body = anthropic_messages.build_body(request, "m")
        tools = {t["name"]: t for t in body["tools"]}
        assert tools["mcp__s__find"]["input_schema"] == schema
    assert list(tools) == ["read_file", "mcp__s__find"]
    assert tools["mcp__s__find"]["description"] == "Find things."
    assert tools["read_file"]["description"] != "shadow"
