"""MCP tools' input schemas are stored once and referenced: a listing and every model request
carry a key per tool, the model sees the whole schema, and a schema too large or unusable is
refused for its tool alone, with a trace line, while the server's other tools are offered.

Against a real MCP server process (``tests/mcp/schema_server.py``), a real dev server and the
scripted model."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from tests.mcp.schema_server import MARKER, entry, padded_schema
from tests.support.harness import tool_messages
from tests.support.mcp_runs import McpHarness, call, offered
from tests.support.stream import events
from treadle.activities.mcp import McpActivities, parse_mcp_config
from treadle.activities.mcp.schemas import SchemaRefused, usable_schema
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.store.conversation import ConversationStore
from treadle.workflows.agent.messages.mcp import MAX_SCHEMA_BYTES, McpListRequest, McpToolList
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    ModelRequest,
    RunStatus,
    ToolCall,
    ToolSchema,
)
from treadle.workflows.agent.parts.toolbox import Toolbox
from treadle.workflows.agent.workflow import AgentWorkflow

OBJECT = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


async def listing(activities: McpActivities, refresh: bool = False) -> McpToolList:
    result: McpToolList = await ActivityEnvironment().run(
        activities.list_mcp_tools, McpListRequest(refresh=refresh)
    )
    return result


def stored_blobs(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file()}


# --------------------------------------------------------------------------------------------
# Which schemas can be offered
# --------------------------------------------------------------------------------------------


def test_an_object_schema_with_local_references_is_usable() -> None:
    """A valid object schema is offered as its compact JSON, $refs into itself included."""
    schema = {
        "type": "object",
        "properties": {"when": {"$ref": "#/$defs/Time"}, "all": {"$ref": "#"}},
        "$defs": {"Time": {"type": "string", "format": "date-time"}},
    }
    assert json.loads(usable_schema(schema)) == schema
    assert usable_schema(OBJECT) == json.dumps(OBJECT, separators=(",", ":"))


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (padded_schema(MAX_SCHEMA_BYTES + 1_000), "over the 64 KiB limit"),
        ({"type": "array", "items": {"type": "string"}}, 'not an object schema (type "array")'),
        ({"type": ["object", "null"]}, "not an object schema"),
        ({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}, "outside the schema"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Gone"}}}, "cannot be resolved"),
        ({"type": "object", "properties": {"a": {"$ref": 7}}}, "not a string"),
        ({"type": "object", "properties": {"a": {"maximum": float("nan")}}}, "not plain JSON"),
        ({"type": "object", "description": "lone \ud800 surrogate"}, "not plain JSON"),
        ({"type": "object", "properties": ["a"]}, "properties are not an object"),
        ({"type": "object", "required": "a"}, "required is not a list of names"),
    ],
)
def test_a_schema_too_large_or_unusable_is_refused_saying_why(
    schema: dict[str, Any], reason: str
) -> None:
    """Each way a schema cannot reach a provider has its own one-line reason."""
    with pytest.raises(SchemaRefused, match="its input schema") as refused:
        usable_schema(schema)
    assert reason in str(refused.value)


def test_a_schema_nested_too_deeply_is_refused() -> None:
    """Nesting that providers (and encoders) give up on is refused, not sent."""
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(SchemaRefused, match="nested"):
        usable_schema(deep)


def test_a_model_request_of_the_old_shape_still_parses_and_serialises_as_before() -> None:
    """Recorded requests carried schemas inline: they parse, and an inline schema serialises
    exactly as before the reference existed (the run's size checks measure it)."""
    old = {
        "model": "openai:m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": ["read_file"],
        "tool_schemas": [{"name": "mcp__calc__add", "description": "Add.", "parameters": OBJECT}],
    }
    request = ModelRequest.model_validate_json(json.dumps(old))
    [schema] = request.tool_schemas
    assert (schema.parameters, schema.parameters_ref) == (OBJECT, None)
    assert json.loads(schema.model_dump_json()) == old["tool_schemas"][0]  # type: ignore[index]
    by_key = ToolSchema(name="mcp__calc__add", parameters_ref="ab" * 32, parameters_chars=60)
    assert ToolSchema.model_validate_json(by_key.model_dump_json()) == by_key
    assert (
        by_key.prompt_chars()
        == len(ToolSchema(name="mcp__calc__add", parameters={}).model_dump_json()) - 2 + 60
    )


def test_a_call_of_a_refused_tool_is_an_error_saying_why() -> None:
    """The model never sees a refused tool; should it call one anyway, it reads why."""
    listed = McpToolList(
        unavailable={"mcp__big__huge": "its input schema is 9.5 MiB", "down": "not started"},
        listed_at=datetime.now(UTC),
    )
    box = Toolbox(AgentConfig(mcp_servers=["big", "down"]), listed)
    checked = box.check(ToolCall(id="c1", name="mcp__big__huge", arguments="{}"))
    assert checked.error == (
        "ERROR: tool mcp__big__huge is not offered in this run: refused by the worker, its "
        "input schema is 9.5 MiB"
    )
    other = box.check(ToolCall(id="c2", name="mcp__down__x", arguments="{}"))
    assert other.error == (
        "ERROR: tool mcp__down__x is not offered in this run (MCP servers unavailable: down)"
    )


# --------------------------------------------------------------------------------------------
# The listing activity: stored once, refused per tool
# --------------------------------------------------------------------------------------------


async def test_a_listing_stores_each_schema_once_and_refuses_only_the_unusable_tools(
    tmp_path: Path,
) -> None:
    """The listing names each schema by its store key; a refreshed listing stores nothing new;
    tools whose schema is too large or unusable are refused with why, the others listed."""
    root = tmp_path / "store"
    config = parse_mcp_config({"servers": [entry("odd", "--broken", "--huge-bytes", "200000")]})
    async with McpActivities(config, store=ConversationStore(FileBlobStore(root))) as mcp:
        first = await listing(mcp)
        assert first.names() == ("mcp__odd__ping",)
        assert set(first.refused()) == {"mcp__odd__huge", "mcp__odd__remote", "mcp__odd__dangling"}
        assert "195 KiB, over the 64 KiB limit" in first.refused()["mcp__odd__huge"]
        assert "points outside the schema" in first.refused()["mcp__odd__remote"]
        assert "cannot be resolved" in first.refused()["mcp__odd__dangling"]
        assert first.servers_unavailable() == {}
        line = first.describe()
        assert line.startswith("1 MCP tool(s) from odd; refused: mcp__odd__huge: its input")
        [ping] = first.tools
        assert ping.schema_ref is not None and mcp.store is not None
        schema = json.loads(await mcp.store.get_text(ping.schema_ref))
        assert schema["properties"]["text"]["type"] == "string"
        blobs = stored_blobs(root)
        assert len(blobs) == 1  # the one usable schema; nothing for the refused ones
        again = await listing(mcp, refresh=True)
        assert again.tools == first.tools
        assert stored_blobs(root) == blobs


async def test_a_worker_without_a_store_lists_schemas_inline_under_the_same_checks() -> None:
    """Without a store there is nowhere to refer to: the schema travels inline, as before,
    and a schema over the limit is still refused."""
    config = parse_mcp_config({"servers": [entry("odd", "--huge-bytes", "200000")]})
    async with McpActivities(config) as mcp:
        tools = await listing(mcp)
    [ping] = tools.tools
    assert ping.schema_ref is None
    assert ping.input_schema["properties"]["text"]["type"] == "string"
    assert set(tools.refused()) == {"mcp__odd__huge"}


# --------------------------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------------------------


async def test_a_10_mb_schema_leaves_the_run_alive_and_the_servers_other_tools_offered(
    mcp_harness: McpHarness,
) -> None:
    """A server listing one 10 MB schema and one ordinary tool: the big one is refused with an
    ``mcp_tools`` line (ok=false, its name and why), the other is offered and works."""
    async with mcp_harness(entry("big", "--huge-bytes", str(10_000_000))) as h:
        model = h.script(
            {"tool_calls": [call("mcp__big__ping", text="still here")]},
            {"content": "the ping answered"},
        )
        handle = await h.start(model, mcp_servers=["big"])
        result: AgentResult = await handle.result()
        assert (result.status, result.answer) == (RunStatus.DONE, "the ping answered")
        first, second = h.requests(model)
        tools = offered(first)
        assert "mcp__big__huge" not in tools
        assert tools["mcp__big__ping"]["parameters"]["properties"]["text"]["type"] == "string"
        assert [m["content"] for m in tool_messages(second)] == ["pong: still here"]
        [listed] = [e for e in await events(handle) if e.kind == "mcp_tools"]
        assert listed.ok is False
        assert "refused: mcp__big__huge: its input schema is 9.5 MiB, over the 64 KiB" in (
            listed.text
        )
        trace = await handle.query(AgentWorkflow.trace)
        [line] = [e.data for e in trace.entries if e.event == "McpToolsListed"]
        assert line.startswith("1 MCP tool(s) from big; refused: mcp__big__huge")


async def test_a_schema_is_in_no_history_however_many_model_calls_offer_it(
    mcp_harness: McpHarness,
) -> None:
    """A 50 KB schema offered on each of 6 model calls: the model sees all of it every time,
    and the run's history holds none of its bytes (far less than 6 x 50 KB in all)."""
    size = 50_000
    async with mcp_harness(entry("wide", "--wide-bytes", str(size))) as h:
        steps = 5
        model = h.script(
            *({"tool_calls": [call("mcp__wide__wide", text=f"step {i}")]} for i in range(steps)),
            {"content": "done"},
        )
        handle = await h.start(model, mcp_servers=["wide"])
        assert (await handle.result()).status is RunStatus.DONE
        bodies = h.requests(model)
        assert len(bodies) == steps + 1
        for body in bodies:
            assert offered(body)["mcp__wide__wide"]["parameters"] == padded_schema(size)
        history = await handle.fetch_history()
        raw = b"".join(event.SerializeToString() for event in history.events)
        assert MARKER.encode() not in raw
        assert len(raw) < 2 * size
