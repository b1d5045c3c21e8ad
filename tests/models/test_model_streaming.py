"""Model token streaming: both protocols stream from a real local server and assemble the very
``ModelResponse`` the non-streaming call returns; a stream cut short, malformed or failing mid-way
is a typed error; a server that refuses to stream is asked again without it, and remembered;
the text goes out in a bounded number of batches on the run's live stream."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import random
import socket
import struct
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.support.harness import Harness
from treadle.activities.errors import ModelConnectionError, ModelHTTPError, ModelResponseError
from treadle.activities.model.activity import ModelActivities, ProviderSettings
from treadle.activities.model.tokens import (
    FIRST_BATCH_AFTER,
    HOLD_SECONDS,
    MAX_BATCH_CHARS,
    MAX_TOKEN_BATCHES,
    MAX_TOKEN_BATCHES_PER_CALL,
    NEXT_BATCH_AFTER,
    TokenBatcher,
    TokenPublisher,
    batch_limit,
)
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.events import TOKENS_TOPIC, TokenDelta
from treadle.workflows.agent.messages.models import ChatMessage, ModelRequest, ModelResponse

# A fake key, split so secret scanners do not mistake the source for a real one.
KEY = "sk-" + "stream-treadle-0123456789abcdef"
PROVIDERS = ["openai", "anthropic"]
E = TypeVar("E", bound=Exception)


def activities(
    http: httpx.AsyncClient, server: ScriptedModelServer, key: str | None = None
) -> ModelActivities:
    env = {"OPENAI_BASE_URL": server.base_url, "ANTHROPIC_BASE_URL": server.base_url}
    if key:
        env |= {"OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key}
    return ModelActivities(ProviderSettings.from_env(env), http)


def scripted(server: ScriptedModelServer, *turns: Mapping[str, Any]) -> str:
    """A fresh model name on ``server`` playing ``turns``."""
    name = f"s-{uuid.uuid4().hex[:10]}"
    server.add_model(name, list(turns))
    return name


async def failed_stream(
    http: httpx.AsyncClient,
    server: ScriptedModelServer,
    provider: str,
    turn: Mapping[str, Any],
    raises: type[E],
    *,
    key: str | None = None,
    read_timeout: float = 10,
) -> E:
    """The error a streaming call to ``provider`` meets playing ``turn``: a ``raises``."""
    name = scripted(server, turn)
    with pytest.raises(raises) as caught:
        await activities(http, server, key).complete(
            request(provider, name, stream=True), read_timeout=read_timeout
        )
    return caught.value


def request(
    provider: str, name: str, *, stream: bool, task: str = "hi", **more: Any
) -> ModelRequest:
    return ModelRequest(
        model=f"{provider}:{name}",
        messages=(ChatMessage(role="user", content=task),),
        stream=stream,
        **more,
    )


async def both_ways(
    models: ModelActivities, provider: str, name: str, **more: Any
) -> tuple[ModelResponse, ModelResponse, list[str]]:
    """The reply without streaming, then streamed, and the text pieces the stream handed on."""
    whole = await models.complete(request(provider, name, stream=False, **more), read_timeout=10)
    pieces: list[str] = []
    streamed = await models.complete(
        request(provider, name, stream=True, **more), read_timeout=10, on_text=pieces.append
    )
    return whole, streamed, pieces


# The same reply, streamed or not


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_text_reply_streams_into_the_same_response(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """Text and usage (cached tokens included): the streamed response equals the whole one, and
    the text reaches the callback in several pieces, in order, that join into its content."""
    name = scripted(
        model_server,
        {
            "content": "Streaming, one word at a time — then some more.",
            "usage": {"prompt_tokens": 120, "completion_tokens": 11, "cached_tokens": 80},
        },
    )
    whole, streamed, pieces = await both_ways(activities(http, model_server), provider, name)
    assert streamed == whole
    assert streamed.usage.cached_tokens == 80
    assert streamed.usage.prompt_tokens == 120
    assert len(pieces) > 3
    assert "".join(pieces) == streamed.content
    body = model_server.requests_for(name)[-1].body
    assert body["stream"] is True
    if provider == "openai":
        assert body["stream_options"] == {"include_usage": True}
    else:
        assert "stream_options" not in body
    assert "stream" not in model_server.requests_for(name)[0].body


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_parallel_tool_calls_stream_into_the_same_response(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """Text and three tool calls whose arguments arrive in three-character fragments: the same
    calls, ids and arguments, and the same finish reason."""
    name = scripted(
        model_server,
        {
            "content": "Reading three files.",
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "a.md"}},
                {"name": "read_file", "arguments": {"path": "b/ü.md"}, "id": "mine"},
                {"name": "list_dir", "arguments": {}},
            ],
            "chunk_chars": 3,
        },
    )
    whole, streamed, pieces = await both_ways(activities(http, model_server), provider, name)
    assert streamed == whole
    assert [c.name for c in streamed.tool_calls] == ["read_file", "read_file", "list_dir"]
    assert streamed.tool_calls[1].id == "mine"
    assert "".join(pieces) == "Reading three files."


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_reply_of_tool_calls_only_streams_no_text(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """No text: content stays None as without streaming, and the callback is never called."""
    name = scripted(model_server, {"tool_calls": [{"name": "list_dir", "arguments": {"p": 1}}]})
    whole, streamed, pieces = await both_ways(activities(http, model_server), provider, name)
    assert streamed == whole
    assert streamed.content is None
    assert pieces == []


async def test_confidence_survives_streaming(
    http: httpx.AsyncClient, model_server: ScriptedModelServer
) -> None:
    """OpenAI log-probabilities arrive chunk by chunk; the confidence is the same."""
    name = scripted(model_server, {"content": "Fairly sure of this one.", "confidence": 0.7})
    whole, streamed, _ = await both_ways(
        activities(http, model_server), "openai", name, logprobs=True
    )
    assert streamed.confidence == whole.confidence == pytest.approx(0.7)


async def test_a_server_that_answers_a_streaming_request_whole_is_read_whole(
    http: httpx.AsyncClient, model_server: ScriptedModelServer
) -> None:
    """A compatible server that ignores ``stream`` and sends one JSON body: read as a body."""
    body = '{"choices": [{"message": {"content": "whole"}, "finish_reason": "stop"}]}'
    name = scripted(model_server, {"raw": body})
    pieces: list[str] = []
    response = await activities(http, model_server).complete(
        request("openai", name, stream=True), read_timeout=10, on_text=pieces.append
    )
    assert response.content == "whole"
    assert pieces == []


TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=30)
"""Any text, lone surrogates included: split between chunks, a pair must still be one
character, as it is when the body is decoded whole."""
ARGUMENTS = st.dictionaries(
    st.text(max_size=5),
    st.none() | st.booleans() | st.integers() | TEXT | st.lists(st.integers(), max_size=3),
    max_size=3,
)
TURNS = st.fixed_dictionaries(
    {},
    optional={
        "content": TEXT,
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["read_file", "list_dir", "write_file"]),
                    "arguments": ARGUMENTS,
                },
                optional={"id": st.text(alphabet="abc123_", min_size=1, max_size=8)},
            ),
            max_size=3,
        ),
        "usage": st.integers(0, 10**6).flatmap(
            lambda prompt: st.fixed_dictionaries(
                {
                    "prompt_tokens": st.just(prompt),
                    "completion_tokens": st.integers(0, 10**6),
                    "cached_tokens": st.integers(0, prompt),
                }
            )
        ),
        "chunk_chars": st.integers(1, 6),
        "confidence": st.floats(0.01, 1.0),
    },
).filter(lambda turn: "content" in turn or turn.get("tool_calls"))


@settings(
    max_examples=60,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(provider=st.sampled_from(PROVIDERS), turn=TURNS)
def test_any_valid_turn_streams_into_the_response_it_gives_whole(
    model_server: ScriptedModelServer, provider: str, turn: dict[str, Any]
) -> None:
    """Any scripted turn, in either protocol, over HTTP: streamed and whole, the two responses
    are equal, and the pieces the callback got join into the content."""
    name = scripted(model_server, turn)

    async def call() -> tuple[ModelResponse, ModelResponse, list[str]]:
        async with httpx.AsyncClient() as http:
            return await both_ways(activities(http, model_server), provider, name, logprobs=True)

    whole, streamed, pieces = asyncio.run(call())  # a sync test: no loop runs in this thread
    assert streamed == whole
    assert "".join(pieces) == (streamed.content or "")


# Streams that break


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_cut_mid_way_is_retryable_and_the_next_attempt_succeeds(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """The connection closes after two chunks: a retryable ModelConnectionError saying so, after
    the text so far reached the callback; the next attempt gets the whole reply."""
    name = scripted(model_server, {"content": "one two three four five", "cut_after": 2})
    models = activities(http, model_server)
    pieces: list[str] = []
    with pytest.raises(ModelConnectionError) as caught:
        await models.complete(
            request(provider, name, stream=True), read_timeout=10, on_text=pieces.append
        )
    error = caught.value.to_application_error()
    assert not error.non_retryable
    assert error.message.startswith(f"{provider} stream was cut mid-way: ")
    assert "".join(pieces) == "one two"
    pieces.clear()
    response = await models.complete(
        request(provider, name, stream=True), read_timeout=10, on_text=pieces.append
    )
    assert response.content == "".join(pieces) == "one two three four five"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_that_stalls_mid_way_times_out_retryably(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """No chunk for longer than the read timeout: a retryable ModelConnectionError."""
    turn = {"content": "one two", "chunk_delay": 3}
    error = await failed_stream(
        http, model_server, provider, turn, ModelConnectionError, read_timeout=0.3
    )
    assert str(error) == f"{provider} stream timed out mid-way: ReadTimeout"
    assert not error.to_application_error().non_retryable


@pytest.mark.parametrize(
    ("provider", "last"),
    [("openai", {"choices": []}), ("anthropic", {"type": "ping"})],
)
async def test_a_stream_that_ends_before_its_last_event_is_retryable(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str, last: Any
) -> None:
    """A body that ends cleanly but without [DONE] / message_stop is a reply cut short."""
    turn = {"content": "one two", "errors": [{"status": 200, "body": last, "in_stream": True}]}
    error = await failed_stream(http, model_server, provider, turn, ModelConnectionError)
    end = "data: [DONE]" if provider == "openai" else "event: message_stop"
    assert str(error) == f"{provider} stream ended before {end}: the reply is cut short"
    assert not error.to_application_error().non_retryable


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_malformed_event_is_a_retryable_protocol_error(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """An event whose data is not JSON: ModelResponseError, retried."""
    turn = {"content": "x y", "errors": [{"status": 200, "body": "{oops", "in_stream": True}]}
    error = await failed_stream(http, model_server, provider, turn, ModelResponseError)
    assert str(error) == f"{provider} stream event is not valid JSON"


@pytest.mark.parametrize(
    ("provider", "status", "named", "retryable"),
    [
        ("anthropic", 529, "overloaded_error, as HTTP 529", True),
        ("anthropic", 429, "rate_limit_error, as HTTP 429", True),
        ("anthropic", 500, "api_error, as HTTP 500", True),
        ("anthropic", 400, "invalid_request_error, as HTTP 400", False),
        ("openai", 429, "rate_limit_exceeded, as HTTP 429", True),
        ("openai", 503, "server_error, as HTTP 500", True),
        ("openai", 401, "invalid_api_key, as HTTP 401", False),
    ],
)
async def test_an_error_event_in_the_stream_is_classified_like_its_http_error(
    http: httpx.AsyncClient,
    model_server: ScriptedModelServer,
    provider: str,
    status: int,
    named: str,
    retryable: bool,
) -> None:
    """The provider's error event mid-stream: a ModelHTTPError with the status its type names,
    so overload and rate limits are retried and a refused request is not."""
    turn = {"content": "one two", "errors": [{"status": status, "in_stream": True}]}
    failed = await failed_stream(http, model_server, provider, turn, ModelHTTPError)
    error = failed.to_application_error()
    assert error.message.startswith(f"{provider} stream failed ({named}): ")
    assert error.non_retryable is not retryable


async def test_an_unnamed_error_event_is_taken_for_a_server_error(
    http: httpx.AsyncClient, model_server: ScriptedModelServer
) -> None:
    """An error event naming no known type or status: retried, as a 500 would be."""
    body = {"error": {"message": "something broke", "type": "weird"}}
    turn = {"content": "a b", "errors": [{"status": 500, "body": body, "in_stream": True}]}
    error = await failed_stream(http, model_server, "openai", turn, ModelHTTPError)
    assert str(error) == "openai stream failed (unnamed, taken as HTTP 500): something broke"
    assert not error.to_application_error().non_retryable


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_http_error_before_the_stream_is_translated_as_without_streaming(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """A 429 with Retry-After to a streaming request: the same retryable error and delay."""
    turn = {"content": "x", "errors": [{"status": 429, "headers": {"Retry-After": "4"}}]}
    failed = await failed_stream(http, model_server, provider, turn, ModelHTTPError)
    error = failed.to_application_error()
    assert error.message.startswith(f"{provider} returned HTTP 429: ")
    assert error.next_retry_delay == timedelta(seconds=4)
    assert not error.non_retryable


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("in_stream", [True, False])
async def test_keys_are_redacted_from_streaming_errors(
    http: httpx.AsyncClient, provider: str, in_stream: bool
) -> None:
    """A provider echoing the key (whole, in another case, cut in pieces) in an error event or
    in an error status answering a streaming request: the key is in no message."""
    with ScriptedModelServer(api_key=KEY) as server:
        error = {
            "status": 400,
            "in_stream": in_stream,
            "echo_key": ["exact", "upper", "prefix", "split"],
        }
        turn = {"content": "a b", "errors": [error]}
        failed = await failed_stream(http, server, provider, turn, ModelHTTPError, key=KEY)
    message = failed.to_application_error().message
    assert "[redacted]" in message
    for fragment in (KEY, KEY.upper(), KEY[:20], KEY[8:16], KEY[-8:]):
        assert fragment not in message
        assert fragment.lower() not in message.lower()


# Servers that refuse to stream


def unstreamed(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without what asks the provider to stream."""
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def streamed_flags(server: ScriptedModelServer, name: str) -> list[bool]:
    """For each request ``name`` got, in order: did it ask to stream."""
    return [r.body.get("stream") is True for r in server.requests_for(name)]


