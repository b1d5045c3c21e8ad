"""The monitors' event hub: every watched monitor's ``WorkflowStream`` read once, each event
handed to every client that wants it, as a server-sent event frame. No HTTP here: the service
(``treadle.web.ping``) writes the frames out.

One long-poll subscription (topic ``events``) per monitor per service, shared by every connected
client. Monitors are found through visibility (running ``MonitorWorkflow``s on the service's task
queue) every few seconds, or named by the client. The stream is live: a client sees events
published after it started watching (monitors created while the service runs are read from their
first event). Once no client wants a monitor, its subscription ends when its current long poll
returns (at the monitor's next event: an abandoned poll would stay open in the workflow);
discovery stops as soon as no client watches all monitors. An item in a stream that is not a
``MonitorEvent`` (any client may publish to it) is logged and skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError, RPCStatusCode

from treadle.workflows.monitors.models import (
    EVENTS_TOPIC,
    MONITOR_ID_PREFIX,
    SLUG_RE,
    MonitorEvent,
    monitor_workflow_id,
)

__all__ = ["EventHub", "Subscriber", "comment", "running_monitors_query"]

log = logging.getLogger("treadle.monitor_http")

TEMPORAL_TIMEOUT = timedelta(seconds=10)
DISCOVER_SECONDS = 2.0
RETRY_SECONDS = 1.0
SUBSCRIBER_BACKLOG = 1000
"""Frames a slow event-stream client may fall behind by before it is disconnected."""


@dataclass(eq=False)
class Subscriber:
    slugs: frozenset[str] | None
    """Monitors this client watches; ``None``: all of them."""
    queue: asyncio.Queue[bytes | None] = field(
        default_factory=lambda: asyncio.Queue(SUBSCRIBER_BACKLOG)
    )

    def wants(self, slug: str) -> bool:
        return self.slugs is None or slug in self.slugs


class EventHub:
    """Reads every watched monitor's stream once and hands each event to every subscriber."""

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str | None,
        discover_every: float = DISCOVER_SECONDS,
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self._discover_every = discover_every
        self._subscribers: set[Subscriber] = set()
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._watching: set[str] = set()
        self._discovery: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        """Discovery tasks cancelled because no client watches all monitors, until they end."""
        self._ended = False

    @property
    def watched(self) -> frozenset[str]:
        """Monitors with a reader (one no client wants any more included, until it stops)."""
        return frozenset(self._watchers)

    def subscribe(self, slugs: frozenset[str] | None) -> Subscriber:
        """A client's queue of frames; ``None`` in it ends the client's stream."""
        subscriber = Subscriber(slugs)
        self._subscribers.add(subscriber)
        if self._ended:
            _offer(subscriber, None)
            return subscriber
        for slug in sorted(self._watching):
            if subscriber.wants(slug):
                _offer(subscriber, comment(f"watching {slug}"))
        if slugs is None and self._discovery is None:
            self._discovery = asyncio.create_task(self._discover())
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Forget a client. Discovery stops at once when no remaining client watches all
        monitors; a monitor's reader stops by itself once no client wants that monitor (see
        ``_watch``)."""
        self._subscribers.discard(subscriber)
        if self._discovery is not None and all(s.slugs is not None for s in self._subscribers):
            task, self._discovery = self._discovery, None
            task.cancel()
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def _wanted(self, slug: str) -> bool:
        return any(s.wants(slug) for s in self._subscribers)

    def watch(self, slug: str, *, from_start: bool = False) -> None:
        """Start reading a monitor's events, unless already reading them.

        ``from_start``: from the first retained event (a monitor created after the service
        started); otherwise from the current end of its stream.
        """
        if not self._ended and slug not in self._watchers:
            self._watchers[slug] = asyncio.create_task(self._watch(slug, from_start))

    def end_streams(self) -> None:
        """End every client's stream, now and from now on (the service is closing)."""
        self._ended = True
        for subscriber in self._subscribers:
            _offer(subscriber, None)

    async def close(self) -> None:
        self.end_streams()
        tasks = [
            *self._watchers.values(),
            *([self._discovery] if self._discovery else []),
            *self._stopping,
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _discover(self) -> None:
        query = running_monitors_query(self._task_queue)
        first = True
        while True:
            try:
                async for execution in self._client.list_workflows(
                    query, rpc_timeout=TEMPORAL_TIMEOUT
                ):
                    slug = execution.id.removeprefix(MONITOR_ID_PREFIX)
                    if SLUG_RE.fullmatch(slug):
                        self.watch(slug, from_start=not first)
                first = False
            except RPCError as exc:
                log.warning("monitor_http.discovery.failed", extra={"why": exc.message})
            await asyncio.sleep(self._discover_every)

    async def _watch(self, slug: str, from_start: bool) -> None:
        """Read a monitor's stream and fan its events out, until the monitor is gone or no
        client wants it any more.

        The reader stops between two polls, never during one, so it is not cancelled: a long
        poll is an update the monitor workflow accepted, and an abandoned one stays open in the
        workflow until its next event (Temporal cannot cancel an update). Clients coming and going
        on a quiet monitor would pile them up to the server's limit of in-flight updates per
        workflow (10 by default), and new polls would be refused. So a reader nobody wants ends
        when its current poll returns (the monitor's next event), and a client that comes back
        before then reuses it.
        """
        stream = WorkflowStreamClient.create(self._client, monitor_workflow_id(slug))
        try:
            offset = 0 if from_start else await self._current_offset(stream, slug)
            if offset is None:
                self._fan_out(slug, comment(f"no monitor {slug}"))
                return
            if not self._wanted(slug):
                return
            self._watching.add(slug)
            self._fan_out(slug, comment(f"watching {slug}"))
            while True:
                try:
                    # Raw items, decoded here: any client may publish to the stream, and an
                    # item that fails to decode inside the iterator would end it at that offset
                    # every time, so the watcher would never get past it.
                    async for item in stream.subscribe(
                        EVENTS_TOPIC, from_offset=offset, result_type=RawValue
                    ):
                        offset = item.offset + 1
                        event = self._decode(slug, item.offset, item.data)
                        if event is not None:
                            self._fan_out(slug, _frame(item.offset, event))
                        if not self._wanted(slug):
                            return  # between two polls: none is left open in the workflow
                    return  # the monitor was deleted: its stream is drained
                except RPCError as exc:
                    _raise_if_cancelled()
                    if exc.status is RPCStatusCode.NOT_FOUND:
                        return
                    log.info("monitor_http.watch.retry", extra={"slug": slug, "why": exc.message})
                except Exception as exc:  # no worker yet, a rollover: try again shortly
                    _raise_if_cancelled()
                    log.warning("monitor_http.watch.retry", extra={"slug": slug, "why": str(exc)})
                if not self._wanted(slug):
                    return
                await asyncio.sleep(RETRY_SECONDS)
        finally:
            self._watching.discard(slug)
            self._watchers.pop(slug, None)

    def _decode(self, slug: str, offset: int, raw: RawValue) -> MonitorEvent | None:
        """The event at ``offset``, or ``None`` (logged) for an item that is not this monitor's
        event: it is skipped, and the stream read on."""
        try:
            event = self._client.data_converter.payload_converter.from_payload(
                raw.payload, MonitorEvent
            )
            if not isinstance(event, MonitorEvent):
                raise TypeError(f"decoded as {type(event).__name__}")
            if event.slug != slug:
                raise ValueError(f"an event of monitor {event.slug!r}")
        except Exception as exc:
            log.warning(
                "monitor_http.watch.skipped",
                extra={"slug": slug, "offset": offset, "why": f"not a MonitorEvent: {exc}"},
            )
            return None
        return event

    async def _current_offset(self, stream: WorkflowStreamClient, slug: str) -> int | None:
        """Where the stream ends now (a query: it waits for a worker); ``None``: no monitor."""
        while True:
            try:
                return await asyncio.wait_for(stream.get_offset(), TEMPORAL_TIMEOUT.total_seconds())
            except RPCError as exc:
                _raise_if_cancelled()
                if exc.status is RPCStatusCode.NOT_FOUND:
                    return None
                log.info("monitor_http.offset.retry", extra={"slug": slug, "why": exc.message})
            except Exception as exc:
                _raise_if_cancelled()
                log.info("monitor_http.offset.retry", extra={"slug": slug, "why": str(exc)})
            await asyncio.sleep(RETRY_SECONDS)

    def _fan_out(self, slug: str, frame: bytes) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.wants(slug):
                _offer(subscriber, frame)


def running_monitors_query(task_queue: str | None) -> str:
    """The visibility query for running monitors (on ``task_queue``, when given)."""
    query = "WorkflowType = 'MonitorWorkflow' AND ExecutionStatus = 'Running'"
    if task_queue is not None:
        quoted = task_queue.replace("\\", "\\\\").replace("'", "\\'")
        query += f" AND TaskQueue = '{quoted}'"
    return query


def _raise_if_cancelled() -> None:
    """Re-raise a cancellation that library code turned into another error."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _offer(subscriber: Subscriber, frame: bytes | None) -> None:
    try:
        subscriber.queue.put_nowait(frame)
    except asyncio.QueueFull:
        # Too slow: make room for the end marker, so its connection closes.
        with contextlib.suppress(asyncio.QueueEmpty):
            subscriber.queue.get_nowait()
        subscriber.queue.put_nowait(None)


def _frame(offset: int, event: MonitorEvent) -> bytes:
    data = event.model_dump_json()
    return f"id: {event.slug}:{offset}\nevent: {event.type.value}\ndata: {data}\n\n".encode()


def comment(text: str) -> bytes:
    """A server-sent event comment: seen by a client reading the raw stream, no event."""
    return f": {text}\n\n".encode()
