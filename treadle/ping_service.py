"""The cron monitors' HTTP service: ping URLs for crontab lines, and a live event stream.

    GET|POST /ping/{key}         ok, or error when exit_code (query or JSON body) is non-zero
    GET|POST /ping/{key}/start   in_progress
    GET|POST /ping/{key}/fail    error
    GET      /monitors/events    server-sent events; ?monitor=SLUG (repeatable) to filter

A ping body is the job's output (text; a JSON object ``{"output", "exit_code",
"duration_seconds"}`` with ``Content-Type: application/json``). Answers are JSON: 202 when the
check-in was handed to Temporal, 400 for a bad body or parameter (or a request cut short: the
client closed its side before the Content-Length was sent), 404 for an unknown key, 405, 411,
413, and 503 when Temporal cannot be reached or more than ``MAX_CONNECTIONS`` connections
(event streams included) are open. Expected failures log at most one line; only a bug logs a
traceback (and answers 500).

A ping needs no worker: the key is ``<slug>.<secret>``, so the slug names the monitor's workflow,
whose memo holds the key's SHA-256 to check it against (``describe`` is answered by the server
alone); the check-in is then a signal, which Temporal keeps until a worker processes it. The
workflow checks the key again.

The event stream reads each monitor workflow's ``WorkflowStream`` (topic ``events``) with one
long-poll subscription per monitor per service, shared by every connected client. Monitors are
found through visibility (running ``MonitorWorkflow``s on the service's task queue) every few
seconds, or named with ``?monitor=`` (at most ``MAX_MONITORS_PER_STREAM``). The stream is live: a
client sees events published after it started watching (monitors created while the service runs are
read from their first event). Once no client wants a monitor, its subscription ends when its
current long poll returns (at the monitor's next event: an abandoned poll would stay open in the
workflow); discovery stops as soon as no client watches all monitors. An item in a stream that is
not a ``MonitorEvent`` (any client may publish to it) is logged and skipped. A client that leaves
written data unread for ``WRITE_TIMEOUT`` is disconnected.

There is no authentication: a ping needs its key, but ``/monitors/events`` shows every monitor's
events (check-in output included) to anyone who can connect, and keys travel in URLs. Listen on
loopback (the default), or put TLS and authentication in front before listening elsewhere.

Plain asyncio streams and the Temporal client; HTTP/1.1 with one request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError, RPCStatusCode

from workflows.base import describe_errors
from workflows.monitors.models import (
    EVENTS_TOPIC,
    MAX_OUTPUT_BYTES,
    MEMO_PING_KEY_DIGEST,
    MONITOR_ID_PREFIX,
    SLUG_RE,
    CheckInSignal,
    CheckInSource,
    CheckInStatus,
    MonitorEvent,
    monitor_workflow_id,
    ping_key_digest,
    split_ping_key,
    truncate_output,
)
from workflows.monitors.workflow import MonitorWorkflow

__all__ = ["DEFAULT_PORT", "EventHub", "HttpError", "MonitorService", "running_monitors_query"]

log = logging.getLogger("treadle.monitor_http")

DEFAULT_PORT = 8780
MAX_BODY_BYTES = 1024 * 1024
"""A ping body larger than this is refused (413); the kept output is cut to 10 KiB anyway."""
MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 256
"""Connections served at once, event streams included; one more is answered 503 and closed."""
MAX_MONITORS_PER_STREAM = 50
"""``?monitor=`` filters one event stream may name (400 beyond)."""
READ_TIMEOUT = 30.0
WRITE_TIMEOUT = 30.0
"""How long a client may leave written data unread (a stalled event-stream client) before its
connection is closed."""
REFUSE_READ_SECONDS = 1.0
"""How long a connection over the cap may take to send its request before the 503 (closing a
socket with an unread request makes the client see a reset instead of the answer)."""
TEMPORAL_TIMEOUT = timedelta(seconds=10)
KEEPALIVE_SECONDS = 15.0
DISCOVER_SECONDS = 2.0
RETRY_SECONDS = 1.0
SUBSCRIBER_BACKLOG = 1000
"""Frames a slow event-stream client may fall behind by before it is disconnected."""

_KINDS = {
    "": CheckInStatus.OK,
    "start": CheckInStatus.IN_PROGRESS,
    "fail": CheckInStatus.ERROR,
}
_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class ClientStalled(ConnectionError):
    """The client did not take what was written to it within ``WRITE_TIMEOUT``."""


class HttpError(Exception):
    """An answer other than success: status code and a one-line message (sent as JSON)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


