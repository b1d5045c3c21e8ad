"""The model activity: OpenAI wire format, error classification, Retry-After, keys kept local."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import RetryPolicy

from tests.support.harness import Harness
from tests.support.processes import free_port
from tests.support.tries import failed_model_tries
from treadle.activities.errors import (
    ModelConfigError,
    ModelConnectionError,
    ModelHTTPError,
    ModelResponseError,
)
from treadle.activities.model import anthropic_messages, openai_chat
from treadle.activities.model.activity import ModelActivities, ProviderSettings
from treadle.activities.model.body import json_bytes
from treadle.activities.model.http_errors import (
    MAX_RETRY_AFTER,
    provider_backoff,
    retry_after_cap,
    retry_after_seconds,
)
from treadle.activities.model.openai_chat import parse_response
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentResult,
    ChatMessage,
    ModelRequest,
    RunStatus,
    ToolCall,
)

# A fake key, split so secret scanners do not mistake the source for a real one.
KEY = "sk-" + "test-treadle-0123456789abcdef"
MESSAGES = (ChatMessage(role="user", content="hi"),)


def _models(http: httpx.AsyncClient, base_url: str, key: str | None = None) -> ModelActivities:
    env = {"OPENAI_BASE_URL": base_url} | ({"OPENAI_API_KEY": key} if key else {})
    return ModelActivities(ProviderSettings.from_env(env), http)


async def _complete(models: ModelActivities, name: str) -> object:
    return await models.complete(
        ModelRequest(model=f"openai:{name}", messages=MESSAGES), read_timeout=5
    )


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    """Retry-After is read as seconds or as an HTTP date; garbage is ignored."""
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": "Thu, 01 Jan 2026 12:00:30 GMT"}, now) == 30.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_parse_response_reads_text_tool_calls_and_usage() -> None:
    """A well-formed body becomes content, tool calls (arguments kept as text) and usage."""
    body = {
        "model": "m",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "function": {"name": "list_dir", "arguments": "{}"}},
                        {"id": "b", "function": {"name": "read_file", "arguments": {"path": "x"}}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "total_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }
    response = parse_response(body, "openai")
    assert response.tool_calls == (
        ToolCall(id="a", name="list_dir", arguments="{}"),
        ToolCall(id="b", name="read_file", arguments='{"path": "x"}'),
    )
    assert response.usage.cached_tokens == 4
    assert response.usage.total_tokens == 12


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "not a JSON object"),
        ({"choices": []}, "has no choices"),
        ({"choices": [{"message": "x"}]}, "has no message"),
        ({"choices": [{"message": {"content": 3}}]}, "content is not text"),
        ({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, "#1 has no name"),
    ],
)
def test_bodies_that_break_the_protocol_are_typed_errors(body: object, message: str) -> None:
    """Each protocol violation is a ModelResponseError naming what is wrong."""
    with pytest.raises(ModelResponseError, match=message):
        parse_response(body, "openai")


async def test_rate_limit_is_retryable_with_the_servers_delay(http: httpx.AsyncClient) -> None:
    """429 with Retry-After becomes a retryable error whose next delay is the header's."""
    with ScriptedModelServer() as server:
        server.add_model(
            "m", [{"content": "x", "errors": [{"status": 429, "headers": {"Retry-After": "3"}}]}]
        )
        with pytest.raises(ModelHTTPError) as caught:
            await _complete(_models(http, server.base_url), "m")
    error = caught.value.to_application_error()
    assert not error.non_retryable
    assert error.next_retry_delay == timedelta(seconds=3)
    assert error.type == "ModelHTTPError"
    assert "HTTP 429" in error.message


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(http: httpx.AsyncClient, status: int) -> None:
    """4xx answers (other than 408/409/429) fail at once, naming provider, status and text."""
    with ScriptedModelServer() as server:
        server.add_model(
            "m",
            [
                {
                    "content": "x",
                    "errors": [{"status": status, "body": {"error": {"message": "nope"}}}],
                }
            ],
        )
        with pytest.raises(ModelHTTPError) as caught:
            await _complete(_models(http, server.base_url), "m")
    error = caught.value.to_application_error()
    assert error.non_retryable
    assert error.message == f"openai returned HTTP {status}: nope"


