"""Read a run's live stream from any Python program: `watch_events`.

    async for item in watch_events(client, "agent-1234", from_offset=0):
        if isinstance(item.value, AgentEvent):
            print(item.offset, item.value.kind, item.value.text)

Every agent run and thread hosts a ``WorkflowStream`` with two topics (``events``: `AgentEvent`,
published by the workflow; ``tokens``: `TokenDelta`, published by the model activity while a
provider streams). `watch_events` reads both, in order, and ends once the run is over.

It reads with the stream's *query*, never with ``WorkflowStreamClient.subscribe``: subscribe
long-polls with updates, and every poll writes the items it returns into the run's history
again, so a watched run would grow its history per step several-fold. A query adds nothing to
the history, however long and however many clients watch; the price is a short cooldown between
polls (``cooldown``) instead of a push.

- The workflow id is used without a run id, so the reader follows continue-as-new: offsets are
  global across the chain (the stream's tail is carried over).
- The stream keeps its newest items only (``events.EVENTS_KEPT``); an offset older than that is
  read from the oldest one kept, and ``on_notice`` hears of the gap, once per gap.
- No worker (the query times out or fails): ``on_notice`` hears "waiting for a worker" once, and
  the reader keeps trying until one answers again. "From now" cannot be known without a worker;
  then the run is shown from its start. A caught-up reader of a run that does not move polls
  it every ``QUIET_POLL_SECONDS``, so it hears of a worker gone within that.
- The run finished: the items still unread are read, then the iteration ends. A run that
  closed before the watch began is read by one poll (a query of a closed run is answered by a
  worker replaying it), or by none "from now".
- Encrypted runs: the query's answer is decrypted by the client's codec; the items inside were
  made by the payload converter alone (the stream runs the codec on its envelopes only), so
  they decode with ``client.data_converter.payload_converter``.
- Traced clients: a watch is one span (``watch <workflow id>``) with every poll's query under
  it, so a watch is one trace, not a one-span trace per poll.
- A quiet run is polled less: after each empty poll the pause doubles, up to
  ``QUIET_COOLDOWN``; the next item brings it back to ``cooldown``. And a caught-up reader asks
  the server first (``describe``: answered by the server alone, no worker, no history): a run
  whose history, described after the answer of the reader's last empty poll, has not grown
  since the describe before that poll has completed no workflow task in between, so it has
  published nothing, and it is not queried. A run parked on an approval for a day costs its
  watchers a describe a second and its worker a query every ``QUIET_POLL_SECONDS``; a query,
  which the server routes to the run's worker, is asked once the run has moved.
- Watchers of one run in one process (one client: the browser page serving many browsers)
  share its polls: a poll from the offset they all wait at, in flight or under ``cooldown``
  old, answers all of them. They share the check whether the run has closed too (one
  ``describe`` a second for all of them), and after the close the poll asked after it, which
  is kept (``treadle.closed``: every query of a closed run is a replay by a worker).
  Separate processes each poll.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from google.protobuf.message import DecodeError
from opentelemetry import trace
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.converter import PayloadConverter
from temporalio.exceptions import TemporalError
from temporalio.service import RPCError, RPCStatusCode

from treadle import closed as closed_runs
from treadle.shared_calls import SharedCalls
from treadle.workflows.agent.messages.events import (
    EVENTS_TOPIC,
    OFFSET_QUERY,
    POLL_QUERY,
    TOKENS_TOPIC,
    AgentEvent,
    TokenDelta,
)

__all__ = [
    "POLL_QUERY",
    "StreamItem",
    "StreamNotice",
    "StreamUnavailable",
    "read_items",
    "stream_end",
    "watch_events",
]

COOLDOWN = 0.25
"""Seconds between polls once the reader has caught up (none while ``more_ready``)."""
QUIET_COOLDOWN = 1.0
"""The longest pause between polls of a run that published nothing for a while."""
QUERY_TIMEOUT = timedelta(seconds=5)
"""How long one poll may take; a run with no worker does not answer at all."""
RETRY_SECONDS = 1.0
"""Between polls while no worker answers."""
CLOSED_CHECK_SECONDS = 1.0
"""How often a caught-up reader asks the server whether the run has closed (``describe``,
answered by the server alone, no worker, no history)."""
QUIET_POLL_SECONDS = 30.0
"""The longest a caught-up reader goes without polling a run that has not moved: a poll is how
it learns that no worker answers any more (``waiting``)."""

_OPEN = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


@dataclass(frozen=True)
class StreamItem:
    """One item of the stream: its global offset, its topic, and its decoded value."""

    offset: int
    topic: Literal["events", "tokens"]
    value: AgentEvent | TokenDelta


@dataclass(frozen=True)
class StreamNotice:
    """Something a watcher should know that is not an item.

    ``waiting``: the run did not answer (no worker, or its worker is busy or failing);
    ``resumed``: it answers again; ``gap``: items between ``offset`` and ``resumed_at`` are no
    longer kept; ``skipped``: an item at ``offset`` could not be decoded (another publisher's, or
    a newer version's) and was left out; ``unread``: the run closed and its last items could not
    be read (no worker to answer for it).
    """

    kind: Literal["waiting", "resumed", "gap", "skipped", "unread"]
    text: str
    offset: int = 0
    resumed_at: int = 0


class StreamUnavailable(Exception):
    """The run cannot be watched: no such workflow, or it hosts no stream (a run started
    before streams existed)."""


async def stream_end(handle: WorkflowHandle[Any, Any]) -> int:
    """The offset just past the stream's last item: where "from now" starts."""
    try:
        end: int = await handle.query(OFFSET_QUERY, result_type=int, rpc_timeout=QUERY_TIMEOUT)
    except WorkflowQueryFailedError as exc:
        if _no_stream(exc):
            raise _unavailable(handle.id, exc) from exc
        raise
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise StreamUnavailable(f"no run with id {handle.id!r}") from exc
        raise
    return end


async def read_items(client: Client, workflow_id: str, *, from_offset: int = 0) -> list[StreamItem]:
    """What the stream keeps now from ``from_offset``, in one read (no waiting for more):
    for scripts and tests that want a snapshot rather than a watch. Items that cannot be read
    are left out. A closed run's items are read from it once per process (``treadle.closed``:
    each read of a closed run is a replay by a worker)."""

    async def read(handle: WorkflowHandle[Any, Any]) -> list[StreamItem]:
        converter = client.data_converter.payload_converter
        items: list[StreamItem] = []
        offset = max(0, from_offset)
        while True:
            result = await _poll(handle, offset)
            decoded = (_decode(converter, w.topic, w.data, w.offset) for w in result.items)
            items.extend(item for item in decoded if item is not None)
            offset = max(offset, result.next_offset)
            if not result.more_ready:
                return items

    return list(await closed_runs.answer(client, workflow_id, ("stream", from_offset), read))


async def watch_events(
    client: Client,
    workflow_id: str,
    *,
    from_offset: int | None = 0,
    on_notice: Callable[[StreamNotice], None] | None = None,
    cooldown: float = COOLDOWN,
) -> AsyncGenerator[StreamItem, None]:
    """The run's items from ``from_offset`` (``None``: from now) until the run is over.

    Ends after the ``ended`` event, or once the workflow has closed and what was left is read.
    Raises `StreamUnavailable` when there is no such run or it has no stream; waits (with a
    ``waiting`` notice) while no worker answers.
    """
    span = trace.get_tracer(__name__).start_span(
        f"watch {workflow_id}", attributes={"temporalWorkflowID": workflow_id}
    )
    inner = _watch(client, workflow_id, span, from_offset, on_notice, cooldown)
    try:
        async with contextlib.aclosing(inner):
            async for item in inner:
                yield item
    finally:
        span.end()


async def _watch(
    client: Client,
    workflow_id: str,
    span: trace.Span,
    from_offset: int | None,
    on_notice: Callable[[StreamNotice], None] | None,
    cooldown: float,
) -> AsyncGenerator[StreamItem, None]:
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    notify = on_notice or (lambda _notice: None)
    converter = client.data_converter.payload_converter
    offset = None if from_offset is None else max(0, from_offset)
    waiting = False
    closed: str | None = None  # the run's id, once a describe said it has closed
    # Described before the first poll too: a run already closed is read by one poll, asked
    # after the describe that saw it closed (its worker replays the run to answer each).
    quiet = True  # no poll yet, or the last one came back empty
    polled_at: _History | None = None  # the run's history as described before that poll
    answered = -math.inf  # when the last poll's answer came (the loop's time)
    pause = cooldown
    loop = asyncio.get_running_loop()
    while True:
        unmoved = False
        try:
            # The watch's span is current only around its own calls: the generator yields
            # between them, to a caller whose context is its own.
            with trace.use_span(span, end_on_exit=False):
                if quiet and not closed:
                    # Caught up: has the run closed, or moved at all since the last poll? Only
                    # a describe asked after that poll's answer can say it has not moved (the
                    # shared one may be older: then poll, as before the describe was shared).
                    seen = await _described(client, handle)
                    if seen is not None and seen.closed:
                        closed = seen.history[0]
                    elif (
                        seen is not None
                        and seen.history == polled_at
                        and seen.asked >= answered
                        and loop.time() - answered < QUIET_POLL_SECONDS
                    ):
                        unmoved = True
                    else:
                        polled_at = None if seen is None else seen.history
                if offset is None:
                    if closed is not None:
                        return  # closed before the watch began: nothing comes from now on
                    offset = await stream_end(handle)
                if closed is not None:
                    # Asked after the describe that saw the close, a poll reads the stream as
                    # it ends; the closed run answers each by a replay on a worker, so the
                    # answer is kept for every watcher in this process (``treadle.closed``).
                    result = await closed_runs.kept(
                        client, workflow_id, closed, ("poll", offset), partial(_poll, at=offset)
                    )
                elif not unmoved:
                    result, answered = await _shared_poll(client, handle, offset, cooldown)
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError, RPCError) as exc:
            if isinstance(exc, RPCError) and exc.status is RPCStatusCode.NOT_FOUND:
                raise StreamUnavailable(f"no run with id {workflow_id!r}") from exc
            if isinstance(exc, WorkflowQueryFailedError) and _no_stream(exc):
                raise _unavailable(workflow_id, exc) from exc
            # A describe asked before this failure may predate the close: ask anew.
            if closed or await _closed(client, handle, not_before=loop.time()) is not None:
                notify(StreamNotice("unread", "the run has ended; no worker read its last items"))
                return
            if not waiting:
                waiting = True
                text = f"waiting for a worker ({_why(exc)})"
                if offset is None:
                    # "Now" is unknown until a worker answers, and by then it may have moved on:
                    # show what the run publishes from its start instead of missing it.
                    offset = 0
                    text += "; the run will be shown from its start"
                notify(StreamNotice("waiting", text))
            quiet, polled_at = False, None
            await asyncio.sleep(RETRY_SECONDS)
            continue
        if unmoved:
            pause = min(max(pause * 2, cooldown), max(QUIET_COOLDOWN, cooldown))
            await asyncio.sleep(pause)
            continue
        if waiting:
            waiting = False
            notify(StreamNotice("resumed", "a worker answers again"))
        if result.items and result.items[0].offset > offset:
            first = result.items[0].offset
            notify(
                StreamNotice(
                    "gap",
                    f"items {offset}-{first - 1} are no longer kept; reading from {first}",
                    offset=offset,
                    resumed_at=first,
                )
            )
        ended = False
        for wire in result.items:
            item = _decode(converter, wire.topic, wire.data, wire.offset)
            if item is None:
                notify(
                    StreamNotice("skipped", f"item {wire.offset} could not be read", wire.offset)
                )
                continue
            yield item
            if isinstance(item.value, AgentEvent) and item.value.kind == "ended":
                ended = True
        offset = max(offset, result.next_offset)
        if ended or (closed and not result.more_ready):
            return
        if result.items or result.more_ready:
            quiet, polled_at = False, None
        if result.more_ready:
            continue
        if result.items:
            pause = cooldown
        else:
            # Quiet: the next round asks ``describe`` first (shared, ``_described``: one a
            # second for every watcher of the run in this process). Closed: one more poll
            # reads what was published before the end, then stop.
            pause = min(max(pause * 2, cooldown), max(QUIET_COOLDOWN, cooldown))
            quiet = True
        await asyncio.sleep(pause)


