"""Every schema the model is offered fits a grammar-constrained server (llama.cpp's limits):
length bounds past them are said in words, and checked by the tool instead."""

from __future__ import annotations

from typing import Any

from tests.support.harness import Harness, tool_messages
from treadle.activities.model import grammar_limits, openai_chat
from treadle.activities.tools import registry  # noqa: F401  (registers the example tools)
from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.models import (
    AgentResult,
    ChatMessage,
    ModelRequest,
    RunStatus,
    ToolSchema,
)

LLAMA_CPP_MAX_REPETITION = 2_000
"""``MAX_REPETITION_THRESHOLD`` in llama.cpp's ``src/llama-grammar.cpp``: ``x{m,n}`` with m or n
past it, or a repeated group whose rules times n pass it, is refused ("failed to parse grammar");
``common/json-schema-to-grammar.cpp`` writes maxLength/minLength/maxItems/minItems as ``{m,n}``."""
REPETITION_KEYWORDS = ("maxLength", "minLength", "maxItems", "minItems")


def _bounds(node: Any) -> list[int]:
    """Every repetition bound in a schema (data keywords' values included: stricter)."""
    if isinstance(node, list):
        return [bound for item in node for bound in _bounds(item)]
    if not isinstance(node, dict):
        return []
    found = [v for k, v in node.items() if k in REPETITION_KEYWORDS and isinstance(v, int)]
    return found + [bound for value in node.values() for bound in _bounds(value)]


def _request(**update: Any) -> ModelRequest:
    return ModelRequest(
        model="openai:m", messages=(ChatMessage(role="user", content="hi"),), **update
    )


def test_every_catalogue_tool_schema_is_offered_within_llama_cpp_repetition_limits() -> None:
    """Every built-in and registered tool, rendered as the OpenAI body sends it, has no
    repetition bound past llama.cpp's threshold (nor past our own, stricter limit)."""
    body = openai_chat.build_body(_request(tools=tuple(TOOLS)), "m")
    offered = {tool["function"]["name"]: tool["function"]["parameters"] for tool in body["tools"]}
    assert set(offered) == set(TOOLS)
    assert {"ask_client", "delegate"} <= set(offered)
    for name, schema in offered.items():
        assert grammar_limits.bounds_over_limit(schema) == [], name
        assert all(b <= grammar_limits.REPETITION_LIMIT for b in _bounds(schema)), name
    assert grammar_limits.REPETITION_LIMIT < LLAMA_CPP_MAX_REPETITION


def test_a_bound_left_out_of_the_schema_is_said_in_its_description() -> None:
    """ask_client's 2,000 and delegate's 20,000 characters reach the model in words."""
    body = openai_chat.build_body(_request(tools=("ask_client", "delegate")), "m")
    by_name = {tool["function"]["name"]: tool["function"]["parameters"] for tool in body["tools"]}
    what = by_name["ask_client"]["properties"]["what"]
    task = by_name["delegate"]["properties"]["task"]
    assert "maxLength" not in what and "(at most 2000 characters)" in what["description"]
    assert "maxLength" not in task and "(at most 20000 characters)" in task["description"]
    assert what["minLength"] == 1  # small bounds stay: they guide the model
    # The catalogue's own schema, which validates the call, still holds the bound.
    assert TOOLS["ask_client"].json_schema()["properties"]["what"]["maxLength"] == 2_000


def test_mcp_tool_and_typed_answer_schemas_are_offered_within_the_limit() -> None:
    """Schemas from outside the catalogue (an MCP server's, the run's output_schema) too."""
    huge: dict[str, Any] = {
        "type": "object",
        "properties": {
            "notes": {"type": "array", "items": {"type": "string", "maxLength": 50_000}},
            "tags": {"type": "array", "maxItems": 5_000, "default": ["x"]},
        },
    }
    body = openai_chat.build_body(
        _request(
            tool_schemas=(ToolSchema(name="remote", description="d", parameters=huge),),
            output_schema=huge,
        ),
        "m",
    )
    answer = body["response_format"]["json_schema"]["schema"]
    for schema in (body["tools"][0]["function"]["parameters"], answer):
        assert grammar_limits.bounds_over_limit(schema) == []
        assert schema["properties"]["tags"]["description"] == "at most 5000 items"
        assert schema["properties"]["tags"]["default"] == ["x"]
    assert huge["properties"]["tags"]["maxItems"] == 5_000  # the run's own schema untouched


async def test_a_value_past_a_bound_left_out_is_an_error_observation(harness: Harness) -> None:
    """A model that sends ask_client more than 2,000 characters gets an ERROR: observation
    naming the limit (the tool checks it), and the run goes on."""
    model = harness.script(
        {
            "tool_calls": [
                {"name": "ask_client", "arguments": {"kind": "question", "what": "x" * 2_001}}
            ]
        },
        {"content": "asked too much"},
    )
    result: AgentResult = await (await harness.start(model)).result()
    assert result.status is RunStatus.DONE, result.error
    first, second = harness.requests(model)
    (message,) = tool_messages(second)
    assert message["content"].startswith("ERROR: arguments for ask_client do not match")
    assert "2000 characters" in message["content"]
    for tool in first["tools"]:
        assert grammar_limits.bounds_over_limit(tool["function"]["parameters"]) == []