def refusals(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The ``model.stream.unsupported`` records logged, as their attributes."""
    return [r.__dict__ for r in caplog.records if r.getMessage() == "model.stream.unsupported"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_server_that_refuses_streaming_is_asked_again_without_it(
    http: httpx.AsyncClient, provider: str
) -> None:
    """A server that cannot stream answers the streaming request with its 400: the call asks
    once more with the same body but for stream and stream_options, and returns the very
    response the non-streaming call does; no text reaches the callback."""
    with ScriptedModelServer(streaming=False) as server:
        name = scripted(
            server,
            {
                "content": "Reading one file, whole.",
                "tool_calls": [{"name": "read_file", "arguments": {"path": "a.md"}}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 9, "cached_tokens": 20},
            },
        )
        whole, streamed, pieces = await both_ways(activities(http, server), provider, name)
        plain, refused, retried = (r.body for r in server.requests_for(name))
    assert streamed == whole
    assert pieces == []
    assert refused["stream"] is True
    assert ("stream_options" in refused) is (provider == "openai")
    assert retried == unstreamed(refused) == plain


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_endpoint_that_refused_streaming_is_not_asked_to_stream_again(
    http: httpx.AsyncClient,
    model_server: ScriptedModelServer,
    provider: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a refusal the worker remembers the endpoint (its URL and model): later calls go
    straight to non-streaming, one request each, and the refusal is logged once; another model
    on the same server still streams, and so does another worker (the memory is its own)."""
    caplog.set_level(logging.WARNING)
    refuses = scripted(model_server, {"content": "No streams here.", "reject_stream": True})
    streams = scripted(model_server, {"content": "Streams fine."})
    models = activities(http, model_server)
    for _ in range(3):
        response = await models.complete(request(provider, refuses, stream=True), read_timeout=10)
        assert response.content == "No streams here."
    assert streamed_flags(model_server, refuses) == [True, False, False, False]
    (logged,) = refusals(caplog)
    path = "/chat/completions" if provider == "openai" else "/messages"
    assert logged["model"] == f"{provider}:{refuses}"
    assert logged["url"] == model_server.base_url + path
    assert "stream" in logged["refusal"]

    pieces: list[str] = []
    await models.complete(
        request(provider, streams, stream=True), read_timeout=10, on_text=pieces.append
    )
    assert "".join(pieces) == "Streams fine."
    assert streamed_flags(model_server, streams) == [True]
    await activities(http, model_server).complete(
        request(provider, refuses, stream=True), read_timeout=10
    )
    assert streamed_flags(model_server, refuses)[4:] == [True, False]


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)


