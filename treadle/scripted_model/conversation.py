"""What a request's conversation says to the script: how many turns it has had, which
conversation it is (so retries are counted per conversation), and whether a human just
rejected one of the model's tool calls.
"""

from __future__ import annotations

import json
from typing import Any

from treadle.scripted_model.script import Turn


def assistant_turns(messages: list[Any]) -> int:
    """The assistant messages in ``messages``: the index of the turn that answers them."""
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def openai_conversation(messages: list[Any]) -> str:
    """The first user message's content, which names a conversation."""
    first_user = next(
        (m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"),
        None,
    )
    return json.dumps(first_user, sort_keys=True)


def anthropic_conversation(messages: list[dict[str, Any]]) -> str:
    """The first user message's text (its first text block), which names a conversation."""
    for message in messages:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            return content
        for block in content:
            if block["type"] == "text" and isinstance(block.get("text"), str):
                return str(block["text"])
        return json.dumps(content, sort_keys=True)
    return ""


REJECTED = "ERROR: a human rejected this call: "
"""How a rejected call's result reads (``workflows/agent/parts/approvals.py``): ``on_rejection``
looks for it."""


def after_rejection(turns: list[Turn], index: int, messages: list[Any]) -> list[Turn]:
    """``turns`` with turn ``index`` replaced by the previous turn's ``on_rejection`` answer when
    the request's latest tool results hold a human's rejection; else ``turns`` unchanged."""
    previous = turns[min(index - 1, len(turns) - 1)] if index > 0 else None
    if previous is None or previous.on_rejection is None:
        return turns
    reason = _rejection(messages)
    if reason is None:
        return turns
    position = min(index, len(turns) - 1)
    answer = Turn(content=previous.on_rejection.replace("{reason}", reason))
    return [*turns[:position], answer, *turns[position + 1 :]]


def _rejection(messages: list[Any]) -> str | None:
    """The reason in a rejected call's result after the last assistant message: an OpenAI
    ``tool`` message or an Anthropic ``tool_result`` block whose text starts with `REJECTED`."""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "assistant":
            return None
        content = message.get("content")
        if message.get("role") == "tool":
            texts = [content]
        elif isinstance(content, list):
            texts = [b.get("content") for b in content if isinstance(b, dict)]
        else:
            texts = []
        for text in texts:
            if isinstance(text, str) and text.startswith(REJECTED):
                return text.removeprefix(REJECTED)
    return None
