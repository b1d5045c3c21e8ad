"""Bad model output never crashes a run: it becomes an observation, feedback or a retry."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowHandle

from tests.support.harness import Harness, tool_messages
from tests.support.tries import failed_model_tries
from treadle.workflows.agent.messages.models import AgentResult, RunStatus


async def _second_request_tool_output(harness: Harness, *turn: dict[str, object]) -> str:
    model = harness.script(*turn, {"content": "recovered"})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert result.answer == "recovered"
    (message,) = tool_messages(harness.requests(model)[1])
    content: str = message["content"]
    return content


async def _answered_after(
    harness: Harness, answer: str, *errors: dict[str, Any]
) -> tuple[WorkflowHandle[Any, Any], int]:
    """A reply that ``errors`` come before, one an attempt: the run still answers it. Returns
    the run's handle and how many requests the model received."""
    model = harness.script({"content": answer, "errors": list(errors)})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.answer == answer
    return handle, len(harness.requests(model))


@pytest.mark.replay_corpus
async def test_arguments_that_are_not_json_become_an_error_observation(harness: Harness) -> None:
    """Malformed JSON arguments are reported to the model, which then recovers."""
    output = await _second_request_tool_output(
        harness, {"tool_calls": [{"name": "write_file", "arguments": '{"path": "a.txt", '}]}
    )
    assert output.startswith("ERROR: arguments for write_file are not valid JSON")
    assert not (harness.workspace / "a.txt").exists()


async def test_arguments_that_fail_the_schema_become_an_error_observation(harness: Harness) -> None:
    """Arguments missing a field or with a wrong type name the problem for the model."""
    output = await _second_request_tool_output(
        harness, {"tool_calls": [{"name": "edit_file", "arguments": {"path": 3, "typo": 1}}]}
    )
    assert output.startswith("ERROR: arguments for edit_file do not match its schema")
    assert "old_text: Field required" in output
    assert "typo: Extra inputs are not permitted" in output


async def test_a_json_array_instead_of_an_object_is_refused(harness: Harness) -> None:
    """Arguments must be a JSON object."""
    output = await _second_request_tool_output(
        harness, {"tool_calls": [{"name": "list_dir", "arguments": "[1, 2]"}]}
    )
    assert output == "ERROR: arguments for list_dir must be a JSON object, got list"


@pytest.mark.replay_corpus
async def test_unknown_tool_becomes_an_error_observation(harness: Harness) -> None:
    """A tool that does not exist is an observation listing the tools that do."""
    output = await _second_request_tool_output(
        harness, {"tool_calls": [{"name": "delete_everything", "arguments": {}}]}
    )
    assert output.startswith("ERROR: unknown tool 'delete_everything'; available tools:")
    assert "write_file" in output


async def test_a_failing_tool_is_data_not_a_crash(harness: Harness) -> None:
    """A tool error (old text missing) is an observation; the run goes on to answer."""
    (harness.workspace / "main.py").write_text("print('hi')\n")
    output = await _second_request_tool_output(
        harness,
        {
            "tool_calls": [
                {
                    "name": "edit_file",
                    "arguments": {"path": "main.py", "old_text": "nope", "new_text": "x"},
                }
            ]
        },
    )
    assert output.startswith("ERROR:")
    assert "not found" in output
    assert (harness.workspace / "main.py").read_text() == "print('hi')\n"


@pytest.mark.replay_corpus
async def test_empty_reply_is_sent_back_as_feedback(harness: Harness) -> None:
    """A reply with neither text nor tool calls asks the model again instead of ending the run."""
    model = harness.script({"content": ""}, {"content": "the answer"})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.answer == "the answer"
    last = harness.requests(model)[1]["messages"][-1]
    assert last["role"] == "user"
    assert "empty" in last["content"]


async def test_answer_shorter_than_min_answer_length_is_sent_back(harness: Harness) -> None:
    """min_answer_length turns a too-short answer into feedback (AnswerTooShort)."""
    model = harness.script({"content": "ok"}, {"content": "a complete, longer answer"})
    handle = await harness.start(model, min_answer_length=10)
    result: AgentResult = await handle.result()
    assert result.answer == "a complete, longer answer"
    assert "at least 10" in harness.requests(model)[1]["messages"][-1]["content"]


@pytest.mark.replay_corpus
async def test_blacklisted_tool_is_not_run_and_the_model_is_told(harness: Harness) -> None:
    """A call to a blacklisted tool runs nothing; the model hears why and tries again."""
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "x", "content": "y"}}]},
        {"content": "fine, no writing"},
    )
    handle = await harness.start(model, blacklisted_tools=["write_file"])
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert not (harness.workspace / "x").exists()
    first, second = harness.requests(model)
    assert "write_file" not in {t["function"]["name"] for t in first["tools"]}
    assert (
        tool_messages(second)[0]["content"] == "ERROR: tool write_file is not available in this run"
    )


async def test_malformed_response_body_is_retried(harness: Harness) -> None:
    """A body that breaks the protocol is a retryable error; the next attempt succeeds."""
    _, requests = await _answered_after(harness, "fine", {"status": 200, "body": "not json"})
    assert requests == 2


async def test_tool_call_without_a_name_is_retried(harness: Harness) -> None:
    """A tool call with no function name is a protocol error, retried, then the run goes on."""
    nameless = {"role": "assistant", "tool_calls": [{"id": "x", "function": {"arguments": "{}"}}]}
    handle, _ = await _answered_after(
        harness, "fine", {"status": 200, "body": {"choices": [{"message": nameless}]}}
    )
    history = await handle.fetch_history()
    failures = [failed.message for failed in failed_model_tries(history)]
    assert failures == ["openai response tool call #1 has no name"]


@pytest.mark.replay_corpus
async def test_server_error_then_success_is_retried_by_temporal(harness: Harness) -> None:
    """A 500 is retried by the activity's retry policy; the run never notices."""
    _, requests = await _answered_after(harness, "after retry", {"status": 500})
    assert requests == 2


@pytest.mark.replay_corpus
async def test_unauthorized_fails_fast_with_a_clear_error(harness: Harness) -> None:
    """A 401 is not retried: the run ends in Error naming provider, status and message."""
    model = harness.script(
        {
            "content": "never",
            "errors": [
                {
                    "status": 401,
                    "body": {"error": {"message": "Incorrect API key provided", "code": "x"}},
                }
            ]
            * 5,
        }
    )
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error == "model call failed: openai returned HTTP 401: Incorrect API key provided"
    assert len(harness.requests(model)) == 1