_SHARED = SharedCalls()
"""The polls and checks of this process's watchers, each fresh for a fraction of a second."""


async def _shared_poll(
    client: Client, handle: WorkflowHandle[Any, Any], offset: int, fresh: float
) -> tuple[PollResult, float]:
    """One poll of the run's stream from ``offset``, shared by every watcher of this client
    that asks for the same offset while it is in flight or less than ``fresh`` seconds old:
    a hundred views of one run in one process (the browser page) cost the server one query
    per cooldown, not a hundred. Watchers at one offset are the ones caught up, and an answer
    at most ``fresh`` old is what their own cooldown would have shown them. With the loop's time
    its answer came: what it says is as of then, for every watcher it serves."""
    loop = asyncio.get_running_loop()

    async def poll() -> tuple[PollResult, float]:
        return await _poll(handle, offset), loop.time()

    key = (id(client), handle.id, "poll", offset)
    return await _SHARED.call(key, poll, fresh=fresh)


async def _poll(handle: WorkflowHandle[Any, Any], at: int) -> PollResult:
    result: PollResult = await handle.query(
        POLL_QUERY,
        PollInput(topics=[EVENTS_TOPIC, TOKENS_TOPIC], from_offset=at),
        result_type=PollResult,
        rpc_timeout=QUERY_TIMEOUT,
    )
    return result