class IncompleteRequest(HttpError):
    """The connection ended in the middle of a request (400)."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: bytes


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


class MonitorService:
    """The HTTP service; ``start`` it, then ``close`` it (or use ``async with``)."""

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str | None = None,
        discover_every: float = DISCOVER_SECONDS,
        keepalive: float = KEEPALIVE_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._client = client
        self._keepalive = keepalive
        self._hub = EventHub(client, task_queue=task_queue, discover_every=discover_every)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(max_connections)
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
        """Listen on ``host:port`` (port 0: any free port, see ``self.port``)."""
        self._server = await asyncio.start_server(self._connection, host, port)
        self.host, self.port = self._server.sockets[0].getsockname()[:2]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._hub.close()
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def watched(self) -> frozenset[str]:
        """Monitors whose event streams the service reads right now."""
        return self._hub.watched

    async def __aenter__(self) -> MonitorService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            if self._slots.locked():
                await self._refuse(reader, writer)
            else:
                async with self._slots:
                    await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away, or stopped reading
        except asyncio.CancelledError:
            pass  # the service is closing
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Over the connection cap: read the request briefly (whatever it is), answer 503."""
        with contextlib.suppress(HttpError, TimeoutError, asyncio.IncompleteReadError):
            await asyncio.wait_for(read_request(reader), REFUSE_READ_SECONDS)
        log.warning("monitor_http.connection.refused", extra={"why": "connection cap reached"})
        await _respond(
            writer, 503, {"error": "too many connections; try again shortly"}, {"Retry-After": "1"}
        )

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(read_request(reader), READ_TIMEOUT)
            if request.path == "/monitors/events":
                _allow(request, "GET")
                await self._events(request, reader, writer)
                return
            status, body = await self._route(request)
        except IncompleteRequest as exc:
            # The client closed its side mid-request (e.g. a body shorter than its
            # Content-Length): an expected failure, so one line and no traceback; the 400 is
            # for a client that still reads (one that hung up entirely just misses it).
            log.warning("monitor_http.request.incomplete", extra={"why": exc.message})
            await _respond(writer, exc.status, {"error": exc.message})
            return
        except HttpError as exc:
            await _respond(writer, exc.status, {"error": exc.message}, exc.headers)
            return
        except TimeoutError:
            status, body = 400, {"error": "the request did not arrive in time"}
        except asyncio.IncompleteReadError:
            return  # connected and left without sending anything (a port check)
        except ConnectionError:
            raise  # the client went away, or stopped reading: nobody to answer
        except Exception:
            log.exception("monitor_http.request.failed")
            status, body = 500, {"error": "internal error; see the service log"}
        await _respond(writer, status, body)

    async def _route(self, request: Request) -> tuple[int, dict[str, Any]]:
        parts = request.path.split("/")
        if len(parts) in (3, 4) and parts[1] == "ping" and parts[2]:
            kind = parts[3] if len(parts) == 4 else ""
            if kind in _KINDS:
                _allow(request, "GET", "POST")
                return 202, await self.ping(unquote(parts[2]), _KINDS[kind], request)
        raise HttpError(404, f"no such endpoint: {request.path}")

    # ----------------------------------------------------------------------------------------
    # Pings
    # ----------------------------------------------------------------------------------------

    async def ping(self, key: str, status: CheckInStatus, request: Request) -> dict[str, Any]:
        """Check the key, build the check-in, and signal the monitor's workflow."""
        fields = _ping_fields(status, request)
        slug = await self._verify(key)
        try:
            signal = CheckInSignal(
                source=CheckInSource.PING,
                sent_at=datetime.now(UTC),
                ping_key=key,
                **fields,
            )
        except ValidationError as exc:
            raise HttpError(400, describe_errors(exc)) from None
        handle = self._client.get_workflow_handle(monitor_workflow_id(slug))
        try:
            await handle.signal(MonitorWorkflow.checkin, signal, rpc_timeout=TEMPORAL_TIMEOUT)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:  # deleted since _verify
                raise HttpError(404, "unknown ping key") from None
            raise HttpError(503, f"Temporal did not take the check-in: {exc.message}") from None
        return {
            "accepted": True,
            "monitor": slug,
            "status": signal.status.value,
            "exit_code": signal.exit_code,
            "sent_at": signal.sent_at.isoformat() if signal.sent_at else None,
        }

    async def _verify(self, key: str) -> str:
        """The slug of the running monitor whose key this is; 404 otherwise. No worker needed."""
        parts = split_ping_key(key)
        if parts is None:
            raise HttpError(404, "unknown ping key")
        slug = parts[0]
        handle = self._client.get_workflow_handle(monitor_workflow_id(slug))
        try:
            description = await handle.describe(rpc_timeout=TEMPORAL_TIMEOUT)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise HttpError(404, "unknown ping key") from None
            raise HttpError(503, f"Temporal did not answer: {exc.message}") from None
        if description.status is not WorkflowExecutionStatus.RUNNING:
            raise HttpError(404, "unknown ping key")  # deleted
        try:
            digest = (await description.memo()).get(MEMO_PING_KEY_DIGEST)
        except Exception as exc:  # any client may start a workflow under a monitor's id
            log.warning(
                "monitor_http.ping.unreadable_memo",
                extra={"slug": slug, "why": f"{type(exc).__name__}: {exc}"},
            )
            raise HttpError(404, "unknown ping key") from None
        if not isinstance(digest, str) or not hmac.compare_digest(digest, ping_key_digest(key)):
            raise HttpError(404, "unknown ping key")
        return slug

    # ----------------------------------------------------------------------------------------
    # Server-sent events
    # ----------------------------------------------------------------------------------------

    async def _events(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        slugs = request.query.get("monitor", [])
        if len(slugs) > MAX_MONITORS_PER_STREAM:
            raise HttpError(
                400, f"at most {MAX_MONITORS_PER_STREAM} monitor= filters per event stream"
            )
        for slug in slugs:
            if not SLUG_RE.fullmatch(slug):
                raise HttpError(400, f"invalid monitor slug {slug!r}")
        subscriber = self._hub.subscribe(frozenset(slugs) or None)
        try:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                b"Cache-Control: no-cache\r\nConnection: close\r\nX-Accel-Buffering: no\r\n\r\n"
                b": connected\n\nretry: 3000\n\n"
            )
            await _drain(writer)
            for slug in slugs:
                self._hub.watch(slug)
            gone = asyncio.create_task(reader.read(1))  # EOF (or anything) ends the stream
            try:
                while not gone.done():
                    next_frame = asyncio.create_task(subscriber.queue.get())
                    done, _ = await asyncio.wait(
                        {next_frame, gone},
                        timeout=self._keepalive,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if next_frame in done:
                        frame = next_frame.result()
                        if frame is None:  # fell too far behind
                            return
                        writer.write(frame)
                    else:
                        next_frame.cancel()
                        if not done:
                            writer.write(b": keepalive\n\n")
                    await _drain(writer)
            finally:
                gone.cancel()
        finally:
            self._hub.unsubscribe(subscriber)


# --------------------------------------------------------------------------------------------
# The event hub: one subscription per monitor, fanned out to every connected client
# --------------------------------------------------------------------------------------------


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

    def __init__(self, client: Client, *, task_queue: str | None, discover_every: float) -> None:
        self._client = client
        self._task_queue = task_queue
        self._discover_every = discover_every
        self._subscribers: set[Subscriber] = set()
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._watching: set[str] = set()
        self._discovery: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        """Discovery tasks cancelled because no client watches all monitors, until they end."""

    @property
    def watched(self) -> frozenset[str]:
        """Monitors with a reader (one no client wants any more included, until it stops)."""
        return frozenset(self._watchers)

    def subscribe(self, slugs: frozenset[str] | None) -> Subscriber:
        subscriber = Subscriber(slugs)
        self._subscribers.add(subscriber)
        for slug in sorted(self._watching):
            if subscriber.wants(slug):
                _offer(subscriber, _comment(f"watching {slug}"))
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
        if slug not in self._watchers:
            self._watchers[slug] = asyncio.create_task(self._watch(slug, from_start))

    async def close(self) -> None:
        tasks = [
            *self._watchers.values(),
            *([self._discovery] if self._discovery else []),
            *self._stopping,
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for subscriber in self._subscribers:
            _offer(subscriber, None)

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
                self._fan_out(slug, _comment(f"no monitor {slug}"))
                return
            if not self._wanted(slug):
                return
            self._watching.add(slug)
            self._fan_out(slug, _comment(f"watching {slug}"))
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


def _comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


async def read_request(reader: asyncio.StreamReader) -> Request:
    """One HTTP/1.1 request: request line, headers and a Content-Length body."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(400, "request head too large") from None
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise  # nothing was sent at all
        raise IncompleteRequest(
            f"the connection ended inside the request head, after {len(exc.partial)} bytes"
        ) from None
    if len(head) > MAX_HEAD_BYTES:
        raise HttpError(400, "request head too large")
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ")
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, colon, value = line.partition(":")
            if not colon:
                raise HttpError(400, "malformed header line")
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(411, "send the body with a Content-Length (curl --data-binary @file)")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise HttpError(400, "Content-Length is not a number") from None
    if length < 0:
        raise HttpError(400, "Content-Length is negative")
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError as exc:
        raise IncompleteRequest(
            f"the body ended after {len(exc.partial)} of its {length} bytes (Content-Length)"
        ) from None
    url = urlsplit(target)
    return Request(
        method=method.upper(),
        path=url.path,
        query=parse_qs(url.query, keep_blank_values=True),
        headers=headers,
        body=body,
    )


async def _respond(
    writer: asyncio.StreamWriter,
    status: int,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> None:
    payload = json.dumps(body).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n"
        f"{extra}Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + payload)
    await _drain(writer)


async def _drain(writer: asyncio.StreamWriter) -> None:
    """Wait until the client took what was written, for at most ``WRITE_TIMEOUT``."""
    try:
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
    except TimeoutError:
        raise ClientStalled(f"the client took nothing for {WRITE_TIMEOUT:g} s") from None


def _allow(request: Request, *methods: str) -> None:
    if request.method not in methods:
        allowed = ", ".join(methods)
        raise HttpError(
            405, f"{request.method} is not allowed here (use {allowed})", {"Allow": allowed}
        )


def _ping_fields(status: CheckInStatus, request: Request) -> dict[str, Any]:
    """The check-in fields a ping's query and body give; 400 for anything malformed."""
    fields: dict[str, Any] = {}
    exit_codes = request.query.get("exit_code", [])
    if len(exit_codes) > 1:
        raise HttpError(400, "exit_code given more than once")
    if exit_codes:
        try:
            fields["exit_code"] = int(exit_codes[0])
        except ValueError:
            raise HttpError(400, f"exit_code must be an integer, not {exit_codes[0]!r}") from None
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" and request.body:
        try:
            body = json.loads(request.body)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit number
            raise HttpError(400, f"body is not valid JSON: {exc}") from None
        except RecursionError:
            raise HttpError(400, "body is JSON nested too deeply") from None
        if not isinstance(body, dict):
            raise HttpError(400, "a JSON body must be an object")
        unknown = sorted(set(body) - {"output", "exit_code", "duration_seconds"})
        if unknown:
            raise HttpError(400, f"unknown field(s) in body: {', '.join(unknown)}")
        if (
            "exit_code" in body
            and "exit_code" in fields
            and body["exit_code"] != fields["exit_code"]
        ):
            raise HttpError(400, "exit_code differs between the query and the body")
        fields.update(body)
    elif request.body:
        # Job output as it came: bytes that are not UTF-8 are replaced rather than losing the
        # check-in; what is kept is cut to 10 KiB here already, to keep the signal small.
        fields["output"] = request.body.decode("utf-8", errors="replace")
    if isinstance(fields.get("output"), str):
        fields["output"] = truncate_output(fields["output"], MAX_OUTPUT_BYTES)[0] or None
    exit_code = fields.get("exit_code")
    if status is CheckInStatus.IN_PROGRESS and exit_code is not None:
        raise HttpError(400, "exit_code belongs on /ping/{key} or /ping/{key}/fail, not /start")
    if status is CheckInStatus.OK and isinstance(exit_code, int) and exit_code != 0:
        status = CheckInStatus.ERROR
    fields["status"] = status
    return fields