async def test_a_whole_request_after_an_empty_stream_survives_its_connection_reset(
    http: httpx.AsyncClient,
) -> None:
    """llama-cpp-python's server answers a streamed request offering tools, when its model
    picks a call, with a 200 and no event (its handler fails after the headers went) and resets
    the connection: the request asked whole after it, sent on that pooled connection, meets a
    reset (``ReadError``) and is sent again once, on a new connection, which answers."""
    connections = 0
    completion = json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": "Whole."},
                      "finish_reason": "stop"}]}
    ).encode()  # fmt: skip

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await _read_request(reader)
        if connections == 1:  # an event stream with no event, then a reset under the next
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 0\r\n\r\n"
            )
            await writer.drain()
            await _read_request(reader)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(completion), completion)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        models = ModelActivities(
            ProviderSettings.from_env({"LLAMACPP_BASE_URL": f"http://127.0.0.1:{port}/v1"}), http
        )
        response = await models.complete(
            ModelRequest(
                model="llamacpp:m", messages=(ChatMessage(role="user", content="Hi."),),
                stream=True,
            ),
            read_timeout=10,
        )  # fmt: skip
    finally:
        server.close()
        await server.wait_closed()
    assert response.content == "Whole."
    assert connections == 2


@pytest.mark.parametrize(
    ("provider", "status", "body"),
    [
        pytest.param(
            "openai",
            400,
            {
                "error": {
                    "message": "Unsupported value: 'stream' does not support true with this "
                    "model. Only the default (false) value is supported.",
                    "type": "invalid_request_error",
                    "param": "stream",
                    "code": "unsupported_value",
                }
            },
            id="a-model-that-cannot-stream",
        ),
        pytest.param(
            "openai",
            400,
            {"error": {"message": "Unsupported parameter.", "param": "stream_options"}},
            id="named-by-param-only",
        ),
        pytest.param(
            "openai",
            422,
            {
                "detail": [
                    {
                        "type": "extra_forbidden",
                        "loc": ["body", "stream_options"],
                        "msg": "Extra inputs are not permitted",
                    }
                ]
            },
            id="fastapi-extra-field",
        ),
        pytest.param("openai", 400, "Streaming is not supported.", id="plain-text"),
        pytest.param(
            "anthropic",
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "stream: Extra inputs are not permitted",
                },
            },
            id="anthropic-extra-input",
        ),
    ],
)
async def test_what_counts_as_a_refusal_to_stream(
    http: httpx.AsyncClient,
    model_server: ScriptedModelServer,
    provider: str,
    status: int,
    body: Any,
) -> None:
    """A 400 or 422 whose error names the stream, in its text or as its param: asked again
    without streaming, which answers."""
    name = scripted(
        model_server, {"content": "Answered.", "errors": [{"status": status, "body": body}]}
    )
    response = await activities(http, model_server).complete(
        request(provider, name, stream=True), read_timeout=10
    )
    assert response.content == "Answered."
    assert streamed_flags(model_server, name) == [True, False]