def _decode(converter: PayloadConverter, topic: str, data: str, offset: int) -> StreamItem | None:
    try:
        payload = Payload.FromString(base64.b64decode(data))
        if topic == EVENTS_TOPIC:
            event = converter.from_payload(payload, AgentEvent)
            return StreamItem(offset, "events", event) if isinstance(event, AgentEvent) else None
        if topic == TOKENS_TOPIC:
            delta = converter.from_payload(payload, TokenDelta)
            return StreamItem(offset, "tokens", delta) if isinstance(delta, TokenDelta) else None
    except (ValueError, TypeError, ValidationError, TemporalError, DecodeError):
        return None
    return None


@dataclass(frozen=True)
class _Described:
    """What one ``describe`` said of the run: when it was asked and answered (the loop's time),
    whether the run had closed, and its history."""

    asked: float
    answered: float
    closed: bool
    history: _History


_History = tuple[str, int]
"""A run's id and its history's length: the same pair twice means no workflow task of the run
completed in between, so nothing was published (only workflow code publishes, in a task that
adds events; a token batch arrives as a signal, an event too)."""


async def _described(
    client: Client, handle: WorkflowHandle[Any, Any], not_before: float = -math.inf
) -> _Described | None:
    """The run as the server describes it (no worker, no history read), or None when it
    cannot be told. One ``describe`` a second serves every watcher of this client (a hundred
    views each asking once a second were a hundred describes a second)."""
    loop = asyncio.get_running_loop()

    async def describe() -> _Described:
        asked = loop.time()
        d = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
        closed = d.status is not None and d.status not in _OPEN
        return _Described(asked, loop.time(), closed, (d.run_id, d.history_length))

    try:
        key = (id(client), handle.id, "described")
        return await _SHARED.call(key, describe, fresh=CLOSED_CHECK_SECONDS, not_before=not_before)
    except RPCError:
        return None


async def _closed(
    client: Client, handle: WorkflowHandle[Any, Any], not_before: float = -math.inf
) -> float | None:
    """When the run was seen closed (``_Described.answered``), or None while it runs or
    cannot be told."""
    seen = await _described(client, handle, not_before)
    return seen.answered if seen is not None and seen.closed else None


def _no_stream(exc: WorkflowQueryFailedError) -> bool:
    return POLL_QUERY in exc.message or OFFSET_QUERY in exc.message


def _unavailable(workflow_id: str, exc: WorkflowQueryFailedError) -> StreamUnavailable:
    return StreamUnavailable(
        f"run {workflow_id!r} publishes no live stream (its worker runs an older Treadle)"
    )


def _why(exc: Exception) -> str:
    if isinstance(exc, RPCError):
        if exc.status is RPCStatusCode.DEADLINE_EXCEEDED:
            return f"no answer within {QUERY_TIMEOUT.total_seconds():g} s"
        return exc.message
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
