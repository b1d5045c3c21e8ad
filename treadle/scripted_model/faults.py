"""What a turn sends instead of its answer on a failing attempt: a scripted error (an error
status, or an error event inside a stream), possibly echoing the request's API key as a
misconfigured proxy does, and a stream cut short."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from treadle.scripted_model import anthropic_messages, openai_chat
from treadle.scripted_model.auth import request_key
from treadle.scripted_model.replies import Api, Event, Reply, sse
from treadle.scripted_model.script import ECHO_PREFIX, KeyEcho, TurnError


def echoed_key(key: str, form: KeyEcho) -> str:
    """``key`` as an error of the given ``echo_key`` form shows it."""
    if form == "lower":
        return key.lower()
    if form == "upper":
        return key.upper()
    if form == "prefix":
        return key[:ECHO_PREFIX]
    if form == "split":
        third = max(1, len(key) // 3)
        return f'{key[:third]}" "{key[third : 2 * third]}\n\t{key[2 * third :]}'
    return key


def error_reply(error: TurnError, api: Api, headers: Mapping[str, str]) -> Reply:
    """A scripted error as the whole answer: its status, headers and body."""
    content = _error_content(error, api, headers)
    body = content.encode() if isinstance(content, str) else json.dumps(content).encode()
    return Reply(error.status, body, tuple(error.headers.items()))


def error_event(error: TurnError, api: Api, headers: Mapping[str, str]) -> bytes:
    """A scripted error as an event inside a stream: Anthropic names it ``error``; OpenAI sends
    the error object as a chunk's data."""
    return sse(_error_content(error, api, headers), "error" if api == "anthropic" else None)


def cut(events: list[Event], contents: int) -> list[Event]:
    """The events before the content event after the first ``contents`` ones; with no such
    event, every event but the last (the stream's end)."""
    seen = 0
    for position, event in enumerate(events):
        if event.content:
            if seen == contents:
                return events[:position]
            seen += 1
    return events[:-1]


def _error_content(error: TurnError, api: Api, headers: Mapping[str, str]) -> Any:
    """What a scripted error says: its body or the protocol's, with any key echo."""
    content: Any = error.body
    if content is None:
        content = (
            anthropic_messages.error_body(error.status)
            if api == "anthropic"
            else openai_chat.default_error_body(error.status)
        )
    key = request_key(api, headers)
    if error.echo_key and key:
        content = _with_echo(
            content, " (key: " + ", ".join(echoed_key(key, f) for f in error.echo_key) + ")"
        )
    return content


def _with_echo(content: Any, text: str) -> Any:
    """``content`` (an error body) with ``text`` after its message, where it has one."""
    if isinstance(content, str):
        return content + text
    error = content.get("error") if isinstance(content, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return {**content, "error": {**error, "message": error["message"] + text}}
    return content