@pytest.mark.parametrize(
    ("status", "body", "retryable"),
    [
        pytest.param(400, None, False, id="invalid-request"),
        pytest.param(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            False,
            id="context-length",
        ),
        pytest.param(400, {"error": {"message": "Bad request upstream."}}, False, id="upstream"),
        pytest.param(
            400, {"error": {"message": "Bad.", "param": ["stream"]}}, False, id="param-not-a-name"
        ),
        pytest.param(404, {"error": {"message": "No stream route."}}, False, id="404"),
        pytest.param(
            429,
            {"error": {"message": "Too many streams.", "code": "rate_limit_exceeded"}},
            True,
            id="429",
        ),
    ],
)
async def test_other_errors_of_a_streaming_request_are_not_asked_again(
    http: httpx.AsyncClient,
    model_server: ScriptedModelServer,
    status: int,
    body: Any,
    retryable: bool,
) -> None:
    """A 400 not naming the stream (``upstream`` does not), and any other status, even one
    naming it: one request, and its error as it is, retryable or not as always."""
    name = scripted(model_server, {"content": "x", "errors": [{"status": status, "body": body}]})
    with pytest.raises(ModelHTTPError) as caught:
        await activities(http, model_server).complete(
            request("openai", name, stream=True), read_timeout=10
        )
    assert caught.value.status == status
    assert caught.value.to_application_error().non_retryable is not retryable
    assert streamed_flags(model_server, name) == [True]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_400_without_streaming_is_still_non_retryable(
    http: httpx.AsyncClient, model_server: ScriptedModelServer, provider: str
) -> None:
    """A request that does not stream, refused with a 400: call_model fails non-retryably with
    the provider's words, after one request."""
    body = (
        {"error": {"message": "Invalid 'messages': empty."}}
        if provider == "openai"
        else {"type": "error", "error": {"message": "Invalid 'messages': empty."}}
    )
    name = scripted(model_server, {"content": "x", "errors": [{"status": 400, "body": body}]})
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(
            activities(http, model_server).call_model, request(provider, name, stream=False)
        )
    assert caught.value.non_retryable
    assert caught.value.type == "ModelHTTPError"
    assert caught.value.message == f"{provider} returned HTTP 400: Invalid 'messages': empty."
    assert streamed_flags(model_server, name) == [False]


