"""The names the model sees for MCP tools, and the pure MCP messages
(workflows/agent/messages/mcp.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import to_json

import treadle.activities.mcp
import treadle.workflows.agent.messages.mcp
from treadle.workflows.agent.messages.mcp import (
    TOOL_NAME,
    McpArgumentsError,
    McpCallRequest,
    McpToolInfo,
    McpToolList,
    call_target,
    check_server_name,
    is_mcp_name,
    namespaced_name,
    parse_arguments,
    unique_names,
)
from treadle.workflows.agent.messages.models import AgentConfig, ToolCall
from treadle.workflows.agent.parts.toolbox import Toolbox


def test_a_plain_name_is_prefixed_and_otherwise_unchanged() -> None:
    """mcp__<server>__<tool> when the tool's name already fits OpenAI's rule."""
    assert namespaced_name("github", "create_issue") == "mcp__github__create_issue"
    assert is_mcp_name("mcp__github__create_issue")
    assert not is_mcp_name("read_file")


@pytest.mark.parametrize(
    "tool",
    [
        "files.read",
        "a/b c",
        "ünïcødé",
        "x" * 128,
        "get_the_weather_forecast_for_a_city_by_its_name_and_country_code",
    ],
)
def test_every_name_fits_openai_and_keeps_its_origin_apart(tool: str) -> None:
    """Sanitised or cut names match ^[a-zA-Z0-9_-]{1,64}$ and carry a hash of the original."""
    name = namespaced_name("srv", tool)
    assert TOOL_NAME.match(name), name
    assert name.startswith("mcp__srv__")
    assert name != namespaced_name("srv", tool + "2")
    assert name != namespaced_name("other", tool)


def test_names_that_sanitise_alike_stay_different() -> None:
    """'a.b' and 'a/b' both sanitise to 'a_b', and to 'a_b' itself: three different names."""
    names = unique_names([("s", "a.b"), ("s", "a/b"), ("s", "a_b")])
    assert len(set(names.values())) == 3
    assert names[("s", "a_b")] == "mcp__s__a_b"


def test_unique_names_resolves_a_collision_deterministically() -> None:
    """A name already taken (a forced collision) gets a different hash; repeated pairs keep one."""
    first = namespaced_name("s", "x" * 100)
    names = unique_names([("s", "x" * 100), ("s", "x" * 100)])
    assert names == {("s", "x" * 100): first}


@pytest.mark.parametrize("bad", ["", "Upper", "a b", "a__b", "x" * 33, "dots.no"])
def test_server_names_that_cannot_namespace_are_refused(bad: str) -> None:
    """Server names are 1-32 of [a-z0-9_-] without '__' (which separates the parts)."""
    with pytest.raises(ValueError, match="is not a server name"):
        check_server_name(bad)


def test_tool_list_refuses_duplicate_names_and_finds_by_name() -> None:
    """A listing holds each model-facing name once; find() maps a name back to server and tool."""
    info = McpToolInfo(name="mcp__s__t", server="s", tool="t")
    listing = McpToolList(tools=(info,), listed_at=datetime.now(UTC))
    assert listing.find("mcp__s__t") == info
    assert listing.find("mcp__s__u") is None
    assert listing.servers() == ("s",)
    with pytest.raises(ValidationError, match="duplicate tool name"):
        McpToolList(tools=(info, info), listed_at=datetime.now(UTC))


def test_attempt_timeout_covers_connecting_the_call_and_a_grace() -> None:
    """The workflow's start-to-close timeout outlasts the activity's own timeouts."""
    info = McpToolInfo(
        name="mcp__s__t", server="s", tool="t", timeout_seconds=30, connect_timeout_seconds=5
    )
    assert info.attempt_timeout() == timedelta(seconds=45)
    assert info.attempt_timeout(100) == timedelta(seconds=115)


def test_call_request_is_small_typed_data() -> None:
    """A call request round-trips through JSON as the data converter sends it."""
    request = McpCallRequest(server="s", tool="t", arguments={"a": [1, 2]}, call_id="c1", step=3)
    assert McpCallRequest.model_validate_json(request.model_dump_json()) == request
    with pytest.raises(ValidationError):
        McpCallRequest(server="s", tool="t", call_id="")


def test_public_names_are_exported() -> None:
    """Both MCP modules' ``__all__`` lists names that exist, and only the activity class and the
    config are public on the activity side."""
    for module in (treadle.activities.mcp, treadle.workflows.agent.messages.mcp):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], module.__name__
    assert "McpActivities" in treadle.activities.mcp.__all__


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.sampled_from(['{"t": "\\ud800"}', '{"t": "\\udfff x"}']),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.text(max_size=8), inner, max_size=4)
            ),
            max_leaves=12,
        ).map(json.dumps),
    )
)
def test_model_arguments_for_mcp_tools_parse_or_are_refused_with_a_reason(text: str) -> None:
    """Whatever the model sends as an MCP call's arguments: a JSON object, or the one error
    the workflow turns into an ``ERROR:`` observation; a target is always a string."""
    try:
        value = parse_arguments("mcp__s__t", text)
    except McpArgumentsError as exc:
        assert "mcp__s__t" in str(exc)
    else:
        assert isinstance(value, dict)
        to_json(value)  # what parses can be sent as the activity's input
    assert isinstance(call_target(text), str)


def test_oversized_and_deeply_nested_arguments_are_refused() -> None:
    with pytest.raises(McpArgumentsError, match="cannot be sent"):
        parse_arguments("mcp__s__t", '{"text": "\\ud800"}')  # a lone surrogate
    with pytest.raises(McpArgumentsError, match="cannot be sent"):
        parse_arguments("mcp__s__t", '{"a": ' + "[" * 400 + "]" * 400 + "}")
    with pytest.raises(McpArgumentsError, match="at most"):
        parse_arguments("mcp__s__t", json.dumps({"x": "y" * 200_000}))
    with pytest.raises(McpArgumentsError, match="not valid JSON"):
        parse_arguments("mcp__s__t", "[" * 40_000 + "]" * 40_000)
    assert call_target('{"path": "a.md", "text": "x"}') == "a.md"
    assert call_target('{"b": 1, "a": 2}') == '{"a":2,"b":1}'
    assert call_target("{}") == "" and call_target("nope") == ""


# --------------------------------------------------------------------------------------------
# One toolbox: a call of any kind is checked once (workflows/agent/parts/toolbox.py)
# --------------------------------------------------------------------------------------------


def _box(**config: object) -> Toolbox:
    listed = McpToolList(
        tools=(
            McpToolInfo(
                name="mcp__s__fetch", server="s", tool="fetch", mutating=False, needs_approval=False
            ),
        ),
        unavailable={"down": "not running"},
        listed_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return Toolbox(AgentConfig.model_validate({"mcp_servers": ["s", "down"], **config}), listed)


def test_the_toolbox_checks_a_call_of_any_kind_once() -> None:
    """A catalogue call is validated and its target derived; an MCP call is a JSON object with
    its target; both carry the tool they name and the arguments a human would see."""
    box = _box()
    write = box.check(
        ToolCall(id="a", name="write_file", arguments='{"path": "a.md", "content": "x"}')
    )
    assert write.error is None and write.tool is not None and write.tool.runs == "activity"
    assert write.arguments == {"path": "a.md", "content": "x"} and write.target == "a.md"
    assert json.loads(write.request_arguments()) == write.arguments
    fetch = box.check(ToolCall(id="b", name="mcp__s__fetch", arguments='{"url": "https://x"}'))
    assert fetch.error is None and fetch.tool is not None and fetch.tool.runs == "mcp"
    assert fetch.target == "https://x" and fetch.progress_target == "https://x"
    phase = box.check(ToolCall(id="c", name="start_phase", arguments='{"description": "d"}'))
    assert phase.tool is not None and phase.tool.runs == "workflow"
    assert [t.name for t in box.offered_mcp()] == ["mcp__s__fetch"]
    assert "write_file" in box.offered_names() and "mcp__s__fetch" not in box.approval_required()


def test_a_call_the_toolbox_refuses_says_why() -> None:
    """Bad arguments, an unknown tool and an MCP tool no listed server offers are refused with
    the reason the model reads; an unoffered MCP call's arguments still parse (a human may be
    asked about it), a malformed call's do not."""
    box = _box()
    bad = box.check(ToolCall(id="a", name="write_file", arguments='{"path": 1}'))
    assert bad.error is not None and bad.error.startswith("ERROR: arguments for write_file")
    assert bad.arguments is None and bad.progress_target == "write_file"
    unknown = box.check(ToolCall(id="b", name="no_such_tool"))
    assert unknown.error is not None and "unknown tool 'no_such_tool'" in unknown.error
    gone = box.check(ToolCall(id="c", name="mcp__down__x", arguments='{"path": "p"}'))
    assert gone.error == (
        "ERROR: tool mcp__down__x is not offered in this run (MCP servers unavailable: down)"
    )
    assert gone.arguments == {"path": "p"} and gone.target == "p"
    modified = box.check(ToolCall(id="d", name="write_file"), {"path": "b.md", "content": ""})
    assert modified.error is None and modified.target == "b.md"
    assert _box(blacklisted_tools=["mcp__s__fetch"]).offered_mcp() == ()
