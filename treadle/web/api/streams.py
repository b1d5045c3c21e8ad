"""A run's live stream as Server-Sent Events, in two shapes, both resumable.

``events``: the stream's items as they are::

    id: 8
    event: event
    data: {"offset": 7, "topic": "events", "value": {"kind": "approval_needed", ...}}

    id: 9
    event: token
    data: {"offset": 8, "topic": "tokens", "value": {"step": 2, "text": "Hel", ...}}

``transcript``: the same items folded into the blocks a page shows (``transcript.Fold``), each
message the ops that bring a page up to date (``event: ops``).

Each message's ``id`` is the offset to go on from: a client that lost its connection sends it
back as ``Last-Event-ID`` (browsers do by themselves) and gets the messages after it, across
the run's continue-as-new too (offsets are global along the chain: ``treadle.stream``). Notices
(no worker answers, items no longer kept) come as ``event: notice`` without an id: they are
not a place to resume from. The stream ends with ``event: end`` once the run is over;
``event: unavailable`` when the run publishes no stream. A comment every
``KEEPALIVE_SECONDS`` keeps an idle connection from being taken for a dead one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

from treadle.client import (
    AgentClient,
    NoStream,
    NoWorkerAnswered,
    RunCannotAnswer,
    RunNotFound,
    TemporalRefused,
)
from treadle.stream import StreamItem, StreamNotice
from treadle.web.api.transcript import Fold
from treadle.web.http import HttpError

__all__ = ["KEEPALIVE_SECONDS", "UNANSWERED", "item_events", "resume_offset", "transcript_ops"]

KEEPALIVE_SECONDS = 15.0
UNANSWERED = (NoWorkerAnswered, RunCannotAnswer, TemporalRefused, RunNotFound)
"""What reading a stream raises when the run cannot answer now (no worker, a failing one)."""


def resume_offset(last_event_id: str | None, given: str | None) -> int:
    """Where a stream starts: after ``Last-Event-ID`` when the client sends one (a reconnect),
    else ``?from=N``, else the start."""
    text = last_event_id or given
    try:
        return max(0, int(text or 0))
    except ValueError:
        raise HttpError(400, f"offset {text!r} is not a number") from None


def _message(event: str, data: object, id: int | None = None) -> str:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def item_events(client: AgentClient, workflow_id: str, start_at: int) -> AsyncIterator[str]:
    """The run's items from ``start_at``, one SSE message each."""

    def message(item: StreamItem) -> list[str]:
        value = item.value.model_dump(mode="json")
        data = {"offset": item.offset, "topic": item.topic, "value": value}
        kind = "event" if item.topic == "events" else "token"
        return [_message(kind, data, item.offset + 1)]

    async for text in _sse(client, workflow_id, start_at, message, prepare=None):
        yield text


async def transcript_ops(
    client: AgentClient, workflow_id: str, start_at: int
) -> AsyncIterator[str]:
    """The run's items from ``start_at`` folded into ops (``event: ops``). The fold is rebuilt
    silently up to ``start_at`` first, so block ids and the text already shown agree with the
    transcript the client took."""
    fold = Fold()

    async def prepare() -> None:
        if start_at > 0:
            try:
                for item in await client.read_stream(workflow_id):
                    if item.offset >= start_at:
                        break
                    fold.apply(item)
            except UNANSWERED:
                pass  # no worker now: the blocks after start_at get fresh ids, nothing else

    def message(item: StreamItem) -> list[str]:
        return [_message("ops", fold.apply(item), item.offset + 1)]

    async for text in _sse(client, workflow_id, start_at, message, prepare=prepare):
        yield text


async def _sse(
    client: AgentClient,
    workflow_id: str,
    start_at: int,
    message: Callable[[StreamItem], list[str]],
    prepare: Callable[[], Awaitable[None]] | None,
) -> AsyncIterator[str]:
    messages: asyncio.Queue[str | None] = asyncio.Queue()

    def notice(notice: StreamNotice) -> None:
        messages.put_nowait(_message("notice", {"kind": notice.kind, "text": notice.text}))

    async def pump() -> None:
        try:
            if prepare is not None:
                await prepare()
            stream = client.watch(workflow_id, from_offset=start_at, on_notice=notice)
            async with contextlib.aclosing(stream):
                async for item in stream:
                    for text in message(item):
                        messages.put_nowait(text)
            messages.put_nowait(_message("end", {}))
        except NoStream as exc:
            messages.put_nowait(_message("unavailable", {"error": str(exc)}))
        finally:
            messages.put_nowait(None)

    task = asyncio.create_task(pump(), name=f"api events {workflow_id}")
    try:
        yield "retry: 1000\n\n"
        while True:
            try:
                text = await asyncio.wait_for(messages.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": still here\n\n"
                continue
            if text is None:
                break
            yield text
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    failure = None if task.cancelled() else task.exception()
    if failure is not None:
        raise failure  # a bug: the service's log shows it once
