"""Model strings, per-task-type selection, provider settings, and the Anthropic wire format."""

from __future__ import annotations

import json

import pytest

from treadle.activities.errors import ModelResponseError
from treadle.activities.model.activity import ProviderSettings
from treadle.activities.model.anthropic_messages import build_body, parse_response
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    ChatMessage,
    ModelRequest,
    ToolCall,
)
from treadle.workflows.agent.messages.providers import ModelStringError, resolve, select


def test_model_strings_resolve_to_provider_and_model() -> None:
    """`provider:model` splits; a bare provider means its default model."""
    assert resolve("openai:gpt-4o")[1] == "gpt-4o"
    assert resolve("anthropic")[1] == "claude-sonnet-4-5"
    assert resolve("ollama:")[1] == "llama3.2"
    assert resolve("openrouter:meta-llama/llama-3.1-70b")[1] == "meta-llama/llama-3.1-70b"
    assert resolve("anthropic:claude-sonnet-4-5")[0].protocol == "anthropic"
    assert resolve("vllm:qwen")[0].protocol == "openai"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("gpt-4o", "unknown model provider 'gpt-4o'"),
        ("azure:x", "unknown model provider 'azure'"),
        ("vllm", "vllm has no default model"),
    ],
)
def test_bad_model_strings_are_refused_when_the_run_starts(model: str, message: str) -> None:
    """An unknown provider or a provider without a default is an input error, not a run error."""
    with pytest.raises(ModelStringError, match=message):
        resolve(model)
    with pytest.raises(ValueError, match=message):
        AgentInput(task="t", workspace="/w", model=model)
    with pytest.raises(ValueError, match=message):
        AgentConfig(models={"default": model})


def test_model_selection_follows_agentsm() -> None:
    """models[task_type], then models['default'], then the run's model."""
    models = {"calculation": "ollama:qwen2.5-coder:7b", "default": "anthropic"}
    assert select(models, "calculation", "openai:gpt-4o") == "ollama:qwen2.5-coder:7b"
    assert select(models, "research", "openai:gpt-4o") == "anthropic:claude-sonnet-4-5"
    assert select({}, "research", "openai:gpt-4o") == "openai:gpt-4o"
    assert select({}, "research", "openai") == "openai:gpt-4o-mini"


def test_provider_settings_from_the_worker_environment() -> None:
    """Base URLs and keys come from the environment; a custom base URL makes the key optional."""
    settings = ProviderSettings.from_env(
        {
            "ANTHROPIC_API_KEY": "sk-ant-secret-value",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "OLLAMA_BASE_URL": "http://gpu-box:11434/v1",
        }
    )
    anthropic = settings.endpoints["anthropic"]
    assert anthropic.base_url == "https://api.anthropic.com/v1"
    assert anthropic.key_required
    assert anthropic.api_key == "sk-ant-secret-value"
    assert "sk-ant-secret-value" not in repr(settings)
    assert not settings.endpoints["openai"].key_required
    assert settings.endpoints["ollama"].base_url == "http://gpu-box:11434/v1"
    assert ProviderSettings.from_env({}).endpoints["openai"].key_required


def _conversation() -> ModelRequest:
    calls = (
        ToolCall(id="t1", name="read_file", arguments='{"path": "a.txt"}'),
        ToolCall(id="t2", name="list_dir", arguments="{}"),
    )
    return ModelRequest(
        model="anthropic:claude-sonnet-4-5",
        messages=(
            ChatMessage(role="system", content="be brief"),
            ChatMessage(role="user", content="do it"),
            ChatMessage(role="assistant", content="looking", tool_calls=calls),
            ChatMessage(role="tool", tool_call_id="t1", content="alpha"),
            ChatMessage(role="tool", tool_call_id="t2", content="ERROR: no such dir"),
            ChatMessage(role="user", content="note from the loop"),
        ),
        tools=("read_file", "list_dir"),
    )


def test_anthropic_body_uses_blocks_and_alternating_roles() -> None:
    """System on top; tool_use in the assistant turn; results (and notes) share one user turn."""
    body = build_body(_conversation(), "claude-sonnet-4-5")
    assert body["system"] == "be brief"
    assert body["max_tokens"] == 4096
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assistant = body["messages"][1]["content"]
    assert assistant[0] == {"type": "text", "text": "looking"}
    assert assistant[1] == {
        "type": "tool_use",
        "id": "t1",
        "name": "read_file",
        "input": {"path": "a.txt"},
    }
    results = body["messages"][2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[0]["is_error"] is False
    assert results[1]["is_error"] is True
    assert {t["name"] for t in body["tools"]} == {"read_file", "list_dir"}
    assert "input_schema" in body["tools"][0]


def test_anthropic_response_becomes_text_calls_and_usage() -> None:
    """Text blocks join; tool_use inputs become JSON arguments; cache reads count as prompt."""
    response = parse_response(
        {
            "model": "claude",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "x"}},
            ],
            "stop_reason": "tool_use",
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_read_input_tokens": 90,
                "cache_creation_input_tokens": 0,
            },
        },
        "anthropic",
    )
    assert response.content == "Reading."
    assert response.tool_calls == (
        ToolCall(id="toolu_1", name="read_file", arguments='{"path": "x"}'),
    )
    assert json.loads(response.tool_calls[0].arguments) == {"path": "x"}
    assert (response.usage.prompt_tokens, response.usage.cached_tokens) == (100, 90)
    assert response.usage.total_tokens == 105
    assert response.confidence is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"content": "text"}, "has no content blocks"),
        ({"content": [{"type": "tool_use", "input": {}}]}, "has no name"),
        ({"content": [{"type": "tool_use", "name": "x", "input": []}]}, "not an object"),
    ],
)
def test_anthropic_bodies_that_break_the_protocol(body: object, message: str) -> None:
    """Protocol violations are typed, retryable errors."""
    with pytest.raises(ModelResponseError, match=message):
        parse_response(body, "anthropic")