@pytest.mark.parametrize("status", [408, 409, 500, 502, 503])
async def test_server_errors_are_retried(http: httpx.AsyncClient, status: int) -> None:
    """Timeouts, conflicts and 5xx are retryable."""
    with ScriptedModelServer() as server:
        server.add_model("m", [{"content": "x", "errors": [{"status": status}]}])
        with pytest.raises(ModelHTTPError) as caught:
            await _complete(_models(http, server.base_url), "m")
    assert not caught.value.to_application_error().non_retryable


async def test_unreachable_endpoint_is_a_retryable_connection_error(
    http: httpx.AsyncClient,
) -> None:
    """Nothing listening is a connection error, which Temporal retries."""
    with pytest.raises(ModelConnectionError, match="unreachable"):
        await _complete(_models(http, f"http://127.0.0.1:{free_port()}/v1"), "m")


async def test_missing_key_for_openai_fails_before_any_request(http: httpx.AsyncClient) -> None:
    """Against api.openai.com without OPENAI_API_KEY the call fails fast and non-retryably."""
    models = ModelActivities(ProviderSettings.from_env({}), http)
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY is not set") as caught:
        await _complete(models, "gpt-4o")
    assert caught.value.to_application_error().non_retryable


async def test_unknown_provider_is_a_config_error(http: httpx.AsyncClient) -> None:
    """An unknown provider prefix names the known ones."""
    models = ModelActivities(ProviderSettings.from_env({}), http)
    with pytest.raises(ModelConfigError, match="unknown model provider 'nope'"):
        await models.complete(ModelRequest(model="nope:x", messages=MESSAGES), read_timeout=5)


async def test_the_key_is_sent_as_bearer_and_redacted_from_errors(
    http: httpx.AsyncClient,
) -> None:
    """The key goes in the Authorization header; a provider echoing it back is redacted."""
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}. Or sk-proj-****abcd."}}
    with ScriptedModelServer(api_key=KEY) as server:
        server.add_model("m", [{"content": "x", "errors": [{"status": 401, "body": echo}]}])
        with pytest.raises(ModelHTTPError) as caught:
            await _complete(_models(http, server.base_url, KEY), "m")
        assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    message = caught.value.to_application_error().message
    assert KEY not in message
    assert "sk-proj" not in message
    assert message.startswith("openai returned HTTP 401: Incorrect API key provided: [redacted]")
    assert KEY not in repr(ProviderSettings.from_env({"OPENAI_API_KEY": KEY}))


async def test_credentials_in_the_base_url_stay_out_of_errors(http: httpx.AsyncClient) -> None:
    """user:password in OPENAI_BASE_URL never appears in a connection error's text."""
    url = f"http://user:s3cret-pass@127.0.0.1:{free_port()}/v1?api-key=abc123"
    with pytest.raises(ModelConnectionError) as caught:
        await _complete(_models(http, url), "m")
    assert "s3cret" not in str(caught.value)
    assert "abc123" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)


async def test_retry_after_sets_the_next_attempt_delay_in_a_run(harness: Harness) -> None:
    """In a real run, a 429's Retry-After is the wait (a timer) before the call's next try."""
    model = harness.script(
        {"content": "after the wait", "errors": [{"status": 429, "headers": {"Retry-After": "2"}}]}
    )
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    [failed] = failed_model_tries(await handle.fetch_history())
    assert failed.waited == timedelta(seconds=2)
    assert "HTTP 429" in failed.message


def test_retry_after_is_capped_at_the_retry_policys_maximum_interval() -> None:
    """The cap is the policy's maximum interval; without one, Temporal's default (100 times the
    initial interval); with no policy known, MAX_RETRY_AFTER (60 s)."""
    assert retry_after_cap(RetryPolicy(maximum_interval=timedelta(seconds=7))) == timedelta(
        seconds=7
    )
    assert retry_after_cap(RetryPolicy(initial_interval=timedelta(seconds=2))) == timedelta(
        seconds=200
    )
    assert retry_after_cap(None) == MAX_RETRY_AFTER == timedelta(seconds=60)


def test_a_providers_errors_back_off_from_a_second_up_to_the_policys_maximum() -> None:
    """1 s, 2 s, 4 s ... by the policy's coefficient, never past its maximum interval: the
    policy's own half-second first interval is for a worker that died, not for an outage."""
    policy = RetryPolicy(
        initial_interval=timedelta(seconds=0.5),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=5),
    )
    waits = [provider_backoff(attempt, policy).total_seconds() for attempt in range(1, 6)]
    assert waits == [1, 2, 4, 5, 5]
    assert provider_backoff(3, None) == timedelta(seconds=4)


