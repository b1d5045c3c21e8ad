"""Whatever a provider sends, the model activity answers with a ``ModelResponse`` Temporal can
carry, or with one of its own ``ModelError``s, never another exception (properties, both
protocols: the parsers fed directly, and whole bodies over HTTP from a real local server)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter

from treadle.activities.errors import ModelError, ModelResponseError
from treadle.activities.model import anthropic_messages, openai_chat
from treadle.activities.model.activity import ModelActivities, ProviderSettings
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import ChatMessage, ModelRequest, ModelResponse

Parser = Callable[[Any, str], ModelResponse]

ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12)
"""Lone surrogates included: JSON text may spell them, and json.loads keeps them."""

NUMBERS = (
    st.integers()
    | st.integers(min_value=2**53 - 2, max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
)

JSON = st.recursive(
    st.none() | st.booleans() | NUMBERS | ANY_TEXT,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(ANY_TEXT | st.sampled_from(["type", "text", "id"]), children, max_size=3)
    ),
    max_leaves=10,
)


def maybe(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly what the protocol promises, sometimes anything at all."""
    return st.one_of(right, right, right, JSON)


COUNT = maybe(st.none() | st.integers(min_value=0, max_value=10**6)) | NUMBERS
USAGE = st.fixed_dictionaries(
    {},
    optional={
        field: COUNT
        for field in (
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
    }
    | {
        "prompt_tokens_details": maybe(st.fixed_dictionaries({}, optional={"cached_tokens": COUNT}))
    },
)

OPENAI_CALL = st.fixed_dictionaries(
    {},
    optional={
        "id": maybe(ANY_TEXT),
        "type": st.just("function"),
        "function": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": maybe(st.sampled_from(["list_dir", "read_file"]) | ANY_TEXT),
                    "arguments": maybe(ANY_TEXT | JSON.map(json.dumps)) | JSON,
                },
            )
        ),
    },
)
OPENAI_CHOICE = st.fixed_dictionaries(
    {},
    optional={
        "message": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "role": st.just("assistant"),
                    "content": maybe(st.none() | ANY_TEXT),
                    "tool_calls": maybe(st.lists(OPENAI_CALL, max_size=3)),
                },
            )
        ),
        "finish_reason": maybe(st.sampled_from(["stop", "tool_calls"]) | ANY_TEXT),
        "logprobs": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "content": maybe(
                        st.lists(st.fixed_dictionaries({"logprob": maybe(NUMBERS)}), max_size=4)
                    )
                },
            )
        ),
    },
)
OPENAI = st.fixed_dictionaries(
    {},
    optional={
        "choices": maybe(st.lists(OPENAI_CHOICE, max_size=2)),
        "usage": maybe(USAGE),
        "model": maybe(ANY_TEXT),
    },
)

ANTHROPIC_BLOCK = st.fixed_dictionaries(
    {"type": maybe(st.sampled_from(["text", "tool_use", "thinking"]))},
    optional={
        "text": maybe(ANY_TEXT),
        "id": maybe(ANY_TEXT),
        "name": maybe(st.sampled_from(["write_file"]) | ANY_TEXT),
        "input": maybe(st.dictionaries(ANY_TEXT, JSON, max_size=3)),
    },
)
ANTHROPIC = st.fixed_dictionaries(
    {},
    optional={
        "content": maybe(st.lists(ANTHROPIC_BLOCK, max_size=3)),
        "usage": maybe(USAGE),
        "stop_reason": maybe(ANY_TEXT),
        "model": maybe(ANY_TEXT),
    },
)

PROTOCOLS: dict[str, tuple[Parser, st.SearchStrategy[Any]]] = {
    "openai": (openai_chat.parse_response, OPENAI),
    "anthropic": (anthropic_messages.parse_response, ANTHROPIC),
}


def assert_carried_whole(response: ModelResponse) -> None:
    """The response goes through Temporal's pydantic converter and comes back equal."""
    converter = pydantic_data_converter.payload_converter
    (back,) = converter.from_payloads(converter.to_payloads([response]), [ModelResponse])
    assert back == response
    assert response.confidence is None or 0 < response.confidence <= 1
    for call in response.tool_calls:
        json.dumps(call.arguments)  # text a workflow can hold: no lone surrogate
        call.arguments.encode("utf-8")
    usage = response.usage
    assert all(0 <= n < 2**55 for n in (usage.prompt_tokens, usage.total_tokens))


