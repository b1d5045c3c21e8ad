"""The cron monitors' HTTP service: ping URLs for crontab lines, and a live event stream.

    GET|POST /ping/{key}         ok, or error when exit_code (query or JSON body) is non-zero
    GET|POST /ping/{key}/start   in_progress
    GET|POST /ping/{key}/fail    error
    GET      /monitors/events    server-sent events; ?monitor=SLUG (repeatable) to filter

A ping body is the job's output (text; a JSON object ``{"output", "exit_code",
"duration_seconds"}`` with ``Content-Type: application/json``). Answers are JSON: 202 when the
check-in was handed to Temporal, 400 for a bad body or parameter, 404 for an unknown key or path,
405, 411 (chunked upload), 413 (over ``MAX_BODY_BYTES``), and 503 when Temporal cannot be reached
or ``MAX_CONNECTIONS`` requests (event streams included) are in progress. Expected failures log at
most one line (a client that disconnects mid-request included); only a bug logs a traceback (and
answers 500). What a ping does is ``treadle.web.checkins``; the events come from
``treadle.web.events``; this module is the HTTP around them (Starlette, served by uvicorn).

An event stream names at most ``MAX_MONITORS_PER_STREAM`` monitors. A client that leaves written
data unread for ``WRITE_TIMEOUT`` is disconnected, and so is one that falls more than
``SUBSCRIBER_BACKLOG`` frames behind.

There is no authentication: a ping needs its key, but ``/monitors/events`` shows every monitor's
events (check-in output included) to anyone who can connect, and keys travel in URLs. Listen on
loopback (the default), or put TLS and authentication in front before listening elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.client import Client

from treadle.web import checkins, serve
from treadle.web.events import DISCOVER_SECONDS, EventHub
from treadle.web.http import HttpError, error, json_app, read_body, route
from treadle.workflows.monitors.models import SLUG_RE, CheckInStatus

__all__ = ["DEFAULT_PORT", "MonitorService"]

log = logging.getLogger("treadle.monitor_http")

DEFAULT_PORT = 8780
MAX_BODY_BYTES = 1024 * 1024
"""A ping body larger than this is refused (413); the kept output is cut to 10 KiB anyway."""
MAX_CONNECTIONS = 256
"""Requests served at once, event streams included; one more is answered 503."""
MAX_MONITORS_PER_STREAM = 50
"""``?monitor=`` filters one event stream may name (400 beyond)."""
READ_TIMEOUT = 30.0
"""How long a ping's body may take to arrive (400 after)."""
WRITE_TIMEOUT = 30.0
"""How long an event-stream client may leave written data unread before it is disconnected."""
KEEPALIVE_SECONDS = 15.0

_PING_METHODS = ("GET", "POST")
_KINDS = {
    "": CheckInStatus.OK,
    "/start": CheckInStatus.IN_PROGRESS,
    "/fail": CheckInStatus.ERROR,
}
_STATUS = {
    checkins.BadPing: 400,
    checkins.UnknownKey: 404,
    checkins.TemporalUnavailable: 503,
}


