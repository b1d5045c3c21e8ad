"""The OpenAI chat-completions wire protocol with native tool calling.

Covers OpenAI itself and every compatible endpoint (Ollama, vLLM, llama.cpp's server, LM Studio,
OpenRouter, and Treadle's scripted model server). Pure translation: builds the request body,
parses the response body, and says where an error body keeps the provider's message (the HTTP
failures themselves are handled for every protocol by ``http_errors``).

Streaming (``"stream": true``, with ``stream_options.include_usage`` so the last chunk carries
the usage) sends ``chat.completion.chunk`` events ending in ``data: [DONE]``: the text in
``delta.content`` pieces, each tool call as ``delta.tool_calls`` entries keyed by ``index`` (its
id and name first, then its arguments in fragments), ``finish_reason`` in a late chunk, and
log-probabilities per chunk. ``ChunkAssembler`` puts them back together into the body the
non-streaming call returns, so confidence works when streaming too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from treadle.activities.errors import ModelResponseError
from treadle.activities.model import grammar_limits, http_errors
from treadle.activities.model import (
    payload as wire,  # values read from JSON, shared by the protocols
)
from treadle.activities.model.streaming import (
    ErrorEvent,
    ServerSentEvent,
    StreamedText,
    TextCallback,
    event_json,
)
from treadle.workflows.agent.messages.models import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    TokenUsage,
    ToolCall,
)


def path() -> str:
    return "/chat/completions"


def headers(api_key: str | None) -> dict[str, str]:
    result = {"content-type": "application/json"}
    if api_key:
        result["authorization"] = f"Bearer {api_key}"
    return result


def tool_definitions(request: ModelRequest) -> list[dict[str, Any]]:
    """JSON-Schema tool definitions: the named catalogue tools, then the request's others."""
    return [
        {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": schema},
        }
        for name, description, schema in wire.offered_schemas(request)
    ]


def _message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    body: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        # Strict servers' chat templates (llama.cpp's, and LiteLLM's pass-through to them)
        # fail on a null content beside tool calls; an empty string means the same to OpenAI.
        body["content"] = message.content or ""
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
    tools = tool_definitions(request)
    if tools:
        body["tools"] = tools
        # OpenAI's default, said out loud: servers that only render the tools into the prompt
        # when asked (llama.cpp's function-calling formats) otherwise never show them.
        body["tool_choice"] = "required" if request.require_tool else "auto"
    if request.output_schema is not None:
        # Structured output: the reply's text is JSON for the schema (a typed answer). Not
        # strict: strict mode refuses schemas with optional fields, which pydantic's have.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": "final_answer",
                "schema": grammar_limits.offered(request.output_schema),
            },
        }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    body["max_tokens"] = request.max_tokens or wire.DEFAULT_MAX_TOKENS
    if request.logprobs:
        # Without top_logprobs some servers (llama.cpp's) return no log-probabilities at all.
        body["logprobs"] = True
        body["top_logprobs"] = 1
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
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
    return wire.parse_checked(payload, provider, _parse)


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

    finish_reason = choices[0].get("finish_reason")
    model = payload.get("model")
    return ModelResponse(
        content=content,
        tool_calls=tuple(calls),
        usage=token_usage(payload.get("usage"), provider),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=model if isinstance(model, str) else None,
        confidence=_confidence(choices[0]),
    )


def token_usage(raw_usage: Any, provider: str) -> TokenUsage:
    """A reply's ``usage`` object as counts (zero where it says nothing)."""
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    prompt = wire.token_count(usage, "prompt_tokens", provider)
    completion = wire.token_count(usage, "completion_tokens", provider)
    total = wire.token_count(usage, "total_tokens", provider)
    cached = 0
    if isinstance(details, dict):
        cached = wire.token_count(details, "cached_tokens", provider)
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total or prompt + completion,
        cached_tokens=cached,
    )


def stream_assembler(provider: str, on_text: TextCallback | None) -> ChunkAssembler:
    return ChunkAssembler(provider, on_text)


@dataclass
class _Call:
    """One tool call as its deltas arrive."""

    id: str | None = None
    name: str | None = None
    pieces: list[str] | None = None
    """Fragments of the arguments' text; ``None`` until one arrives."""
    whole: Any = None
    """Arguments sent as an object, as some compatible servers do."""

    def body(self) -> dict[str, Any]:
        arguments = self.whole
        if self.pieces is not None:
            arguments = wire.rejoined("".join(self.pieces))
        return {"id": self.id, "function": {"name": self.name, "arguments": arguments}}