def check_parse(provider: str, payload: Any) -> None:
    parse, _ = PROTOCOLS[provider]
    try:
        response = parse(payload, provider)
    except ModelResponseError as exc:
        assert str(exc).startswith(f"{provider} response ")
        return
    assert isinstance(response, ModelResponse)
    assert_carried_whole(response)


@settings(max_examples=200, database=None, deadline=None)
@given(st.sampled_from(sorted(PROTOCOLS)), st.data())
def test_protocol_shaped_bodies_parse_or_are_a_model_response_error(
    provider: str, data: st.DataObject
) -> None:
    """Bodies shaped like the protocol's, with any value anywhere: a response Temporal carries
    unchanged, or ``ModelResponseError`` — never another exception."""
    check_parse(provider, data.draw(PROTOCOLS[provider][1]))


@settings(max_examples=200, database=None, deadline=None)
@given(st.sampled_from(sorted(PROTOCOLS)), JSON)
def test_any_json_value_parses_or_is_a_model_response_error(provider: str, payload: Any) -> None:
    """Any JSON value at all as the body: the same two outcomes."""
    check_parse(provider, payload)


def test_bodies_nested_beyond_the_recursion_limit_are_a_model_response_error() -> None:
    """A body nested deeper than Python recurses: ``ModelResponseError``, not RecursionError."""
    deep: Any = "x"
    for _ in range(5000):
        deep = {"a": [deep]}
    call = {"function": {"name": "list_dir", "arguments": deep}}
    check_parse("openai", {"choices": [{"message": {"tool_calls": [call]}}]})
    check_parse("anthropic", {"content": [{"type": "tool_use", "name": "x", "input": deep}]})
    for provider in PROTOCOLS:
        with pytest.raises(ModelResponseError, match="nested too deeply"):
            PROTOCOLS[provider][0]({"choices": [deep], "content": [deep], "usage": deep}, provider)


def test_the_properties_can_fail() -> None:
    """The check itself rejects a response Temporal could not carry (a lone surrogate)."""
    raw = ModelResponse(content="\ud800")
    try:
        assert_carried_whole(raw)
    except Exception as exc:  # the converter's own error, whichever it is
        assert "surrogate" in str(exc)
    else:
        raise AssertionError("a lone surrogate passed the check")


BODIES = (
    JSON.map(json.dumps)  # ensure_ascii: lone surrogates travel as \ud800 escapes
    | st.builds(json.dumps, OPENAI)
    | st.builds(json.dumps, ANTHROPIC)
    | st.text(max_size=40)
    | st.sampled_from(["[" * 50_000 + "]" * 50_000, '{"choices": [', "NaN", ""])
)


@settings(
    max_examples=60,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    provider=st.sampled_from(sorted(PROTOCOLS)),
    status=st.sampled_from([200, 200, 200, 400, 401, 429, 500, 503]),
    body=BODIES,
)
def test_any_body_over_http_is_a_response_or_a_model_error(
    model_server: ScriptedModelServer, provider: str, status: int, body: str
) -> None:
    """Any body, under any status, from a real local HTTP server through the activity's own
    HTTP code: a response Temporal carries, or a ``ModelError`` whose failure Temporal can
    encode — never another exception."""
    name = f"p-{uuid.uuid4().hex[:10]}"
    model_server.add_model(name, [{"raw": body, "raw_status": status}])
    env = {"OPENAI_BASE_URL": model_server.base_url, "ANTHROPIC_BASE_URL": model_server.base_url}
    request = ModelRequest(
        model=f"{provider}:{name}", messages=(ChatMessage(role="user", content="hi"),)
    )

    async def call() -> ModelResponse | ModelError:
        async with httpx.AsyncClient() as http:
            models = ModelActivities(ProviderSettings.from_env(env), http)
            try:
                return await models.complete(request, read_timeout=10)
            except ModelError as exc:
                return exc

    outcome = asyncio.run(call())  # a sync test: no event loop is running in this thread
    if isinstance(outcome, ModelResponse):
        assert status == 200
        assert_carried_whole(outcome)
        return
    failure = Failure()
    pydantic_data_converter.failure_converter.to_failure(
        outcome.to_application_error(), pydantic_data_converter.payload_converter, failure
    )
    assert failure.message == str(outcome)
