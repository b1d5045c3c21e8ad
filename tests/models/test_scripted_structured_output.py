"""The scripted model server sees structured output and forced tool calls as the real APIs do:
it refuses a ``response_format`` or ``tool_choice`` they would refuse (400, in their words), and
a script that answers a forced tool call with text alone (which no real model can)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from treadle.scripted_model import ScriptedModelServer

TOOL = {"type": "function", "function": {"name": "final_answer", "parameters": {"type": "object"}}}
ANTHROPIC_TOOL = {"name": "final_answer", "input_schema": {"type": "object"}}
MESSAGES = [{"role": "user", "content": "Answer."}]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(
        {
            "models": {
                "text": [{"content": '{"a": 1}'}],
                "called": [{"tool_calls": [{"name": "final_answer", "arguments": {"a": 1}}]}],
            }
        }
    ) as server:
        yield server


def openai(server: ScriptedModelServer, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "text", "messages": MESSAGES} | body,
        timeout=10,
    )


def anthropic(server: ScriptedModelServer, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/messages",
        json={"model": "text", "max_tokens": 100, "messages": MESSAGES} | body,
        headers={"anthropic-version": "2023-06-01"},
        timeout=10,
    )


def test_a_json_schema_response_format_is_answered(server: ScriptedModelServer) -> None:
    """A well-formed ``response_format`` is taken, and recorded as sent."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "final_answer", "schema": {"type": "object"}},
    }
    reply = openai(server, response_format=response_format)
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == '{"a": 1}'
    assert server.requests[-1].body["response_format"] == response_format


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        (
            {"type": "json_schema", "json_schema": {"schema": {}}},
            "response_format.json_schema.name",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "array"}}},
            "response_format",
        ),
    ],
)
def test_a_response_format_openai_refuses_is_a_400(
    server: ScriptedModelServer, response_format: dict[str, Any], param: str
) -> None:
    """An unknown type, a schema missing or unnamed, a root that is no object: OpenAI's 400."""
    reply = openai(server, response_format=response_format)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == param


def test_tool_choice_needs_tools_and_known_names(server: ScriptedModelServer) -> None:
    """A tool choice without tools, naming no offered tool, or unknown: refused, both APIs."""
    assert openai(server, tool_choice="required").status_code == 400
    named = {"type": "function", "function": {"name": "other"}}
    assert openai(server, tools=[TOOL], tool_choice=named).status_code == 400
    assert openai(server, tools=[TOOL], tool_choice="sometimes").status_code == 400
    assert anthropic(server, tool_choice={"type": "any"}).status_code == 400
    unknown = {"type": "tool", "name": "other"}
    assert anthropic(server, tools=[ANTHROPIC_TOOL], tool_choice=unknown).status_code == 400


def test_text_alone_cannot_answer_a_forced_tool_call(server: ScriptedModelServer) -> None:
    """``required`` / ``any``: a scripted turn of text alone is the script's error, said."""
    forced = openai(server, tools=[TOOL], tool_choice="required")
    assert forced.status_code == 500
    assert "forces a tool call" in forced.json()["error"]["message"]
    forced = anthropic(server, tools=[ANTHROPIC_TOOL], tool_choice={"type": "any"})
    assert forced.status_code == 500
    called = openai(server, model="called", tools=[TOOL], tool_choice="required")
    assert called.status_code == 200
    [call] = called.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "final_answer"