class ChunkAssembler:
    """Chat-completion chunks put back together into a chat completion (its first choice)."""

    end = "data: [DONE]"

    def __init__(self, provider: str, on_text: TextCallback | None = None) -> None:
        self.provider = provider
        self.done = False
        self._text = StreamedText(on_text)
        self._has_content = False
        """Some delta carried ``content`` as text (perhaps empty): the content is not null."""
        self._has_choice = False
        self._calls: dict[int, _Call] = {}
        self._finish_reason: Any = None
        self._model: Any = None
        self._usage: Any = None
        self._logprobs: list[Any] | None = None

    def feed(self, event: ServerSentEvent) -> None:
        if self.done:
            return
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = event_json(event, self.provider)
        if not isinstance(chunk, dict):
            raise ModelResponseError(f"{self.provider} stream chunk is not a JSON object")
        if chunk.get("error") is not None:
            raise ErrorEvent(chunk, event.data)
        if isinstance(chunk.get("model"), str):
            self._model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):  # the last chunk's; the others' are null
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            raise ModelResponseError(f"{self.provider} stream chunk choices is not a list")
        for choice in choices:
            if not isinstance(choice, dict):
                raise ModelResponseError(f"{self.provider} stream chunk choice is not an object")
            if choice.get("index", 0) != 0:
                continue  # only the first choice is read, as without streaming
            self._has_choice = True
            self._delta(choice.get("delta"))
            if choice.get("finish_reason") is not None:
                self._finish_reason = choice["finish_reason"]
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
                if self._logprobs is None:
                    self._logprobs = []
                self._logprobs.extend(logprobs["content"])

    def _delta(self, delta: Any) -> None:
        if delta is None:
            return
        if not isinstance(delta, dict):
            raise ModelResponseError(f"{self.provider} stream chunk delta is not an object")
        content = delta.get("content")
        if isinstance(content, str):
            self._has_content = True
            self._text.add(content)
        elif content is not None:
            raise ModelResponseError(f"{self.provider} response content is not text")
        calls = delta.get("tool_calls")
        if calls is None:
            return
        if not isinstance(calls, list):
            raise ModelResponseError(f"{self.provider} response tool_calls is not a list")
        for position, raw in enumerate(calls):
            if not isinstance(raw, dict):
                raise ModelResponseError(f"{self.provider} stream tool call delta is malformed")
            index = raw.get("index", position)
            if not isinstance(index, int) or isinstance(index, bool):
                raise ModelResponseError(f"{self.provider} stream tool call delta has no index")
            call = self._calls.setdefault(index, _Call())
            # The id and the name come once, whole; a server repeating them is not doubled.
            if call.id is None and isinstance(raw.get("id"), str) and raw["id"]:
                call.id = raw["id"]
            function = raw.get("function")
            if function is None:
                continue
            if not isinstance(function, dict):
                raise ModelResponseError(f"{self.provider} stream tool call delta is malformed")
            if call.name is None and isinstance(function.get("name"), str) and function["name"]:
                call.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                if call.pieces is None:
                    call.pieces = []
                call.pieces.append(arguments)
            elif arguments is not None:
                call.whole = arguments

    def reported_usage(self) -> TokenUsage | None:
        """The usage a chunk reported so far (OpenAI sends it in the last chunk; vLLM, asked
        for continuous usage, in each); ``None`` when none did."""
        if not isinstance(self._usage, dict):
            return None
        try:
            return token_usage(self._usage, self.provider)
        except ModelResponseError:
            return None

    def result(self) -> ModelResponse:
        if self._has_choice and self._finish_reason is None:
            # A server may end a stream it cut (another request took its slot) with a regular
            # [DONE]: without a finish reason the text is not known to be whole.
            raise http_errors.stream_ended(self.provider, "a finish reason")
        self._text.close()
        message: dict[str, Any] = {"content": self._text.text if self._has_content else None}
        if self._calls:
            message["tool_calls"] = [self._calls[i].body() for i in sorted(self._calls)]
        choice: dict[str, Any] = {"message": message, "finish_reason": self._finish_reason}
        if self._logprobs is not None:
            choice["logprobs"] = {"content": self._logprobs}
        payload = {
            "choices": [choice] if self._has_choice else [],
            "model": self._model,
            "usage": self._usage,
        }
        return parse_response(payload, self.provider)