async def test_when_the_request_without_streaming_fails_too_its_error_is_reported(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused streaming, then a 400 without it: that second error is the call's, non-retryable,
    and nothing is remembered (the next call streams again); once a request without streaming
    is answered, the endpoint is remembered."""
    caplog.set_level(logging.WARNING)
    too_long = {"error": {"message": "Too long.", "code": "context_length_exceeded"}}
    with ScriptedModelServer(streaming=False) as server:
        name = scripted(server, {"content": "x", "errors": [{"status": 400, "body": too_long}]})
        models = activities(http, server)
        with pytest.raises(ModelHTTPError) as caught:
            await models.complete(request("openai", name, stream=True), read_timeout=10)
        assert str(caught.value) == "openai returned HTTP 400: Too long."
        assert caught.value.to_application_error().non_retryable
        assert refusals(caplog) == []
        for _ in range(2):
            await models.complete(request("openai", name, stream=True), read_timeout=10)
        assert streamed_flags(server, name) == [True, False, True, False, False]
    assert len(refusals(caplog)) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_keys_are_redacted_on_the_way_without_streaming(
    http: httpx.AsyncClient, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An error echoing the key, whole, in another case or in pieces, to the request asked
    again without streaming: call_model's failure holds no part of it; nor does the log of a
    refusal that echoed it. A key that reads ``stream`` (as this one does) decides nothing: an
    error echoing it is not a refusal."""
    caplog.set_level(logging.WARNING)
    echo: list[str] = ["exact", "upper", "prefix", "split"]
    refusal = (
        {"error": {"message": "Unrecognized request argument supplied: stream_options"}}
        if provider == "openai"
        else {"type": "error", "error": {"message": "stream: Extra inputs are not permitted"}}
    )
    fragments = (KEY, KEY.upper(), KEY[:20], KEY[8:16], KEY[-8:])
    with ScriptedModelServer(api_key=KEY) as server:
        fails = scripted(
            server,
            {
                "content": "x",
                "reject_stream": True,
                "errors": [{"status": 400, "echo_key": echo}],
            },
        )
        answers = scripted(
            server,
            {"content": "y", "errors": [{"status": 400, "body": refusal, "echo_key": echo}]},
        )
        echoes = scripted(server, {"content": "z", "errors": [{"status": 400, "echo_key": echo}]})
        models = activities(http, server, KEY)
        with pytest.raises(ApplicationError) as caught:
            await ActivityEnvironment().run(
                models.call_model, request(provider, fails, stream=True)
            )
        assert (
            await models.complete(request(provider, answers, stream=True), read_timeout=10)
        ).content == "y"
        with pytest.raises(ModelHTTPError):
            await models.complete(request(provider, echoes, stream=True), read_timeout=10)
        assert streamed_flags(server, fails) == [True, False]
        assert streamed_flags(server, answers) == [True, False]
        assert streamed_flags(server, echoes) == [True]
    assert caught.value.non_retryable
    (logged,) = refusals(caplog)
    for text in (caught.value.message, logged["refusal"]):
        assert "[redacted]" in text
        for fragment in fragments:
            assert fragment.lower() not in text.lower()
    assert "stream" in logged["refusal"]


# Batches on the run's stream


def simulate(
    batcher: TokenBatcher, times: list[float], end: float, texts: list[str] | None = None
) -> list[tuple[float, TokenDelta]]:
    """Feed text at each of ``times`` (``texts``, else "ab" each time) until the stream ends at
    ``end``, taking a batch whenever one is ready before it; the batches taken, with when."""
    texts = texts or ["ab"] * len(times)
    taken: list[tuple[float, TokenDelta]] = []
    index = 0
    while True:
        arrival = times[index] if index < len(times) else None
        ready = batcher.ready_at()
        moments = [m for m in (arrival, ready) if m is not None and m < end]
        if not moments:
            return taken
        now = min(moments)
        if now == arrival:
            batcher.add(texts[index], now)
            index += 1
        if (delta := batcher.take(now)) is not None:
            taken.append((now, delta))


def test_a_reply_that_comes_in_one_burst_publishes_nothing() -> None:
    """A server that answers whole (or sends the reply in one burst at its end) costs no signal:
    its text never waits HOLD_SECONDS with the stream still open."""
    batcher = TokenBatcher(step=3, attempt=1, started=0.0)
    assert simulate(batcher, [10.0] * 20, end=10.01) == []
    assert batcher.batches == 0


def test_a_call_that_ends_within_its_first_second_publishes_nothing() -> None:
    """Text streaming only in the first FIRST_BATCH_AFTER (1 s) of a try: no batch."""
    batcher = TokenBatcher(step=3, attempt=1, started=100.0)
    assert FIRST_BATCH_AFTER == 1.0
    assert simulate(batcher, [100.0 + t / 100 for t in range(95)], end=100.97) == []


def test_a_long_stream_sends_two_batches_with_contiguous_offsets() -> None:
    """Text every 50 ms for two minutes: a batch at 1 s and one 4 s later, MAX_TOKEN_BATCHES (2)
    in all; each starts where the one before ended and holds everything since."""
    batcher = TokenBatcher(step=7, attempt=1, started=0.0)
    taken = simulate(batcher, [t * 0.05 for t in range(1, 2400)], end=120.0)
    assert MAX_TOKEN_BATCHES == 2
    assert [round(when, 6) for when, _ in taken] == [1.0, 5.0]
    offset = 0
    for when, delta in taken:
        assert (delta.step, delta.attempt, delta.offset) == (7, 1, offset)
        assert len(delta.text) == 2 * round(when / 0.05) - offset
        offset += len(delta.text)


def test_a_long_fast_stream_sends_at_most_a_few_kb_whatever_its_length() -> None:
    """50 KB streamed in a second and a half: the batch is cut at MAX_BATCH_CHARS and is the
    try's last, so a reply of any length costs at most that much history (offsets stay
    contiguous: nothing after a cut)."""
    batcher = TokenBatcher(step=1, attempt=1, started=0.0)
    taken = simulate(batcher, [t * 0.01 for t in range(1, 150)], end=1.5, texts=["x" * 340] * 149)
    assert [(delta.offset, len(delta.text)) for _, delta in taken] == [(0, MAX_BATCH_CHARS)]
    slow = TokenBatcher(step=1, attempt=1, started=0.0)
    taken = simulate(slow, [t * 0.5 for t in range(1, 40)], end=20.0, texts=["y" * 100] * 39)
    assert [len(delta.text) for _, delta in taken] == [200, 800]  # at 1 s and 5 s, whole
    assert MAX_BATCH_CHARS <= 2_000


def test_later_tries_publish_half_as_many_batches_so_a_call_has_a_bound() -> None:
    """2 batches on the first try, 1 on the second, then none: at most 3 signals for a model
    call, however many tries it takes."""
    assert [batch_limit(n) for n in range(1, 7)] == [2, 1, 0, 0, 0, 0]
    assert MAX_TOKEN_BATCHES_PER_CALL == sum(batch_limit(n) for n in range(1, 101)) == 3
    for attempt in range(1, 5):
        batcher = TokenBatcher(step=1, attempt=attempt, started=0.0)
        taken = simulate(batcher, [t * 0.1 for t in range(1, 3000)], end=300.0)
        assert len(taken) == batch_limit(attempt)
        assert all(delta.attempt == attempt for _, delta in taken)


def arrival_patterns(count: int = 300) -> list[tuple[list[float], list[str], float, int]]:
    """Arrival times, texts, the stream's end and tries, drawn from a seeded generator of the
    test's own.

    Not hypothesis: its check that no strategy uses the ``random`` module fires when another
    thread of the session (a worker, a tracer making span ids) draws from it meanwhile, which
    made this test flaky in full runs."""
    rng = random.Random(20261126)
    alphabet = "ab c\u00e9\U0001f600\n"
    patterns = []
    for _ in range(count):
        times = sorted(rng.uniform(0, 60) for _ in range(rng.randint(0, 60)))
        texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 4))) for _ in range(60)]
        end = (times[-1] if times else 0.0) + rng.choice([0.0, 0.01, 0.4, 0.6, 3.0, 30.0])
        patterns.append((times, texts[: len(times)], end, rng.randint(1, 3)))
    return patterns


