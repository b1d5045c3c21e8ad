"""What every streaming wire protocol shares: server-sent events, text that arrives in pieces,
and errors sent inside a stream.

A streaming call reads the response's events (``sse_events``) into its protocol's
``StreamAssembler``. The assembler hands each piece of the reply's text to a ``TextCallback`` as
it arrives and, once the stream's last event has come, builds the body the non-streaming call
would have returned and gives it to the protocol's own ``parse_response``: both paths check and
translate a reply in one place, so they return the same ``ModelResponse``.

An error event inside the stream is raised as ``ErrorEvent``; the activity classifies it like
the HTTP error it names (``http_errors.stream_error``), with the keys redacted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from treadle.activities.errors import ModelResponseError
from treadle.activities.model.payload import rejoined
from treadle.workflows.agent.messages.models import ModelResponse, TokenUsage

__all__ = [
    "ErrorEvent",
    "ServerSentEvent",
    "StreamAssembler",
    "StreamedText",
    "TextCallback",
    "event_json",
    "sse_events",
]

TextCallback = Callable[[str], None]
"""Called with each new piece of a reply's text, in order; the pieces join into its content."""


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    """The ``event:`` field; ``"message"`` when the event names none."""
    data: str
    """The ``data:`` lines, joined by newlines."""


async def sse_events(lines: AsyncIterable[str]) -> AsyncGenerator[ServerSentEvent, None]:
    """The events of a ``text/event-stream`` body, read line by line (the WHATWG rules: a blank
    line ends an event, ``:`` starts a comment, an event without data is no event, and an event
    the body ends in the middle of is dropped)."""
    name = ""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield ServerSentEvent(name or "message", "\n".join(data))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        # id and retry matter to a browser reconnecting; a model call never reconnects


def event_json(event: ServerSentEvent, provider: str) -> Any:
    """An event's data as JSON, or ``ModelResponseError``."""
    try:
        return json.loads(event.data)
    except (ValueError, RecursionError):
        raise ModelResponseError(f"{provider} stream event is not valid JSON") from None


class ErrorEvent(Exception):
    """An error the provider sent inside a stream (OpenAI ``{"error": ...}``, Anthropic
    ``event: error``); never leaves the model activity as it is."""

    def __init__(self, payload: Any, data: str) -> None:
        super().__init__("error event in the stream")
        self.payload = payload
        self.data = data


class StreamAssembler(Protocol):
    """One streaming reply being read (``openai_chat.ChunkAssembler``,
    ``anthropic_messages.EventAssembler``)."""

    end: str
    """The stream's last event, named for error messages (``data: [DONE]``)."""

    @property
    def done(self) -> bool:
        """The last event has come: ``result()`` may be called."""
        ...

    def feed(self, event: ServerSentEvent) -> None:
        """Take the next event. Raises ``ModelResponseError`` for one that breaks the protocol,
        ``ErrorEvent`` for the provider's error."""
        ...

    def reported_usage(self) -> TokenUsage | None:
        """The token counts the stream has reported so far (what a call cut before its end
        spent, as far as its provider said); ``None`` when it reported none."""
        ...

    def result(self) -> ModelResponse:
        """The reply, exactly as the non-streaming call returns it."""
        ...


class StreamedText:
    """Text arriving in pieces, passed on as valid Unicode as soon as it arrives.

    A JSON string in one event may end with half of a surrogate pair whose other half comes in
    the next (``"\\ud83d"`` then ``"\\ude00"``): that half is held back until the next piece, so
    the pair becomes its one character, as it would in a body decoded whole; a surrogate left
    alone becomes U+FFFD (see ``payload.rejoined``). The pieces handed on join into ``text``.
    """

    def __init__(self, on_text: TextCallback | None = None) -> None:
        self._on_text = on_text
        self._parts: list[str] = []
        self._held = ""

    def add(self, piece: str) -> None:
        piece, self._held = self._held + piece, ""
        if piece and "\ud800" <= piece[-1] <= "\udbff":  # a high surrogate: wait for its pair
            piece, self._held = piece[:-1], piece[-1]
        self._emit(rejoined(piece))

    def close(self) -> None:
        """The text is complete: a half pair still held back becomes U+FFFD."""
        held, self._held = self._held, ""
        self._emit(rejoined(held))

    @property
    def text(self) -> str:
        """Everything handed on so far."""
        return "".join(self._parts)

    def _emit(self, text: str) -> None:
        if not text:
            return
        self._parts.append(text)
        if self._on_text is not None:
            self._on_text(text)
