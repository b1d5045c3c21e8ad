"""Typed answers from a server without OpenAI's structured output (llama-cpp-python's: a 500 for
``json_schema`` and for ``tool_choice: "required"``): asked again at once as ``json_object``
with the schema, which both llama.cpp servers take, and remembered per worker and endpoint."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from tests.support.harness import Harness
from treadle.workflows.agent.messages.models import AgentResult, RunStatus

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "files": {"type": "integer", "minimum": 0}},
    "required": ["title", "files"],
}
GOOD = {"title": "Workspace notes", "files": 2}


def _like_llama_cpp(harness: Harness, *turns: Mapping[str, Any]) -> str:
    name = f"llama-{uuid.uuid4().hex[:10]}"
    harness.models.add_model(name, list(turns), like="llama.cpp")
    return f"openai:{name}"


def _format(body: dict[str, Any]) -> str | None:
    response_format = body.get("response_format")
    return response_format.get("type") if isinstance(response_format, dict) else None


async def test_a_typed_answer_refused_as_json_schema_is_asked_as_json_object(
    harness: Harness,
) -> None:
    """The 500 for json_schema is not the run's end: the same call asks json_object with the
    schema and its answer is the output; the worker's next run asks json_object from the start."""
    model = _like_llama_cpp(harness, {"content": json.dumps(GOOD)})
    first: AgentResult = await (await harness.start(model, output_schema=SCHEMA)).result()
    assert first.status is RunStatus.DONE, first.error
    assert first.output == GOOD
    bodies = harness.requests(model)
    assert _format(bodies[0]) == "json_schema"
    assert {_format(body) for body in bodies[1:]} == {"json_object"}
    assert bodies[-1]["response_format"]["schema"] == SCHEMA
    assert bodies[-1]["tool_choice"] == "auto"  # the run's tools are still offered
    asked = len(bodies)

    second: AgentResult = await (await harness.start(model, output_schema=SCHEMA)).result()
    assert second.output == GOOD
    later = harness.requests(model)[asked:]
    assert later and all(_format(body) == "json_object" for body in later)


async def test_a_required_final_answer_call_refused_is_asked_as_json_object(
    harness: Harness,
) -> None:
    """output_mode tool: the 500 for tool_choice required is followed by a request without the
    final_answer tool, whose schema is the json_object's, and the JSON text is the answer."""
    model = _like_llama_cpp(harness, {"content": json.dumps(GOOD)})
    handle = await harness.start(model, output_schema=SCHEMA, output_mode="tool")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.output == GOOD
    refused, *asked = harness.requests(model)
    assert refused["tool_choice"] == "required"
    assert asked
    last = asked[-1]
    assert last["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert last["tool_choice"] == "auto"
    assert "final_answer" not in [tool["function"]["name"] for tool in last["tools"]]


async def test_a_server_that_takes_json_schema_is_never_asked_otherwise(harness: Harness) -> None:
    """OpenAI's own behaviour is untouched: one request, json_schema, no fallback."""
    model = harness.script({"content": json.dumps(GOOD)})
    result: AgentResult = await (await harness.start(model, output_schema=SCHEMA)).result()
    assert result.output == GOOD
    (body,) = harness.requests(model)
    assert _format(body) == "json_schema"


async def test_a_busy_server_is_retried_not_asked_another_form(harness: Harness) -> None:
    """A 503 says nothing of the request's form: the attempt is retried as it was."""
    model = harness.script({"content": json.dumps(GOOD), "errors": [{"status": 503}]})
    result: AgentResult = await (await harness.start(model, output_schema=SCHEMA)).result()
    assert result.output == GOOD
    assert [_format(body) for body in harness.requests(model)] == ["json_schema"] * 2