@pytest.mark.parametrize(("times", "texts", "end", "attempt"), arrival_patterns())
def test_any_arrival_pattern_keeps_the_policy(
    times: list[float], texts: list[str], end: float, attempt: int
) -> None:
    """Whenever text arrives and the stream ends: no batch before 1 s, 4 s at least between
    two, none after the end, none holding text that waited less than HOLD_SECONDS, at most the
    try's limit, offsets contiguous, and the batches together a prefix of the text."""
    batcher = TokenBatcher(step=2, attempt=attempt, started=0.0)
    taken = simulate(batcher, times, end, texts)
    assert len(taken) <= batch_limit(attempt)
    earliest, offset, published = FIRST_BATCH_AFTER, 0, 0
    for when, delta in taken:
        assert earliest <= when < end
        assert delta.offset == offset and delta.text
        arrived = [at for at, text in zip(times, texts, strict=True) if at <= when and text]
        assert when - arrived[published] >= HOLD_SECONDS - 1e-9  # its first piece waited
        published = len(arrived)
        earliest = when + NEXT_BATCH_AFTER
        offset += len(delta.text)
    assert "".join(texts).startswith("".join(d.text for _, d in taken))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_publisher_sends_in_the_background_one_batch_at_a_time() -> None:
    """A slow signal does not hold up the stream, and no second batch starts before the first
    is out; the text meanwhile waits for the next batch, which holds all of it."""
    clock, sent, release = Clock(), [], asyncio.Event()

    async def publish(delta: TokenDelta) -> None:
        await release.wait()
        sent.append(delta)

    publisher = TokenPublisher(TokenBatcher(step=1, attempt=1, started=0.0), publish, clock=clock)
    clock.now = 0.4
    publisher("one ")  # waits: not yet a second into the try, nor held half a second
    clock.now = 1.2
    publisher("two ")  # ready: sending starts in the background
    clock.now = 6.0
    publisher("three ")  # due too, but the first is still being sent
    await asyncio.sleep(0)
    assert sent == []
    release.set()
    await asyncio.sleep(0.01)
    assert [(d.offset, d.text) for d in sent] == [(0, "one two ")]
    clock.now = 7.0
    publisher("four")  # "three " has waited its hold, the batch is due: both go out
    await asyncio.sleep(0.01)
    assert [(d.offset, d.text) for d in sent] == [(0, "one two "), (8, "three four")]
    await publisher.aclose()


