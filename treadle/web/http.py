"""What every Treadle HTTP service shares: a Starlette app whose answers are all JSON.

- An error is ``{"error": "<one line>"}`` with its status: ``HttpError`` raised by a handler,
  404 for a path no route has (the service words it), 405 with ``Allow`` for a method the route
  does not take (``route`` lists them in order; Starlette's own method check would add ``HEAD``).
- A body is read by ``read_body``: a ``Content-Length`` body up to a limit (413), chunked uploads
  refused (411), within a deadline (400). Starlette's ``max_body_size`` answers its 413 in plain
  text, which is why the limit is ours.
- A client that disconnects before its request is read is one log line, no traceback (nobody is
  left to answer); a bug is one traceback in the service's log and a 500.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HttpError", "json_app", "read_body", "route"]

LENGTH_REQUIRED = "send the body with a Content-Length (curl --data-binary @file)"


class HttpError(Exception):
    """An answer other than success: status code and a one-line message (sent as JSON)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status, headers)


def route(
    path: str, endpoint: Callable[[Request], Awaitable[Response]], methods: Sequence[str]
) -> Route:
    """A route taking only ``methods``; any other method is a 405 naming them."""
    return Route(path, _Only(tuple(methods), request_response(endpoint)))


class _Only:
    """The ASGI app behind a route: the method check, then the endpoint."""

    def __init__(self, methods: tuple[str, ...], app: ASGIApp) -> None:
        self.methods = methods
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in self.methods:
            allowed = ", ".join(self.methods)
            raise HttpError(
                405, f"{scope['method']} is not allowed here (use {allowed})", {"Allow": allowed}
            )
        await self.app(scope, receive, send)


async def read_body(
    request: Request, limit: int, *, timeout: float, require_length: bool = False
) -> bytes:
    """The request's body: at most ``limit`` bytes, arrived within ``timeout`` seconds.

    ``require_length``: a request without ``Content-Length`` is a 411 (otherwise its body is
    empty); a chunked upload is a 411 either way.
    """
    if "chunked" in request.headers.get("transfer-encoding", "").lower():
        raise HttpError(411, LENGTH_REQUIRED)
    header = request.headers.get("content-length")
    if header is None:
        if require_length:
            raise HttpError(411, LENGTH_REQUIRED)
        return b""
    try:
        length = int(header)
    except ValueError:
        raise HttpError(400, "Content-Length is not a number") from None
    if length > limit:
        raise HttpError(413, f"body larger than {limit} bytes")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:  # the server keeps to Content-Length; a backstop
                    raise HttpError(413, f"body larger than {limit} bytes")
    except TimeoutError:
        raise HttpError(400, "the request did not arrive in time") from None
    return bytes(body)


def json_app(
    routes: Sequence[Route],
    *,
    log: logging.Logger,
    event_prefix: str,
    not_found: Callable[[str], str],
    middleware: Sequence[Middleware] = (),
) -> ASGIApp:
    """A Starlette app on ``routes`` whose every error is JSON (see the module docstring).

    ``log`` and ``event_prefix`` name its log events (``<prefix>.request.incomplete``,
    ``<prefix>.request.failed``); ``not_found(path)`` words the 404 for a path no route has.
    """

    def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HttpError)
        return error(exc.status, exc.message, exc.headers)

    def framework_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = not_found(request.url.path) if exc.status_code == 404 else exc.detail
        return error(exc.status_code, message, dict(exc.headers or {}))

    def disconnected(request: Request, exc: Exception) -> Response:
        # The client went away mid-request: an expected failure, one line; the answer is for
        # nobody (the server drops it).
        log.warning(
            f"{event_prefix}.request.incomplete",
            extra={"why": "the client disconnected before its request was read"},
        )
        return Response(status_code=400)

    def failed(request: Request, exc: Exception) -> Response:
        return error(500, "internal error; see the service log")

    app = Starlette(
        routes=list(routes),
        middleware=list(middleware),
        exception_handlers={
            HttpError: http_error,
            HTTPException: framework_error,
            ClientDisconnect: disconnected,
            Exception: failed,
        },
    )
    return _LogBugs(app, log, f"{event_prefix}.request.failed")


class _LogBugs:
    """Outermost: Starlette answers a bug with the 500 and re-raises it for the server to log;
    this logs it once, in the service's own log, instead of uvicorn's traceback."""

    def __init__(self, app: ASGIApp, log: logging.Logger, event: str) -> None:
        self.app = app
        self.log = log
        self.event = event

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception:
            self.log.exception(self.event)