class MonitorService:
    """The HTTP service; ``start`` it, then ``close`` it (or use ``async with``). ``app`` is the
    ASGI app itself, for serving or testing it some other way."""

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
        self._served: serve.Served | None = None
        self.app = json_app(
            [
                *(
                    route(f"/ping/{{key}}{kind}", partial(self._ping, status=status), _PING_METHODS)
                    for kind, status in _KINDS.items()
                ),
                route("/monitors/events", self._events, ("GET",)),
            ],
            log=log,
            event_prefix="monitor_http",
            not_found=lambda path: f"no such endpoint: {path}",
            middleware=[Middleware(_Cap, limit=max_connections)],
        )
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        assert self._served is not None, "start the service first"
        return self._served.url

    async def start(self, host: str = serve.LOOPBACK, port: int = DEFAULT_PORT) -> None:
        """Listen on ``host:port`` (port 0: any free port, see ``self.port``)."""
        self._served = await serve.start(self.app, host, port)
        self.host, self.port = self._served.host, self._served.port

    async def close(self) -> None:
        """End the event streams, stop serving, and stop reading the monitors."""
        self._hub.end_streams()
        if self._served is not None:
            await self._served.stop()
        await self._hub.close()

    @property
    def watched(self) -> frozenset[str]:
        """Monitors whose event streams the service reads right now."""
        return self._hub.watched

    async def __aenter__(self) -> MonitorService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------------------------------
    # Pings
    # ----------------------------------------------------------------------------------------

    async def _ping(self, request: Request, status: CheckInStatus) -> Response:
        body = await read_body(request, MAX_BODY_BYTES, timeout=READ_TIMEOUT)
        try:
            answer = await checkins.ping(
                self._client,
                request.path_params["key"],
                status,
                exit_codes=request.query_params.getlist("exit_code"),
                content_type=request.headers.get("content-type", ""),
                body=body,
            )
        except checkins.PingRefused as exc:
            return error(_STATUS[type(exc)], exc.message)
        return JSONResponse(answer, 202)

    # ----------------------------------------------------------------------------------------
    # Server-sent events
    # ----------------------------------------------------------------------------------------

    async def _events(self, request: Request) -> Response:
        slugs = request.query_params.getlist("monitor")
        if len(slugs) > MAX_MONITORS_PER_STREAM:
            raise HttpError(
                400, f"at most {MAX_MONITORS_PER_STREAM} monitor= filters per event stream"
            )
        for slug in slugs:
            if not SLUG_RE.fullmatch(slug):
                raise HttpError(400, f"invalid monitor slug {slug!r}")
        return EventStream(self._hub, slugs, self._keepalive)


class EventStream(Response):
    """A ``text/event-stream`` answer: the hub's frames for ``slugs`` (all monitors when none),
    a keepalive comment when nothing happened for ``keepalive`` seconds, until the client
    leaves, stops reading, falls too far behind, or the service closes."""

    media_type = "text/event-stream"

    def __init__(self, hub: EventHub, slugs: list[str], keepalive: float) -> None:
        # As StreamingResponse does: no body, so no Content-Length; the answer is streamed.
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._hub = hub
        self._slugs = slugs
        self._keepalive = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        subscriber = self._hub.subscribe(frozenset(self._slugs) or None)
        gone = asyncio.create_task(_disconnect(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await _write(send, b": connected\n\nretry: 3000\n\n")
            for slug in self._slugs:
                self._hub.watch(slug)
            while not gone.done():
                next_frame = asyncio.create_task(subscriber.queue.get())
                done, _ = await asyncio.wait(
                    {next_frame, gone}, timeout=self._keepalive, return_when=asyncio.FIRST_COMPLETED
                )
                if next_frame in done:
                    frame = next_frame.result()
                    if frame is None:  # fell too far behind, or the service is closing
                        await _write(send, b"", more=False)
                        return
                    await _write(send, frame)
                else:
                    next_frame.cancel()
                    if not done:
                        await _write(send, b": keepalive\n\n")
        except _Stalled:
            log.warning(
                "monitor_http.events.stalled",
                extra={"why": f"the client took nothing for {WRITE_TIMEOUT:g} s"},
            )
        finally:
            gone.cancel()
            self._hub.unsubscribe(subscriber)


class _Stalled(Exception):
    """The client did not take what was written to it within ``WRITE_TIMEOUT``."""


async def _write(send: Send, body: bytes, *, more: bool = True) -> None:
    """Send ``body``; the server waits while the client's socket is full, for at most
    ``WRITE_TIMEOUT`` (then the answer is left unfinished, and the server drops the
    connection)."""
    try:
        async with asyncio.timeout(WRITE_TIMEOUT):
            await send({"type": "http.response.body", "body": body, "more_body": more})
    except TimeoutError:
        raise _Stalled from None


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Cap:
    """At most ``limit`` requests in progress (event streams included); one more is a 503."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.open = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif self.open >= self.limit:
            log.warning("monitor_http.connection.refused", extra={"why": "connection cap reached"})
            refused = error(503, "too many connections; try again shortly", {"Retry-After": "1"})
            await refused(scope, receive, send)
        else:
            self.open += 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.open -= 1