async def test_the_end_of_a_call_publishes_no_remainder_but_lets_a_batch_land() -> None:
    """aclose waits for a batch being sent, then nothing more goes out: the rest of the text is
    the workflow's to publish, whole."""
    clock, sent = Clock(), []

    async def publish(delta: TokenDelta) -> None:
        await asyncio.sleep(0.05)
        sent.append(delta)

    publisher = TokenPublisher(TokenBatcher(step=1, attempt=1, started=0.0), publish, clock=clock)
    clock.now = 0.5
    publisher("first")
    clock.now = 1.0
    publisher(",")  # "first" has waited its hold: sent
    clock.now = 10.0
    publisher(" second")  # a batch is due, but this text has not waited
    await publisher.aclose()
    assert [d.text for d in sent] == ["first,"]
    publisher(" third")
    await asyncio.sleep(0.1)
    assert [d.text for d in sent] == ["first,"]


async def test_a_failed_call_abandons_the_batch_being_sent() -> None:
    """When the call fails or is cancelled, a signal still in flight is not waited for."""
    clock, sent = Clock(), []

    async def publish(delta: TokenDelta) -> None:
        await asyncio.sleep(60)
        sent.append(delta)

    publisher = TokenPublisher(TokenBatcher(step=1, attempt=1, started=0.0), publish, clock=clock)
    publisher("text")
    clock.now = 1.0
    publisher(" more")
    async with asyncio.timeout(1):
        await publisher.aclose(wait=0)
    assert sent == []


