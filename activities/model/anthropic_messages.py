"""The Anthropic Messages API: ``tool_use`` / ``tool_result`` content blocks.

Pure translation between Treadle's provider-neutral messages and Anthropic's wire format. The
differences that matter: the system prompt is a top-level field, ``max_tokens`` is required,
tool calls are ``tool_use`` blocks whose ``input`` is a JSON object, and their results travel
back as ``tool_result`` blocks inside a *user* message (several results, and any note after
them, share one user message so roles keep alternating). Error bodies keep the message in
``error.message``; the HTTP failures themselves are handled for every protocol by
``http_errors``.

Streaming (``"stream": true``) sends ``message_start`` (the message without content, usage with
the input counts), each content block as ``content_block_start``, its ``content_block_delta``s
(``text_delta`` text, ``input_json_delta`` fragments of a tool call's input) and
``content_block_stop``, then ``message_delta`` (stop reason, final usage) and ``message_stop``;
``ping`` at any time, ``error`` when the provider fails mid-stream. ``EventAssembler`` puts the
events back together into the message the non-streaming call returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from treadle.activities.errors import ModelResponseError
from treadle.activities.model.payload import (
    DEFAULT_MAX_TOKENS,
    offered_schemas,
    parse_checked,
    rejoined,
    token_count,
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

API_VERSION = "2023-06-01"


def path() -> str:
    return "/messages"


def headers(api_key: str | None) -> dict[str, str]:
    result = {"content-type": "application/json", "anthropic-version": API_VERSION}
    if api_key:
        result["x-api-key"] = api_key
    return result


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the JSON object Anthropic needs. Malformed text (it can only come
    from another provider's model earlier in a conversation) is carried, not lost."""
    try:
        decoded = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {"_unparsed_arguments": arguments}
    return decoded if isinstance(decoded, dict) else {"_unparsed_arguments": arguments}


def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "tool":
        content = message.content or ""
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": content,
                "is_error": content.startswith("ERROR:"),
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.arguments)}
        for c in message.tool_calls
    )
    return blocks


def build_body(request: ModelRequest, model_name: str) -> dict[str, Any]:
    system = "\n\n".join(m.content or "" for m in request.messages if m.role == "system")
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            blocks = [{"type": "text", "text": "(empty)"}]
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # keep user/assistant alternating
        else:
            messages.append({"role": role, "content": blocks})
    body: dict[str, Any] = {
        "model": model_name,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    if system:
        body["system"] = system
    tools = [
        {"name": name, "description": description, "input_schema": schema}
        for name, description, schema in offered_schemas(request)
    ]
    if tools:
        body["tools"] = tools
        if request.require_tool:
            body["tool_choice"] = {"type": "any"}  # a typed answer: the final_answer tool
    if request.temperature is not None:
        body["temperature"] = min(request.temperature, 1.0)  # Anthropic's range is 0..1
    if request.stream:
        body["stream"] = True
    return body


def error_message(payload: Any) -> str | None:
    """The provider's message in an error body:
    ``{"type": "error", "error": {"type": ..., "message": ...}}``."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return None


def parse_response(payload: Any, provider: str) -> ModelResponse:
    """Check the body against what the Messages API promises and translate it (see
    ``payload.parse_checked``)."""
    return parse_checked(payload, provider, _parse)


def _parse(payload: dict[str, Any], provider: str) -> ModelResponse:
    blocks = payload.get("content")
    if not isinstance(blocks, list):
        raise ModelResponseError(f"{provider} response has no content blocks")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            name = block.get("name")
            if not isinstance(name, str) or not name:
                raise ModelResponseError(f"{provider} response tool_use block has no name")
            tool_input = block.get("input", {})
            if not isinstance(tool_input, dict):
                raise ModelResponseError(f"{provider} response tool_use input is not an object")
            call_id = block.get("id")
            calls.append(
                ToolCall(
                    id=call_id if isinstance(call_id, str) and call_id else f"toolu_{index}",
                    name=name,
                    arguments=json.dumps(tool_input),
                )
            )
        # thinking / redacted_thinking and future block types carry nothing the loop needs
    stop_reason = payload.get("stop_reason")
    model = payload.get("model")
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=token_usage(payload.get("usage"), provider),
        finish_reason=stop_reason if isinstance(stop_reason, str) else None,
        model=model if isinstance(model, str) else None,
    )


def token_usage(raw_usage: Any, provider: str) -> TokenUsage:
    """A message's ``usage`` object as counts (zero where it says nothing)."""
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    fresh = token_count(usage, "input_tokens", provider)
    cached = token_count(usage, "cache_read_input_tokens", provider)
    written = token_count(usage, "cache_creation_input_tokens", provider)
    completion = token_count(usage, "output_tokens", provider)
    prompt = fresh + cached + written  # Anthropic counts cache reads and writes separately
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cached_tokens=cached,
    )


