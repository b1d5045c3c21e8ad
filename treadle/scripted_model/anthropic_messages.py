"""The Anthropic messages protocol (``POST /v1/messages``): a turn as a Messages API message, as
the events of a stream, and Anthropic's errors.

A stream is ``message_start``, ``content_block_start`` / ``_delta`` (``text_delta``,
``input_json_delta``) / ``_stop`` per block, ``message_delta`` (stop reason, usage) and
``message_stop``. It assembles into exactly the non-streaming message.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from treadle.scripted_model.replies import Event, Reply, json_reply, pieces, sse, token_counts
from treadle.scripted_model.script import Turn

# Anthropic's error type and message for each status when a scripted error gives no body.
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: (
        "rate_limit_error",
        "Number of requests has exceeded your rate limit. Please try again later.",
    ),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    """Anthropic's error object for ``status``, saying ``message`` or the usual words."""
    if status in _ANTHROPIC_ERRORS:
        type_, default = _ANTHROPIC_ERRORS[status]
    elif status >= 500:
        type_, default = _ANTHROPIC_ERRORS[500]
    else:
        type_, default = _ANTHROPIC_ERRORS[400]
    return {"type": "error", "error": {"type": type_, "message": message or default}}


def error_reply(status: int, message: str | None = None) -> Reply:
    """Anthropic's error for ``status`` as a reply, saying ``message`` or the usual words."""
    return json_reply(status, error_body(status, message))


def model_list(names: list[str]) -> Reply:
    """``GET /v1/models`` as Anthropic answers it."""
    models = [
        {
            "type": "model",
            "id": name,
            "display_name": name,
            "created_at": "1970-01-01T00:00:00Z",
        }
        for name in names
    ]
    return json_reply(
        200,
        {
            "data": models,
            "has_more": False,
            "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None,
        },
    )


def reply(model: str, index: int, position: int, turn: Turn, request: dict[str, Any]) -> Reply:
    """The turn as a whole Messages API answer, or a 500 when the turn cannot be one."""
    message = turn_message(model, index, position, turn, request)
    return message if isinstance(message, Reply) else json_reply(200, message)


def message_events(
    model: str, index: int, position: int, turn: Turn, request: dict[str, Any]
) -> list[Event] | Reply:
    """The message as Anthropic streams it: ``message_start`` (no content yet; usage with the
    input counts), a ``ping``, each block as ``content_block_start``, its ``text_delta`` or
    ``input_json_delta`` pieces and ``content_block_stop``, then ``message_delta`` (stop reason,
    output tokens) and ``message_stop``."""
    message = turn_message(model, index, position, turn, request)
    if isinstance(message, Reply):
        return message

    def event(kind: str, data: dict[str, Any], *, content: bool = False) -> Event:
        return Event(sse({"type": kind} | data, kind), content)

    usage = message["usage"]
    start = message | {
        "content": [],
        "stop_reason": None,
        # As Anthropic does: a first count here, the final one in message_delta.
        "usage": usage | {"output_tokens": min(1, usage["output_tokens"])},
    }
    events = [event("message_start", {"message": start}), event("ping", {})]
    for number, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            kind, field, text = "text_delta", "text", block["text"]
        else:
            opening = block | {"input": {}}
            kind, field, text = "input_json_delta", "partial_json", json.dumps(block["input"])
        events.append(
            event(
                "content_block_start",
                {"index": number, "content_block": opening},
                content=block["type"] != "text",
            )
        )
        events += [
            event(
                "content_block_delta",
                {"index": number, "delta": {"type": kind, field: piece}},
                content=True,
            )
            for piece in pieces(text, turn.chunk_chars)
        ]
        events.append(event("content_block_stop", {"index": number}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append(
        event("message_delta", {"delta": stop, "usage": {"output_tokens": usage["output_tokens"]}})
    )
    events.append(event("message_stop", {}))
    return events


def turn_message(
    model: str, index: int, position: int, turn: Turn, request: dict[str, Any]
) -> dict[str, Any] | Reply:
    """The turn as a Messages API message, or a 500 when the turn cannot be one."""
    content: list[dict[str, Any]] = []
    if turn.content:
        content.append({"type": "text", "text": turn.content})
    output_chars = len(turn.content or "")
    for i, call in enumerate(turn.tool_calls):
        arguments = _json_object(call.arguments)
        if arguments is None:
            return error_reply(
                500,
                f"scripted model {model!r} turn {position} is not representable in the "
                f"Anthropic protocol: tool call {call.name!r} has arguments that are not a JSON "
                "object, and tool_use input must be one",
            )
        output_chars += len(call.name) + len(json.dumps(arguments))
        content.append(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_t{index}_{i}",
                "name": call.name,
                "input": arguments,
            }
        )
    prompt_chars = sum(
        len(json.dumps(request.get(key) or "")) for key in ("system", "messages", "tools")
    )
    prompt, output, cached = token_counts(turn, prompt_chars, output_chars)
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            # Anthropic counts cache reads apart from input_tokens; OpenAI's prompt_tokens has both.
            "input_tokens": prompt - cached,
            "output_tokens": output,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        },
    }
    return message


def _json_object(arguments: dict[str, Any] | str) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    try:
        decoded = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None
