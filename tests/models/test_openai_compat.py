"""What strict OpenAI-compatible servers (llama.cpp's, LiteLLM's pass-through) need from a
request, and what they send back that is not an answer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from tests.support.harness import Harness
from treadle.activities.errors import ModelConnectionError
from treadle.activities.model.openai_chat import ChunkAssembler, build_body
from treadle.activities.model.payload import DEFAULT_MAX_TOKENS
from treadle.activities.model.streaming import ServerSentEvent
from treadle.workflows.agent.messages.models import (
    AgentResult,
    ChatMessage,
    ModelRequest,
    RunStatus,
    ToolCall,
)

CALL = ToolCall(id="call_1", name="read_file", arguments='{"path": "a.txt"}')
MESSAGES = (
    ChatMessage(role="user", content="read a.txt"),
    ChatMessage(role="assistant", content=None, tool_calls=(CALL,)),
    ChatMessage(role="tool", tool_call_id="call_1", content="hello"),
)


def test_tools_are_offered_with_tool_choice_auto() -> None:
    """A server that renders tools only when asked (llama.cpp) is asked: tool_choice is auto."""
    body = build_body(ModelRequest(model="openai:m", messages=MESSAGES, tools=("read_file",)), "m")
    assert body["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in body["tools"]] == ["read_file"]


def test_no_tool_choice_without_tools() -> None:
    """tool_choice without tools is an error on OpenAI: it is sent only with them."""
    body = build_body(ModelRequest(model="openai:m", messages=MESSAGES), "m")
    assert "tool_choice" not in body and "tools" not in body


def test_an_assistant_message_with_tool_calls_has_text_content_never_null() -> None:
    """Chat templates that fail on ``"content": null`` get an empty string beside tool calls."""
    body = build_body(ModelRequest(model="openai:m", messages=MESSAGES), "m")
    assistant = body["messages"][1]
    assert assistant["content"] == "" and assistant["tool_calls"][0]["id"] == "call_1"
    assert all(m["content"] is not None for m in body["messages"])


def test_every_call_sends_an_output_limit() -> None:
    """A model that never stops is cut by its server: every call names max_tokens."""
    plain = build_body(ModelRequest(model="openai:m", messages=MESSAGES), "m")
    capped = build_body(ModelRequest(model="openai:m", messages=MESSAGES, max_tokens=77), "m")
    assert plain["max_tokens"] == DEFAULT_MAX_TOKENS
    assert capped["max_tokens"] == 77


def test_confidence_asks_for_top_logprobs() -> None:
    """logprobs alone returns nothing on some servers; top_logprobs makes them send them."""
    body = build_body(ModelRequest(model="openai:m", messages=MESSAGES, logprobs=True), "m")
    assert body["logprobs"] is True and body["top_logprobs"] == 1
    plain = build_body(ModelRequest(model="openai:m", messages=MESSAGES), "m")
    assert "logprobs" not in plain and "top_logprobs" not in plain


def _chunk(delta: dict[str, object], finish: str | None = None) -> ServerSentEvent:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return ServerSentEvent("message", json.dumps({"model": "m", "choices": [choice]}))


DONE = ServerSentEvent("message", "[DONE]")


def test_a_stream_ending_without_a_finish_reason_is_cut_and_retryable() -> None:
    """[DONE] after text but no finish reason is a cut reply, never the answer."""
    assembler = ChunkAssembler("openai")
    for event in (_chunk({"content": "The answer is"}), DONE):
        assembler.feed(event)
    assert assembler.done
    with pytest.raises(ModelConnectionError, match="finish reason") as cut:
        assembler.result()
    assert cut.value.retryable


def test_a_stream_with_its_finish_reason_is_the_answer() -> None:
    """The same text, finished, is the reply."""
    assembler = ChunkAssembler("openai")
    for event in (_chunk({"content": "The answer is 4."}), _chunk({}, "stop"), DONE):
        assembler.feed(event)
    response = assembler.result()
    assert response.content == "The answer is 4." and response.finish_reason == "stop"


ZERO = {"prompt_tokens": 0, "completion_tokens": 0}
LIST = {"name": "list_dir", "arguments": {}}


async def test_a_reply_without_usage_is_counted_by_an_estimate(harness: Harness) -> None:
    """A server that reports no usage (llama.cpp in a stream) does not make a run free: the
    worker estimates the tokens and says they are estimated."""
    model = harness.script({"content": "a fine answer", "usage": ZERO})
    result: AgentResult = await (await harness.start(model)).result()
    assert result.status is RunStatus.DONE
    assert result.usage.total_tokens > 0
    assert result.usage.estimated_tokens == result.usage.total_tokens
    counted = harness.script({"content": "a fine answer", "usage": {**ZERO, "prompt_tokens": 9}})
    result = await (await harness.start(counted)).result()
    assert result.usage.estimated_tokens == 0 and result.usage.prompt_tokens == 9


async def test_a_token_budget_stops_a_run_whose_server_reports_no_usage(harness: Harness) -> None:
    """Estimated tokens spend the budget: the run stops at it instead of running for free."""
    model = harness.script(*({"tool_calls": [LIST], "usage": ZERO} for _ in range(20)))
    result: AgentResult = await (await harness.start(model, token_budget=2_000)).result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None and result.error.startswith("token budget exhausted")
    assert 1 <= len(harness.requests(model)) < 20


async def test_the_same_server_error_for_the_same_request_is_not_retried_five_times(
    harness: Harness,
) -> None:
    """A 500 whose words repeat for the same request is the request's fault: the second one ends
    the call instead of three more doomed attempts."""
    doomed = {"status": 500, "body": {"error": {"message": "template error: content is null"}}}
    model = harness.script({"content": "never", "errors": [doomed] * 5})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert len(harness.requests(model)) == 2
    assert result.error is not None and "not retried again" in result.error


async def test_a_server_error_that_changes_is_retried_as_before(harness: Harness) -> None:
    """Different 500s, or 503s that repeat (a server down or busy), keep their attempts."""
    busy = {"status": 503}
    changing = [{"status": 500, "body": {"error": {"message": f"crash {i}"}}} for i in range(2)]
    model = harness.script({"content": "ok", "errors": [busy, busy, *changing]})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.answer == "ok"
    assert len(harness.requests(model)) == 5


def _like_llama_cpp(harness: Harness, *turns: Mapping[str, Any]) -> str:
    name = f"llama-{uuid.uuid4().hex[:10]}"
    harness.models.add_model(name, list(turns), like="llama.cpp")
    return f"openai:{name}"


async def test_a_tool_using_run_works_against_a_server_that_behaves_like_llama_cpp(
    harness: Harness,
) -> None:
    """Tools reach a model that sees them only with tool_choice; the turn after a tool call is
    accepted by a template that fails on null content; a stream without usage still counts."""
    (harness.workspace / "notes.txt").write_text("the answer is 42\n")
    model = _like_llama_cpp(
        harness,
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"content": "The notes say the answer is 42."},
    )
    result: AgentResult = await (await harness.start(model)).result()
    assert result.status is RunStatus.DONE, result.error
    assert result.answer == "The notes say the answer is 42."
    bodies = harness.requests(model)
    # The streamed first call gets an empty stream (llama.cpp cannot stream tool_choice auto):
    # it is asked again whole at once, and later calls with tools are not streamed. No other
    # request is refused: no 500 from the chat template for the turn after a tool call.
    assert [body.get("stream", False) for body in bodies] == [True, False, False, False]
    assert all(body["tool_choice"] == "auto" for body in bodies)
    assert result.usage.total_tokens > 0


async def test_a_streamed_reply_without_usage_is_estimated(harness: Harness) -> None:
    """llama.cpp streams a plain reply but ignores stream_options: no usage, so it is estimated."""
    model = _like_llama_cpp(harness, {"content": "Paris."})
    result: AgentResult = await (await harness.start(model, tools=[])).result()
    assert result.answer == "Paris."
    assert harness.requests(model)[0]["stream"] is True
    assert result.usage.total_tokens == result.usage.estimated_tokens > 0


async def test_a_stream_ended_without_a_finish_reason_is_retried_never_answered(
    harness: Harness,
) -> None:
    """[DONE] without a finish reason on every attempt: the cut text never becomes the answer."""
    model = _like_llama_cpp(harness, {"content": "The answer is", "unfinished": True})
    handle = await harness.start(model, model_max_attempts=2, tools=[])
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.answer is None
    assert result.error is not None and "finish reason" in result.error
    assert len(harness.requests(model)) == 2


async def test_a_reply_cut_by_its_length_limit_is_reported_never_answered(
    harness: Harness,
) -> None:
    """finish_reason length: the run says the reply was cut and how to give it room, at once."""
    model = harness.script({"content": "The first half of", "finish_reason": "length"})
    result: AgentResult = await (await harness.start(model, max_tokens=5)).result()
    assert result.status is RunStatus.ERROR
    assert result.answer is None
    assert result.error is not None
    assert "cut at its output limit of 5 tokens" in result.error
    assert len(harness.requests(model)) == 1
