"""The OpenAI chat-completions wire protocol with native tool calling.

Covers OpenAI itself and every compatible endpoint (Ollama, vLLM, llama.cpp's server, LM Studio,
OpenRouter, and Treadle's scripted model server). Pure translation: builds the request body,
parses the response body, and says where an error body keeps the provider's message (the HTTP
failures themselves are handled for every protocol by ``http_errors``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from activities.errors import ModelResponseError
from activities.model.payload import parse_checked, token_count
from workflows.agent.catalogue import TOOLS
from workflows.agent.models import ChatMessage, ModelRequest, ModelResponse, TokenUsage, ToolCall


def path() -> str:
    return "/chat/completions"


def headers(api_key: str | None) -> dict[str, str]:
    result = {"content-type": "application/json"}
    if api_key:
        result["authorization"] = f"Bearer {api_key}"
    return result


def tool_definitions(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """JSON-Schema tool definitions for the named catalogue tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": TOOLS[name].name,
                "description": TOOLS[name].description,
                "parameters": TOOLS[name].json_schema(),
            },
        }
        for name in names
        if name in TOOLS
    ]


def _message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    body: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        body["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    return body


def build_body(request: ModelRequest, model_name: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model_name,
        "messages": [_message(m) for m in request.messages],
    }
    tools = tool_definitions(request.tools)
    if tools:
        body["tools"] = tools
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.logprobs:
        body["logprobs"] = True
    return body


def _logprob(token: Any) -> float | None:
    """A token's log-probability, if it has a usable one (finite, a probability's log)."""
    value = token.get("logprob") if isinstance(token, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return min(number, 0.0) if math.isfinite(number) else None


def _confidence(choice: dict[str, Any]) -> float | None:
    """exp(mean log-probability) of the returned tokens; ``None`` when none were returned."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    values = [v for v in map(_logprob, content) if v is not None]
    if not values:
        return None
    return math.exp(math.fsum(values) / len(values))


def error_message(payload: Any) -> str | None:
    """The provider's message in an error body: ``{"error": {"message": ...}}``, or the
    ``{"error": "..."}`` some compatible servers send."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return None


def parse_response(payload: Any, provider: str) -> ModelResponse:
    """Check the body against what the protocol promises and translate it (see
    ``payload.parse_checked``)."""
    return parse_checked(payload, provider, _parse)


def _parse(payload: dict[str, Any], provider: str) -> ModelResponse:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelResponseError(f"{provider} response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ModelResponseError(f"{provider} response choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ModelResponseError(f"{provider} response content is not text")

    calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise ModelResponseError(f"{provider} response tool_calls is not a list")
    for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise ModelResponseError(f"{provider} response tool call #{index + 1} has no name")
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            # Some compatible servers send an object instead of JSON text; keep it faithful.
            arguments = json.dumps(arguments)
        call_id = raw.get("id") if isinstance(raw, dict) else None
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                name=name,
                arguments=arguments,
            )
        )

    raw_usage = payload.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    prompt = token_count(usage, "prompt_tokens", provider)
    completion = token_count(usage, "completion_tokens", provider)
    total = token_count(usage, "total_tokens", provider)
    finish_reason = choices[0].get("finish_reason")
    model = payload.get("model")
    return ModelResponse(
        content=content,
        tool_calls=tuple(calls),
        usage=TokenUsage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=total or prompt + completion,
            cached_tokens=token_count(details, "cached_tokens", provider)
            if isinstance(details, dict)
            else 0,
        ),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=model if isinstance(model, str) else None,
        confidence=_confidence(choices[0]),
    )
