"""Model output that is not valid Unicode: lone UTF-16 surrogates a provider's JSON may spell
never leave the model activity raw, in either protocol; they become U+FFFD."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.support.harness import Harness
from treadle.activities.model import anthropic_messages, openai_chat
from treadle.workflows.agent.messages.models import AgentResult, ModelResponse, RunStatus, ToolCall

FFFD = "\ufffd"


def _decoded(text: str) -> Any:
    """JSON text as the activity sees it: ``\\ud800`` escapes decode to lone surrogates."""
    return json.loads(text)


def _round_trip(response: ModelResponse) -> ModelResponse:
    """Through Temporal's pydantic JSON converter and back, as a result travels."""
    converter = pydantic_data_converter.payload_converter
    (back,) = converter.from_payloads(converter.to_payloads([response]), [ModelResponse])
    assert isinstance(back, ModelResponse)
    return back


def test_openai_text_names_ids_and_argument_objects_lose_their_surrogates() -> None:
    """Content, model, finish reason, a tool call's name and id, raw surrogates in argument text
    and in an argument object: each surrogate becomes U+FFFD, arguments stay valid JSON, and the
    response survives Temporal's converter unchanged."""
    body = _decoded(
        r"""{"model": "m\udfff", "choices": [{"finish_reason": "stop\ud800", "message": {
            "content": "half a pair \ud83d here, a low one \ude00 there, a whole one \ud83d\ude00",
            "tool_calls": [
                {"id": "c\udc001", "function": {
                    "name": "read\ud800", "arguments": "{\"p\": \"\ud800\"}"}},
                {"id": "c2", "function": {"name": "list_dir", "arguments": {"k\udbff": ["\udfff"]}}}
            ]}}]}"""
    )
    response = openai_chat.parse_response(body, "openai")
    assert response.content == (
        f"half a pair {FFFD} here, a low one {FFFD} there, a whole one \U0001f600"
    )
    assert (response.model, response.finish_reason) == (f"m{FFFD}", f"stop{FFFD}")
    assert response.tool_calls == (
        ToolCall(id=f"c{FFFD}1", name=f"read{FFFD}", arguments=f'{{"p": "{FFFD}"}}'),
        ToolCall(id="c2", name="list_dir", arguments=json.dumps({f"k{FFFD}": [FFFD]})),
    )
    assert json.loads(response.tool_calls[1].arguments) == {f"k{FFFD}": [FFFD]}
    assert _round_trip(response) == response


def test_openai_escaped_surrogates_in_argument_text_stay_escaped() -> None:
    """Arguments are JSON text: an escaped surrogate there is six valid characters, kept as
    they came (the workflow checks arguments when it decodes them)."""
    body = {"choices": [{"message": {"tool_calls": [{"function": {
        "name": "write_file", "arguments": '{"path": "a\\ud800.md"}'}}]}}]}  # fmt: skip
    response = openai_chat.parse_response(body, "openai")
    assert response.tool_calls[0].arguments == '{"path": "a\\ud800.md"}'
    assert _round_trip(response) == response


def test_anthropic_text_blocks_and_tool_use_lose_their_surrogates() -> None:
    """Text blocks, a tool_use block's name, id and input (keys and values), model and stop
    reason: each surrogate becomes U+FFFD and the input is valid JSON without any."""
    body = _decoded(
        r"""{"model": "claude\ud800", "stop_reason": "tool_use\udfff", "content": [
            {"type": "text", "text": "one \ud800 "},
            {"type": "text", "text": "two \udc00"},
            {"type": "tool_use", "id": "toolu\ud801", "name": "write_file\udc02",
             "input": {"path\ud800": "a\udfff.md", "lines": ["\ud83d", 1]}}
        ]}"""
    )
    response = anthropic_messages.parse_response(body, "anthropic")
    assert response.content == f"one {FFFD} two {FFFD}"
    assert (response.model, response.finish_reason) == (f"claude{FFFD}", f"tool_use{FFFD}")
    (call,) = response.tool_calls
    assert (call.id, call.name) == (f"toolu{FFFD}", f"write_file{FFFD}")
    assert json.loads(call.arguments) == {f"path{FFFD}": f"a{FFFD}.md", "lines": [FFFD, 1]}
    assert _round_trip(response) == response


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_run_whose_model_speaks_in_lone_surrogates_finishes(
    harness: Harness, caplog: pytest.LogCaptureFixture, provider: str
) -> None:
    """A tool call whose id and arguments hold lone surrogates, then an answer holding one:
    the file is written under the cleaned name, the call's id goes back cleaned, and the run
    ends Done with U+FFFD in its answer, every model call succeeding at its first attempt."""
    caplog.set_level(logging.INFO)
    if provider == "openai":
        # The arguments' JSON text is itself a JSON string in the body: its \ud800 escapes
        # are surrogates in the arguments once the body is decoded.
        call = (
            r'{"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", '
            r'"content": null, "tool_calls": [{"id": "c\ud8001", "type": "function", '
            r'"function": {"name": "write_file", '
            r'"arguments": "{\"path\": \"a\ud800.md\", \"content\": \"x\udc00\"}"}}]}}]}'
        )
        answer = r'{"choices": [{"message": {"content": "done \udfff"}, "finish_reason": "stop"}]}'
    else:
        call = (
            r'{"type": "message", "role": "assistant", "stop_reason": "tool_use", "content": ['
            r'{"type": "tool_use", "id": "c\ud8001", "name": "write_file", '
            r'"input": {"path": "a\ud800.md", "content": "x\udc00"}}]}'
        )
        answer = r'{"type": "message", "content": [{"type": "text", "text": "done \udfff"}]}'
    model = harness.script({"raw": call}, {"raw": answer}, provider=provider)
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, f"done {FFFD}")
    assert (harness.workspace / f"a{FFFD}.md").read_text() == f"x{FFFD}"
    second = harness.requests(model)[1]
    sent_back = json.dumps(second["messages"][-1], ensure_ascii=False)
    assert f"c{FFFD}1" in sent_back
    assert len(harness.requests(model)) == 2  # no attempt failed on the way out
    assert "Completing activity as failed" not in caplog.text


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_error_message_with_a_lone_surrogate_fails_cleanly(
    harness: Harness, caplog: pytest.LogCaptureFixture, provider: str
) -> None:
    """A 400 whose message holds a lone surrogate is still the provider's non-retryable error
    (once, with U+FFFD in its text), not a failure to encode the failure that Temporal retries."""
    caplog.set_level(logging.INFO)
    body = r'{"type": "error", "error": {"type": "invalid_request_error", "message": "bad \ud800"}}'
    model = harness.script(
        {"content": "never", "errors": [{"status": 400, "body": body}]}, provider=provider
    )
    handle = await harness.start(model, model_max_attempts=3)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error == f"model call failed: {provider} returned HTTP 400: bad {FFFD}"
    assert len(harness.requests(model)) == 1
    assert "Exception handling failed" not in caplog.text
