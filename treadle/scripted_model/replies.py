"""What both protocols' answers are made of: a whole reply, a stream of server-sent events, the
pieces a stream cuts text into, and the token counts a turn reports.

The HTTP handler (``http_server.py``) writes a `Reply` or a `Stream` to the wire as it is; the
protocol modules build them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from treadle.scripted_model.script import Turn

Api = Literal["openai", "anthropic"]
"""The protocol a request speaks: ``/v1/chat/completions`` or ``/v1/messages``."""


@dataclass(frozen=True)
class Reply:
    """A whole answer: status, body bytes as sent, and headers beyond the usual ones."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Event:
    """One server-sent event of a streamed answer, framed for the wire."""

    frame: bytes
    content: bool = False
    """It carries text or a tool call fragment (what ``cut_after`` counts)."""


@dataclass(frozen=True)
class Stream:
    """A 200 answer sent as server-sent events, one HTTP chunk each."""

    events: tuple[bytes, ...]
    delay: float = 0.0
    """Seconds between two events."""
    cut: bool = False
    """Hang up after the events, without the chunked body's last chunk."""


def json_reply(status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    """``payload`` JSON-encoded as a reply's body."""
    return Reply(status, json.dumps(payload).encode(), tuple(headers))


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: ``data`` as JSON (a string verbatim, one data line per line)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return (head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n").encode()


def pieces(text: str, size: int | None) -> list[str]:
    """``text`` in the pieces a stream sends: ``size`` characters each, or one word each (with
    the whitespace before it). They join back into ``text``; no text, no pieces."""
    if size is not None:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return re.findall(r"\s*\S+|\s+", text)


def spread(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` in ``parts`` consecutive runs, as even as can be (each may be empty)."""
    return [items[i * len(items) // parts : (i + 1) * len(items) // parts] for i in range(parts)]


def token_counts(turn: Turn, prompt_chars: int, output_chars: int) -> tuple[int, int, int]:
    """The turn's reported (prompt, output, cached) tokens: its ``usage``, else an estimate of
    four characters per token (at least one) and nothing cached."""
    if turn.usage is not None:
        return turn.usage.prompt_tokens, turn.usage.completion_tokens, turn.usage.cached_tokens
    return max(1, prompt_chars // 4), max(1, output_chars // 4), 0
