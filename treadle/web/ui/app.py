"""The page's app: its HTML, scripts and styles, its JSON API, and each run's live stream.

    GET  /                          the runs and threads (runs.html)
    GET  /runs/{id}                 one run: its conversation (run.html)
    GET  /static/{name}             the page's scripts and styles (package files, no build step)
    GET  /api/runs?state=...        the list (see ``runs.FILTERS``)
    POST /api/start                 start a run or a thread
    GET  /api/runs/{id}             its status, calls, schemas, Web UI link
    GET  /api/runs/{id}/transcript  its stream folded into blocks, and the offset reached
    GET  /api/runs/{id}/events      Server-Sent Events: ops from ``?from=N`` (or Last-Event-ID)
    POST /api/runs/{id}/decide | answer | send | close

Everything the page reads of a run and asks of it goes through ``AgentClient``. The live stream
is the run's own (``AgentClient.watch``: queries, nothing added to its history, followed across
continue-as-new). Each SSE message's id is the offset to go on from, so
a browser that lost its connection resumes where it was (``Last-Event-ID``); a reloaded page
takes a new transcript and goes on from the offset it reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp
from temporalio.client import Client

from treadle.client import (
    AgentClient,
    NoStream,
    NoWorkerAnswered,
    RunCannotAnswer,
    RunNotFound,
    TemporalRefused,
)
from treadle.stream import StreamNotice
from treadle.web.http import HttpError, json_app, read_body, route
from treadle.web.ui import actions, runs
from treadle.web.ui.guard import Guard
from treadle.web.ui.transcript import Fold

__all__ = ["ui_app"]

_UNANSWERED = (NoWorkerAnswered, RunCannotAnswer, TemporalRefused, RunNotFound)
"""What reading a stream raises when the run cannot answer now (no worker, a failing one)."""

log = logging.getLogger("treadle.ui")

MAX_BODY_BYTES = 1024 * 1024
READ_TIMEOUT = 30.0
KEEPALIVE_SECONDS = 15.0
"""An SSE comment this often while nothing happens (proxies close idle connections)."""
STATIC = resources.files("treadle.web.ui") / "static"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}  # fmt: skip


def ui_app(
    client: Client | AgentClient,
    *,
    task_queue: str,
    token: str | None = None,
    loopback: bool = True,
    web_ui: str | None = None,
) -> ASGIApp:
    """The page for ``client``'s namespace; runs it starts go to ``task_queue``. ``token``: the
    access token (``None`` on loopback only); ``web_ui``: the Temporal Web UI's base URL."""
    agents = client if isinstance(client, AgentClient) else AgentClient(client)

    def page(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return _file(name)

        return serve

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if "/" in name or name.startswith(".") or not (STATIC / name).is_file():
            raise HttpError(404, f"no static file {name!r}")
        return _file(name)

    async def list_runs(request: Request) -> Response:
        rows = await runs.list_runs(agents, request.query_params.get("state") or None)
        return JSONResponse({"runs": rows, "filters": list(runs.FILTERS)})

    async def start(request: Request) -> Response:
        body = await _json(request)
        workflow_id = await runs.start_run(agents, task_queue, runs.StartRequest.parse(body))
        return JSONResponse({"id": workflow_id}, 201)

    async def run_view(request: Request) -> Response:
        return JSONResponse(await actions.run_view(agents, request.path_params["id"], web_ui))

    async def transcript(request: Request) -> Response:
        fold = Fold()
        try:
            for item in await agents.read_stream(request.path_params["id"]):
                fold.apply(item)
        except NoStream as exc:  # an older run without a stream: the status alone
            return JSONResponse({"blocks": [], "offset": None, "unavailable": str(exc)})
        except _UNANSWERED as exc:
            # No worker answers now: the page starts from the stream's start, which the live
            # view reads once a worker answers (saying it waits for one meanwhile).
            log.info("ui.transcript.unanswered", extra={"why": str(exc)})
            return JSONResponse({"blocks": [], "offset": 0})
        return JSONResponse(fold.snapshot())

    async def events(request: Request) -> Response:
        workflow_id = request.path_params["id"]
        start_at = _offset(request.headers.get("last-event-id") or request.query_params.get("from"))
        return StreamingResponse(
            _ops(agents, workflow_id, start_at),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    def acting(
        act: Callable[[AgentClient, str, dict[str, Any]], Awaitable[dict[str, Any]]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            body = await _json(request)
            return JSONResponse(await act(agents, request.path_params["id"], body))

        return handler

    async def close(request: Request) -> Response:
        return JSONResponse(await actions.close(agents, request.path_params["id"]))

    routes = [
        route("/", page("runs.html"), ("GET",)),
        route("/runs/{id}", page("run.html"), ("GET",)),
        route("/static/{name}", static, ("GET",)),
        route("/api/runs", list_runs, ("GET",)),
        route("/api/start", start, ("POST",)),
        route("/api/runs/{id}", run_view, ("GET",)),
        route("/api/runs/{id}/transcript", transcript, ("GET",)),
        route("/api/runs/{id}/events", events, ("GET",)),
        route("/api/runs/{id}/decide", acting(actions.decide), ("POST",)),
        route("/api/runs/{id}/answer", acting(actions.answer), ("POST",)),
        route("/api/runs/{id}/send", acting(actions.send), ("POST",)),
        route("/api/runs/{id}/close", close, ("POST",)),
    ]
    return json_app(
        routes,
        log=log,
        event_prefix="ui",
        not_found=lambda path: f"no {path} here; the runs are at /",
        middleware=[Middleware(Guard, token=token, loopback=loopback)],
    )


def _file(name: str) -> Response:
    path = STATIC / name
    media = next((t for suffix, t in _TYPES.items() if name.endswith(suffix)), "text/plain")
    return Response(path.read_bytes(), media_type=media)


async def _json(request: Request) -> dict[str, Any]:
    body = await read_body(request, MAX_BODY_BYTES, timeout=READ_TIMEOUT)
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise HttpError(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise HttpError(400, "the body must be a JSON object")
    return data


def _offset(text: str | None) -> int:
    try:
        return max(0, int(text or 0))
    except ValueError:
        raise HttpError(400, f"offset {text!r} is not a number") from None


async def _ops(client: AgentClient, workflow_id: str, start_at: int) -> AsyncIterator[str]:
    """The SSE messages: the fold rebuilt silently up to ``start_at`` (so block ids and the
    text already shown agree with the page's transcript), then every item's ops, with the
    stream's notices (no worker answers, items no longer kept) as they happen, and a comment
    now and then so an idle connection is not taken for a dead one."""
    messages: asyncio.Queue[str | None] = asyncio.Queue()

    def notice(notice: StreamNotice) -> None:
        op = {"op": "notice", "kind": notice.kind, "text": notice.text}
        # No id: a notice is not a place in the stream to resume from.
        messages.put_nowait(f"event: ops\ndata: {json.dumps([op])}\n\n")

    async def pump() -> None:
        fold = Fold()
        try:
            if start_at > 0:
                try:
                    for item in await client.read_stream(workflow_id):
                        if item.offset >= start_at:
                            break
                        fold.apply(item)
                except _UNANSWERED:
                    pass  # no worker now: the blocks after start_at get fresh ids, nothing else
            stream = client.watch(workflow_id, from_offset=start_at, on_notice=notice)
            async with contextlib.aclosing(stream):
                async for item in stream:
                    ops = json.dumps(fold.apply(item))
                    messages.put_nowait(f"id: {item.offset + 1}\nevent: ops\ndata: {ops}\n\n")
            messages.put_nowait("event: over\ndata: {}\n\n")
        except NoStream as exc:
            messages.put_nowait(f"event: unavailable\ndata: {json.dumps(str(exc))}\n\n")
        finally:
            messages.put_nowait(None)

    task = asyncio.create_task(pump(), name=f"ui events {workflow_id}")
    try:
        yield "retry: 1000\n\n"
        while True:
            try:
                message = await asyncio.wait_for(messages.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": still here\n\n"
                continue
            if message is None:
                break
            yield message
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    failure = None if task.cancelled() else task.exception()
    if failure is not None:
        raise failure  # a bug: the service's log shows it once