async def first_retry_delay(harness: Harness, model: str) -> tuple[str, timedelta]:
    """Start a run on ``model``, wait for its model call's first failed try and the wait the
    run started after it, then cancel the run: the failure's message and that wait."""
    handle = await harness.start(model)
    async with asyncio.timeout(30):
        while True:
            tries = failed_model_tries(await handle.fetch_history())
            if tries and tries[0].waited is not None:
                break
            assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
            await asyncio.sleep(0.05)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    return tries[0].message, tries[0].waited


async def test_a_server_error_waits_a_second_before_the_next_attempt(harness: Harness) -> None:
    """A 500 without Retry-After: the next try follows after a one-second backoff (the
    provider's)."""
    model = harness.script({"content": "x", "errors": [{"status": 500}] * 3})
    message, delay = await first_retry_delay(harness, model)
    assert "HTTP 500" in message
    assert delay == timedelta(seconds=1)


async def test_a_retry_after_longer_than_the_policy_allows_waits_its_maximum_interval(
    harness: Harness,
) -> None:
    """A 429 asking for an hour: the next try follows after the model call's longest wait
    (60 s), not after an hour."""
    model = harness.script(
        {"content": "x", "errors": [{"status": 429, "headers": {"Retry-After": "3600"}}]}
    )
    message, delay = await first_retry_delay(harness, model)
    assert "HTTP 429" in message
    assert delay == timedelta(seconds=60)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("body", ['{"choices": []}', "{}", '{"choices": null, "usage": {}}'])
async def test_a_response_without_choices_ends_the_run_with_a_clear_error(
    harness: Harness, caplog: pytest.LogCaptureFixture, provider: str, body: str
) -> None:
    """A body with no choices (or content blocks) fails each attempt as a ModelResponseError;
    once attempts run out the run ends in Error saying so, and no workflow task ever fails
    (no "Failed activation" in the worker log)."""
    caplog.set_level(logging.INFO)
    model = harness.script({"raw": body}, provider=provider)
    handle = await harness.start(model, model_max_attempts=2)
    result: AgentResult = await handle.result()
    missing = "has no choices" if provider == "openai" else "has no content blocks"
    assert result.status is RunStatus.ERROR
    assert result.error == f"model call failed: {provider} response {missing}"
    assert len(harness.requests(model)) == 2
    assert "Failed activation" not in caplog.text
    assert "Completing activity as failed" in caplog.text  # the attempts' failures were logged


@pytest.mark.parametrize(
    "usage",
    [{"prompt_tokens": -3}, {"completion_tokens": 1.5}, {"total_tokens": 1e300}, {"x": 1}],
)
def test_usage_that_is_not_a_token_count_is_a_protocol_error(usage: dict[str, object]) -> None:
    """Token counts no run could add up or price (negative, fractional, astronomically large)
    are a ModelResponseError naming the field; absent counts are 0."""
    body = {"choices": [{"message": {"content": "hi"}}], "usage": usage}
    if "x" in usage:
        assert parse_response(body, "openai").usage.total_tokens == 0
        return
    with pytest.raises(ModelResponseError, match=r"usage\.\w+_tokens is not a token count"):
        parse_response(body, "openai")


@pytest.mark.parametrize("protocol", [openai_chat, anthropic_messages])
def test_a_request_body_is_the_json_httpx_would_send_byte_for_byte(protocol: Any) -> None:
    """A long request is encoded a message at a time (off the event loop), yet its bytes are
    those of ``json=``: compact, UTF-8, no NaN."""
    messages = [ChatMessage(role="system", content='sys é \u2028 "quoted" \\')]
    for i in range(40):
        call = ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "f{i}"}}')
        messages += [
            ChatMessage(role="assistant", content=None, tool_calls=(call,)),
            ChatMessage(role="tool", tool_call_id=f"c{i}", content=f"{i} ü\n" * 3_000),
        ]
    request = ModelRequest(
        model="openai:m", messages=tuple(messages), tools=("read_file",), temperature=0.2
    )
    body = protocol.build_body(request, "m")
    whole = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert json_bytes(body) == whole.encode()
    with pytest.raises(ValueError):
        json_bytes({**body, "temperature": float("nan")})
