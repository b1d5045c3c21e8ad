"""Typed answers: ``output_schema`` makes the final answer JSON that validates, asked for as the
provider's structured output (OpenAI's ``response_format``) or a forced ``final_answer`` tool
(Anthropic, or ``output_mode: tool``); an invalid answer goes back to the model with what is
wrong, a bounded number of times; ``AgentResult.output`` holds the parsed answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.harness import Harness, tool_messages
from treadle.workflows.agent.messages.models import AgentConfig, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "files": {"type": "integer", "minimum": 0}},
    "required": ["title", "files"],
}
GOOD = {"title": "Workspace notes", "files": 2}


async def test_a_valid_typed_answer_the_first_time_is_the_output(harness: Harness) -> None:
    """OpenAI protocol: the request carries the schema as ``response_format`` (the tools still
    offered, with ``tool_choice: auto``); the JSON reply is the answer and ``output``."""
    model = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": json.dumps(GOOD)},
    )
    handle = await harness.start(model, output_schema=SCHEMA)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.output == GOOD
    assert json.loads(result.answer or "") == GOOD
    bodies = harness.requests(model)
    assert len(bodies) == 2
    for body in bodies:
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "final_answer", "schema": SCHEMA},
        }
        assert body["tool_choice"] == "auto"
        assert "final_answer" not in [t["function"]["name"] for t in body["tools"]]


async def test_anthropic_answers_through_a_forced_final_answer_tool(harness: Harness) -> None:
    """Anthropic has no structured output: a ``final_answer`` tool with the schema as its input
    schema, and ``tool_choice: any``; the call's arguments are the answer, and the conversation
    stays well-formed for the strict server (tools before the answer run as usual)."""
    model = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"tool_calls": [{"name": "final_answer", "arguments": GOOD}]},
        provider="anthropic",
    )
    handle = await harness.start(model, output_schema=SCHEMA)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.output == GOOD
    for body in harness.requests(model):
        assert body["tool_choice"] == {"type": "any"}
        [final] = [t for t in body["tools"] if t["name"] == "final_answer"]
        assert final["input_schema"] == SCHEMA
        assert "response_format" not in body


async def test_a_long_final_answer_stays_whole_through_the_content_door(
    harness: Harness,
) -> None:
    """The content door stores long tool-call arguments by reference, but a ``final_answer``
    call is the run's answer: it reaches the workflow whole, validates and is the output."""
    long_title = "notes " * 400
    model = harness.script(
        {"tool_calls": [{"name": "final_answer", "arguments": {**GOOD, "title": long_title}}]},
        provider="anthropic",
    )
    handle = await harness.start(model, output_schema=SCHEMA)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.output == {**GOOD, "title": long_title}


@pytest.mark.replay_corpus
async def test_an_invalid_answer_goes_back_with_the_validation_error(harness: Harness) -> None:
    """A reply that breaks the schema is not the answer: the model is shown what is wrong, and
    its corrected reply is."""
    model = harness.script(
        {"content": json.dumps({"title": "notes", "files": "two"})},
        {"content": json.dumps(GOOD)},
    )
    handle = await harness.start(model, output_schema=SCHEMA)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.output == GOOD
    second = harness.requests(model)[1]
    shown = json.dumps(second["messages"])
    assert "does not match the required JSON Schema" in shown
    assert "at $.files: 'two' is not of type 'integer'" in shown
    trace = await handle.query(AgentWorkflow.trace)
    assert "AnswerInvalid" in [e.event for e in trace.entries]


@pytest.mark.replay_corpus
async def test_an_invalid_final_answer_call_gets_the_error_as_its_result(
    harness: Harness,
) -> None:
    """In tool mode an invalid ``final_answer`` call is answered with the validation error as
    the call's result (the protocol's call/result pairing holds), then the corrected call ends
    the run. A non-object schema is wrapped as ``{"answer": ...}``."""
    schema = {"type": "array", "items": {"type": "string"}, "minItems": 1}
    model = harness.script(
        {"tool_calls": [{"name": "final_answer", "arguments": {"answer": []}}]},
        {"tool_calls": [{"name": "final_answer", "arguments": {"answer": ["a.md"]}}]},
    )
    handle = await harness.start(model, output_schema=schema, output_mode="tool")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.output == ["a.md"]
    first, second = harness.requests(model)
    assert first["tool_choice"] == "required"
    [final] = [t for t in first["tools"] if t["function"]["name"] == "final_answer"]
    assert final["function"]["parameters"]["properties"]["answer"] == schema
    [error] = tool_messages(second)
    assert error["content"].startswith("ERROR: The final answer does not match")
    assert "should be non-empty" in error["content"]


async def test_invalid_beyond_the_bound_ends_the_run_saying_why(harness: Harness) -> None:
    """``output_retries`` corrections, then the run ends in error with the schema's complaint."""
    model = harness.script({"content": "Here are the notes you asked for."})
    handle = await harness.start(model, output_schema=SCHEMA, output_retries=1)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert "did not match output_schema after 1 correction(s)" in result.error
    assert "not JSON" in result.error
    assert result.output is None
    assert len(harness.requests(model)) == 2


async def test_a_script_that_answers_text_to_a_forced_tool_is_refused(harness: Harness) -> None:
    """The scripted server is as strict as a real one: text alone cannot answer a request that
    forces a tool call, and says the script is wrong."""
    model = harness.script({"content": json.dumps(GOOD)}, provider="anthropic")
    handle = await harness.start(model, output_schema=SCHEMA, model_max_attempts=1)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert "forces a tool call" in (result.error or "")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "objekt"}, "not a valid JSON Schema"),
        (["not", "a", "schema"], "valid dictionary"),
    ],
)
def test_a_schema_that_is_no_json_schema_is_refused_at_start(schema: Any, message: str) -> None:
    """A bad schema is a config error when the run is started, not a run that can never end."""
    with pytest.raises(ValueError, match=message):
        AgentConfig.model_validate({"output_schema": schema})