async def test_a_failing_publish_is_logged_once_and_never_fails_the_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first signal fails (the run is gone): one warning, and no further attempt to send."""
    caplog.set_level(logging.WARNING)
    clock, calls = Clock(), []

    async def publish(delta: TokenDelta) -> None:
        calls.append(delta)
        raise RuntimeError("workflow not found")

    publisher = TokenPublisher(TokenBatcher(step=1, attempt=1, started=0.0), publish, clock=clock)
    for second in range(1, 60):
        clock.now = float(second)
        publisher("text ")
        await asyncio.sleep(0)
    await publisher.aclose()
    assert len(calls) == 1
    assert publisher.failed
    warnings = [r for r in caplog.records if r.getMessage() == "model.tokens.publish_failed"]
    assert len(warnings) == 1
    assert "workflow not found" in warnings[0].__dict__["error"]


# Inside an activity


def stream_request(name: str, step: int = 4) -> ModelRequest:
    return request("openai", name, stream=True, step=step)


class CountingTransport(httpx.AsyncBaseTransport):
    """The real HTTP transport, counting the server-sent events it has handed on so far (each
    ends with a blank line): how far a stream has been read at a given moment."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport(retries=0)
        self._received = bytearray()

    @property
    def events(self) -> int:
        return self._received.count(b"\n\n")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Counted(response.stream, self._received),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Counted(httpx.AsyncByteStream):
    def __init__(self, inner: Any, received: bytearray) -> None:
        self._inner, self._received = inner, received

    async def __aiter__(self) -> Any:
        async for chunk in self._inner:
            self._received.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_a_long_stream_keeps_heartbeating_and_publishing_cannot_fail_it(
    model_server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """call_model in an activity context with no client to publish with: the call still
    answers (a warning says why nothing was published), and heartbeats go on while the stream
    is read, through a stream longer than the heartbeat timeout."""
    caplog.set_level(logging.WARNING)
    # The server sends an event every 0.25 s after the first: the stream lasts longer than
    # the 1.5 s heartbeat timeout by construction, and beats go every 0.5 s.
    name = scripted(model_server, {"content": "a b c d e f g h", "chunk_delay": 0.25})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=1.5))
    transport = CountingTransport()
    read_at_beats: list[int] = []
    env.on_heartbeat = lambda *details: read_at_beats.append(transport.events)
    async with httpx.AsyncClient(transport=transport) as http:
        response = await env.run(activities(http, model_server).call_model, stream_request(name))
    assert response.content == "a b c d e f g h"
    # Beats while the stream was part read: after its first event and before its last, more
    # than once (not one beat at the start, nor only after the answer).
    during = [n for n in read_at_beats if 0 < n < transport.events]
    assert len(during) >= 2, (read_at_beats, transport.events)
    assert len(set(during)) >= 2, (read_at_beats, transport.events)
    assert "model.tokens.publish_failed" in caplog.text


PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"


async def published_tokens(client: Client, handle: WorkflowHandle[Any, Any]) -> list[TokenDelta]:
    """The run's tokens topic, read as a watcher reads it: the stream's poll query."""
    result: PollResult = await handle.query(
        "__temporal_workflow_stream_poll",
        PollInput(topics=[TOKENS_TOPIC], from_offset=0),
        result_type=PollResult,
    )
    converter = client.data_converter.payload_converter
    return [
        converter.from_payload(Payload.FromString(base64.b64decode(item.data)), TokenDelta)
        for item in result.items
    ]


async def test_a_slow_stream_publishes_batches_on_the_runs_stream(
    harness: Harness, http: httpx.AsyncClient
) -> None:
    """call_model streaming for the run that scheduled it (an activity context naming a live
    run): TokenDeltas appear on the run's tokens topic, read with the stream's poll query, in
    fewer batches than chunks, with contiguous offsets that spell the start of the reply; the
    rest is not published."""
    write = {"name": "write_file", "arguments": {"path": "a.md", "content": "a"}}
    handle = await harness.start(
        harness.script({"tool_calls": [write]}), require_approval=["write_file"]
    )
    await harness.wait_for_state(handle, "WaitingForHuman")  # a live run, no activity running
    text = " ".join(f"w{n}" for n in range(30))
    name = scripted(harness.models, {"content": text, "chunk_delay": 0.1})
    env = ActivityEnvironment(client=harness.client)
    env.info = dataclasses.replace(env.info, workflow_id=handle.id, attempt=1)
    response = await env.run(activities(http, harness.models).call_model, stream_request(name, 9))
    assert response.content == text
    history = await handle.fetch_history()
    signals = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == PUBLISH_SIGNAL
    ]
    # 3.1 s of stream: batches are due at 0.5 s and 1.5 s (the third only at 3.5 s).
    assert 1 <= len(signals) <= 3
    async with asyncio.timeout(10):  # the run applies the signals in its next workflow task
        while len(deltas := await published_tokens(harness.client, handle)) < len(signals):
            await asyncio.sleep(0.05)
    assert len(deltas) == len(signals)
    offset = 0
    for delta in deltas:
        assert (delta.step, delta.attempt, delta.offset) == (9, 1, offset)
        offset += len(delta.text)
    assert 0 < offset < len(text)  # the rest is the workflow's to publish, whole
    assert text.startswith("".join(d.text for d in deltas))
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()


async def test_no_publishing_without_streaming_or_outside_an_activity(
    http: httpx.AsyncClient, model_server: ScriptedModelServer
) -> None:
    """A call that does not stream, or a streaming one called directly (as tests and tools do),
    has nothing to publish to and answers all the same."""
    name = scripted(model_server, {"content": "plain", "chunk_delay": 0.01})
    models = activities(http, model_server)
    env = ActivityEnvironment()
    assert (await env.run(models.call_model, request("openai", name, stream=False))).content == (
        "plain"
    )
    response = await models.complete(stream_request(name), read_timeout=10)
    assert response.content == "plain"
