"""How llama.cpp's OpenAI-compatible server (llama-cpp-python 0.3, its function-calling chat
format) differs from OpenAI, for a model added with ``like="llama.cpp"``.

Seen against the real server serving SmolLM2 (llama-cpp-python's ``[server]`` extra, built from
source; docs/models.md):

- tools reach the model only when the request names ``tool_choice``: without it the prompt is
  rendered with no tools and the model answers in prose;
- an assistant message whose ``content`` is ``null`` (beside tool calls) crashes the chat
  template: HTTP 500;
- ``stream_options`` is ignored: a stream carries no usage;
- ``logprobs`` without ``top_logprobs`` returns no log-probabilities;
- a streamed request with ``tool_choice: "auto"`` gets its 200 and headers, then nothing: the
  chat format raises "Automatic streaming tool choice is not supported" once the body began;
- structured output as ``response_format: {"type": "json_schema"}`` and ``tool_choice:
  "required"`` are answered with a 500; ``{"type": "json_object", "schema": ...}`` works (the
  reply is constrained to the schema), as it does on upstream ``llama-server``.
"""

from __future__ import annotations

from typing import Any, Literal

from treadle.scripted_model.replies import Reply, json_reply
from treadle.scripted_model.script import Turn

__all__ = ["Like", "adapt", "cannot_stream", "request_problem"]

Like = Literal["openai", "llama.cpp"]
"""Which server a scripted model behaves like."""

NO_TOOLS_ANSWER = "I would use a tool for that, but I have none."


def _server_error(message: str) -> Reply:
    return json_reply(500, {"error": {"code": 500, "message": message, "type": "server_error"}})


def request_problem(body: dict[str, Any]) -> Reply | None:
    """The 500 a null content gets from the chat template, or the one a typed answer asked
    as ``json_schema`` or a required tool call gets; ``None`` for a request it answers."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        return _server_error("response_format type json_schema is not supported")
    if body.get("tool_choice") == "required":
        return _server_error("tool_choice 'required' is not supported by this chat format")
    for message in body.get("messages", []):
        if isinstance(message, dict) and "content" in message and message["content"] is None:
            return _server_error("Value is not a string: null (chat template)")
    return None


def cannot_stream(body: dict[str, Any]) -> bool:
    """The request is one the server answers with an empty stream."""
    return (
        body.get("stream") is True and bool(body.get("tools")) and body.get("tool_choice") == "auto"
    )


def adapt(turn: Turn, body: dict[str, Any]) -> Turn:
    """``turn`` as the server would answer ``body``: no tool calls when the tools were not
    rendered, no log-probabilities unless ``top_logprobs`` asks for them."""
    update: dict[str, Any] = {}
    if turn.tool_calls and "tool_choice" not in body:
        update |= {"tool_calls": [], "content": turn.content or NO_TOOLS_ANSWER}
    if turn.confidence is not None and not body.get("top_logprobs"):
        update["confidence"] = None
    return turn.model_copy(update=update) if update else turn