def stream_assembler(provider: str, on_text: TextCallback | None) -> EventAssembler:
    return EventAssembler(provider, on_text)


@dataclass
class _Block:
    """One content block as its events arrive."""

    start: dict[str, Any]
    """The block as ``content_block_start`` gave it."""
    text: StreamedText | None = None
    """A text block's text."""
    json: list[str] = field(default_factory=list)
    """Fragments of a tool call's input (JSON text)."""


class EventAssembler:
    """Message stream events put back together into a message."""

    end = "event: message_stop"

    def __init__(self, provider: str, on_text: TextCallback | None = None) -> None:
        self.provider = provider
        self.done = False
        self._on_text = on_text
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: Any = None

    def feed(self, event: ServerSentEvent) -> None:
        if self.done:
            return
        data = event_json(event, self.provider)
        if not isinstance(data, dict):
            raise ModelResponseError(f"{self.provider} stream event is not a JSON object")
        kind = data.get("type", event.event)
        if kind == "error":
            raise ErrorEvent(data, event.data)
        if kind == "message_start":
            message = data.get("message")
            if not isinstance(message, dict):
                raise ModelResponseError(f"{self.provider} stream message_start has no message")
            self._message = message
            usage = message.get("usage")
            self._usage = dict(usage) if isinstance(usage, dict) else {}
        elif kind == "content_block_start":
            block = data.get("content_block")
            if not isinstance(block, dict):
                raise ModelResponseError(f"{self.provider} stream content block is not an object")
            text = None
            if block.get("type") == "text":
                text = StreamedText(self._on_text)
                text.add(str(block.get("text") or ""))
            self._blocks[self._index(data)] = _Block(block, text)
        elif kind == "content_block_delta":
            self._delta(self._block(data), data.get("delta"))
        elif kind == "content_block_stop":
            text = self._block(data).text
            if text is not None:
                text.close()
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self._stop_reason = delta["stop_reason"]
            usage = data.get("usage")
            if isinstance(usage, dict):  # counts so far: the later ones replace the earlier
                self._usage.update((k, v) for k, v in usage.items() if v is not None)
        elif kind == "message_stop":
            self.done = True
        # ping, and event types added later: nothing the loop needs

    def _index(self, data: dict[str, Any]) -> int:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ModelResponseError(f"{self.provider} stream {data.get('type')} has no index")
        return index

    def _block(self, data: dict[str, Any]) -> _Block:
        block = self._blocks.get(self._index(data))
        if block is None:
            raise ModelResponseError(
                f"{self.provider} stream {data.get('type')} names a block that never started"
            )
        return block

    def _delta(self, block: _Block, delta: Any) -> None:
        if not isinstance(delta, dict):
            raise ModelResponseError(f"{self.provider} stream content delta is not an object")
        kind = delta.get("type")
        if kind == "text_delta" and block.text is not None:
            text = delta.get("text")
            if not isinstance(text, str):
                raise ModelResponseError(f"{self.provider} stream text_delta has no text")
            block.text.add(text)
        elif kind == "input_json_delta":
            fragment = delta.get("partial_json")
            if not isinstance(fragment, str):
                raise ModelResponseError(f"{self.provider} stream input_json_delta has no JSON")
            block.json.append(fragment)
        # thinking, signature and citation deltas carry nothing the loop needs

    def reported_usage(self) -> TokenUsage | None:
        """The usage the stream reported so far: the input counts from ``message_start`` (and
        its first output count), the output counts of each ``message_delta`` since; ``None``
        before ``message_start``."""
        if not self._usage:
            return None
        try:
            return token_usage(self._usage, self.provider)
        except ModelResponseError:
            return None

    def result(self) -> ModelResponse:
        if self._message is None:
            raise ModelResponseError(f"{self.provider} stream has no message_start")
        content: list[dict[str, Any]] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            item = dict(block.start)
            if block.text is not None:
                block.text.close()
                item["text"] = block.text.text
            elif block.json and "".join(block.json).strip():
                item["input"] = self._input("".join(block.json))
            content.append(item)
        stop_reason = self._stop_reason
        if stop_reason is None:
            stop_reason = self._message.get("stop_reason")
        payload = self._message | {
            "content": content,
            "usage": self._usage,
            "stop_reason": stop_reason,
        }
        return parse_response(payload, self.provider)

    def _input(self, text: str) -> Any:
        try:
            return json.loads(rejoined(text))
        except (ValueError, RecursionError):
            raise ModelResponseError(
                f"{self.provider} response tool_use input is not valid JSON"
            ) from None
