"""Both wire protocols, end to end in real runs: OpenAI chat completions and Anthropic messages.

The scripted server answers the same script in each protocol's own format, so every behaviour
here is proven once per protocol with identical expectations.
"""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowHistory

from tests.support.harness import Harness
from tests.support.tries import failed_model_tries
from treadle.workflows.agent.messages.models import AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

PROTOCOLS = ["openai", "anthropic"]
WRITE = {"name": "write_file", "arguments": {"path": "a.txt", "content": "alpha"}}


ONE_FAILURE_ONLY = {"heartbeat_timeout_seconds": 60.0}
"""For the tests that count attempts: a busy machine's stalled heartbeat must not add a retry
(or take the place of the provider's error) in a test about the provider's error."""


def _attempt_failures(history: WorkflowHistory) -> list[tuple[int, str, float | None]]:
    """(the try that followed, the failure's message, seconds waited before it) of each
    failed model call try."""
    return [
        (index + 2, failed.message, failed.waited.total_seconds() if failed.waited else None)
        for index, failed in enumerate(failed_model_tries(history))
    ]


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_tool_call_then_answer(harness: Harness, provider: str) -> None:
    """A tool call runs; its result goes back in the protocol's own shape; the answer ends it."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "wrote it"}, provider=provider)
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert result.answer == "wrote it"
    assert (harness.workspace / "a.txt").read_text() == "alpha"
    second = harness.requests(model)[1]
    if provider == "anthropic":
        (block,) = second["messages"][-1]["content"]
        assert block["type"] == "tool_result"
        assert "wrote 5 bytes" in block["content"]
        assert second["system"]
    else:
        assert second["messages"][-1]["role"] == "tool"


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_parallel_tool_calls(harness: Harness, provider: str) -> None:
    """Several calls in one response run concurrently and are answered in call order."""
    (harness.workspace / "b.txt").write_text("beta")
    model = harness.script(
        {
            "tool_calls": [
                {"id": "c1", "name": "read_file", "arguments": {"path": "b.txt"}},
                {"id": "c2", "name": "list_dir", "arguments": {}},
            ]
        },
        {"content": "done"},
        provider=provider,
    )
    handle = await harness.start(model)
    assert (await handle.result()).status is RunStatus.DONE
    second = harness.requests(model)[1]
    if provider == "anthropic":
        ids = [b["tool_use_id"] for b in second["messages"][-1]["content"]]
    else:
        ids = [m["tool_call_id"] for m in second["messages"] if m["role"] == "tool"]
    assert ids == ["c1", "c2"]
    trace = await handle.query(AgentWorkflow.trace)
    assert "LlmParallelToolCalls" in [e.event for e in trace.entries]


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_usage_including_cached_tokens(harness: Harness, provider: str) -> None:
    """Prompt, completion, total and cached tokens add up across calls in either protocol."""
    usage = {"prompt_tokens": 1000, "completion_tokens": 20, "cached_tokens": 600}
    model = harness.script(
        {"tool_calls": [WRITE], "usage": usage},
        {"content": "ok", "usage": usage},
        provider=provider,
    )
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.usage.prompt_tokens == 2000
    assert result.usage.completion_tokens == 40
    assert result.usage.total_tokens == 2040
    assert result.usage.cached_tokens == 1200


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_rate_limit_retry_after_is_the_next_delay(harness: Harness, provider: str) -> None:
    """429 with Retry-After: 2 -> the run waits 2 s before the next try, which succeeds."""
    model = harness.script(
        {"content": "ok", "errors": [{"status": 429, "headers": {"Retry-After": "2"}}]},
        provider=provider,
    )
    handle = await harness.start(model, **ONE_FAILURE_ONLY)
    assert (await handle.result()).answer == "ok"
    ((attempt, message, delay),) = _attempt_failures(await handle.fetch_history())
    assert (attempt, delay) == (2, 2)
    assert message.startswith(f"{provider} returned HTTP 429")


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_server_error_then_success(harness: Harness, provider: str) -> None:
    """A 500 (or Anthropic's 529 overloaded) is retried with backoff; the run goes on."""
    status = 529 if provider == "anthropic" else 500
    model = harness.script({"content": "ok", "errors": [{"status": status}]}, provider=provider)
    handle = await harness.start(model, **ONE_FAILURE_ONLY)
    assert (await handle.result()).answer == "ok"
    ((attempt, message, _delay),) = _attempt_failures(await handle.fetch_history())
    assert attempt == 2
    assert f"HTTP {status}" in message


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_unauthorized_fails_fast(harness: Harness, provider: str) -> None:
    """401 is not retried; the error names provider, status and the provider's own text."""
    model = harness.script({"content": "never", "errors": [{"status": 401}] * 3}, provider=provider)
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert result.error.startswith(f"model call failed: {provider} returned HTTP 401: ")
    assert len(harness.requests(model)) == 1
    trace = await handle.query(AgentWorkflow.trace)
    assert trace.entries[-1].event == "FatalError"
    assert result.error in trace.entries[-1].data


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_malformed_body_is_retried(harness: Harness, provider: str) -> None:
    """A 200 whose body is not the protocol's shape is a retryable error."""
    model = harness.script(
        {"content": "ok", "errors": [{"status": 200, "body": {"unexpected": True}}]},
        provider=provider,
    )
    handle = await harness.start(model, **ONE_FAILURE_ONLY)
    assert (await handle.result()).answer == "ok"
    ((_attempt, message, _delay),) = _attempt_failures(await handle.fetch_history())
    assert message.startswith(f"{provider} response has no")


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_timeouts_are_retried_and_then_end_the_run(harness: Harness, provider: str) -> None:
    """Each attempt slower than model_timeout_seconds times out; after the last, the run ends."""
    slow = harness.script({"content": "too late", "delay": 2.5}, provider=provider)
    handle = await harness.start(slow, model_timeout_seconds=1, model_max_attempts=2)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error == "model call failed: start-to-close timeout (maximum attempts reached)"
    assert len(harness.requests(slow)) == 2
