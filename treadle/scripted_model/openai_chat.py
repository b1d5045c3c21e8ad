"""The OpenAI chat completions protocol (``POST /v1/chat/completions``): a turn as a
``chat.completion``, as the ``chat.completion.chunk`` events of a stream, and OpenAI's errors.

A stream is a role delta, the text in several content deltas, each tool call as a delta naming
its index, id and name and then its arguments in fragments, a last delta with
``finish_reason``; with ``stream_options.include_usage`` a chunk with empty ``choices`` and the
``usage``; then ``data: [DONE]``. It assembles into exactly the non-streaming completion.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from typing import Any

from treadle.scripted_model.replies import (
    Event,
    Reply,
    json_reply,
    pieces,
    spread,
    sse,
    token_counts,
)
from treadle.scripted_model.script import Turn

# What OpenAI says for each status when a scripted error gives no body.
_DEFAULT_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to access this model.", "invalid_request_error", None),
    404: ("The requested resource was not found.", "invalid_request_error", None),
    429: (
        "Rate limit reached for requests. Please try again later.",
        "requests",
        "rate_limit_exceeded",
    ),
    500: (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


def default_error_body(status: int) -> dict[str, Any]:
    """What OpenAI says for ``status`` when a scripted error gives no body."""
    if status in _DEFAULT_ERRORS:
        message, type_, code = _DEFAULT_ERRORS[status]
    elif status >= 500:
        message, type_, code = "The server had an error.", "server_error", None
    else:
        message, type_, code = "Invalid request.", "invalid_request_error", None
    return error_body(message, type_, code)


def error_body(
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_reply(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> Reply:
    """An invalid request's error object as a reply with ``status``."""
    return json_reply(status, error_body(message, code=code, param=param))


def model_list(names: list[str]) -> Reply:
    """``GET /v1/models`` as OpenAI answers it."""
    data = [
        {"id": name, "object": "model", "created": 0, "owned_by": "treadle-scripted"}
        for name in names
    ]
    return json_reply(200, {"object": "list", "data": data})


def completion(model: str, index: int, turn: Turn, request: dict[str, Any]) -> dict[str, Any]:
    """Turn ``index`` as the ``chat.completion`` answering ``request``."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content, "refusal": None}
    completion_chars = len(turn.content or "")
    if turn.tool_calls:
        calls = []
        for i, call in enumerate(turn.tool_calls):
            arguments = (
                call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            )
            completion_chars += len(call.name) + len(arguments)
            calls.append(
                {
                    "id": call.id or f"call_t{index}_{i}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments},
                }
            )
        message["tool_calls"] = calls
    prompt_chars = len(json.dumps(request.get("messages"))) + len(
        json.dumps(request.get("tools", []))
    )
    prompt, output, cached = token_counts(turn, prompt_chars, completion_chars)
    logprobs = (
        _logprobs(turn, turn.confidence)
        if turn.confidence is not None and request.get("logprobs") is True
        else None
    )
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": turn.finish_reason
                or ("tool_calls" if turn.tool_calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "system_fingerprint": "fp_scripted",
    }


def _logprobs(turn: Turn, confidence: float) -> dict[str, Any]:
    """Every token gets ln(confidence), so exp of the mean logprob is the scripted confidence."""
    # Whitespace-led words, so the tokens join back into the text; a turn without text still
    # needs one entry, so its tool names stand in.
    tokens = re.findall(r"\s*\S+", turn.content or "")
    tokens = tokens or [call.name for call in turn.tool_calls] or [turn.content or ""]
    logprob = math.log(confidence)
    return {
        "content": [
            {"token": token, "logprob": logprob, "bytes": None, "top_logprobs": []}
            for token in tokens
        ]
    }


def completion_chunks(whole: dict[str, Any], turn: Turn, include_usage: bool) -> list[Event]:
    """The ``whole`` completion as OpenAI streams it: a role delta, the text in pieces, each
    tool call as a delta with its index, id and name and then its arguments in pieces, a delta
    with the finish reason, the usage (when asked for) in a chunk without choices, and ``[DONE]``.
    Log-probabilities, when there are any, are spread over the text chunks in order."""
    (choice,) = whole["choices"]
    message = choice["message"]
    head = {
        "id": whole["id"],
        "object": "chat.completion.chunk",
        "created": whole["created"],
        "model": whole["model"],
        "system_fingerprint": whole["system_fingerprint"],
    }

    def chunk(
        delta: dict[str, Any],
        *,
        finish: str | None = None,
        logprobs: list[Any] | None = None,
        content: bool = False,
    ) -> Event:
        body = head | {
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None
                    if logprobs is None
                    else {"content": logprobs, "refusal": None},
                    "finish_reason": finish,
                }
            ]
        }
        if include_usage:
            body["usage"] = None  # as OpenAI does: every chunk but the last has a null usage
        return Event(sse(body), content)

    texts = pieces(message["content"] or "", turn.chunk_chars)
    entries: list[Any] | None = choice["logprobs"]["content"] if choice["logprobs"] else None
    shares: list[list[Any] | None] = (
        list(spread(entries, len(texts))) if entries is not None and texts else [None] * len(texts)
    )
    role = {"role": "assistant", "content": None if message["content"] is None else ""}
    events = [chunk(role, logprobs=entries if entries is not None and not texts else None)]
    events += [
        chunk({"content": text}, logprobs=share, content=True)
        for text, share in zip(texts, shares, strict=True)
    ]
    for position, call in enumerate(message.get("tool_calls", [])):
        function = call["function"]
        first = {
            "index": position,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [first]}, content=True))
        events += [
            chunk(
                {"tool_calls": [{"index": position, "function": {"arguments": piece}}]},
                content=True,
            )
            for piece in pieces(function["arguments"], turn.chunk_chars)
        ]
    if not turn.unfinished:
        events.append(chunk({}, finish=choice["finish_reason"]))
    if include_usage:
        events.append(Event(sse(head | {"choices": [], "usage": whole["usage"]})))
    events.append(Event(sse("[DONE]")))
    return events
