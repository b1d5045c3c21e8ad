"""The page's app: its HTML, scripts and styles, beside the HTTP API its scripts use.

    GET  /                          the runs and threads (runs.html)
    GET  /runs/{id}                 one run: its conversation, trace and forks (run.html)
    GET  /memory?namespace=NS       a long-term memory namespace, its items edited (memory.html)
    GET  /static/{name}             the page's scripts and styles (package files, no build step)
    /v1/...                         the HTTP API (``treadle.web.api``; docs/api.md)

The page has no backend of its own: what its scripts read and do goes through the same API a
program uses, under the same guard (``treadle.web.guard``: token, loopback host names, origins,
CSRF for the browser's cookies).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp
from temporalio.client import Client

from treadle.client import AgentClient
from treadle.web.api import DEFAULT_MODEL, ApiSettings, api_routes
from treadle.web.guard import Guard, check_access, cors
from treadle.web.http import HttpError, json_app, route

__all__ = ["ui_app"]

log = logging.getLogger("treadle.ui")

STATIC = resources.files("treadle.web.ui") / "static"
MODEL_SLOT = b"{{default_model}}"
"""Where a page names the server's default model (runs.html's Start form)."""
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}  # fmt: skip


def ui_app(
    client: Client | AgentClient,
    *,
    task_queue: str,
    token: str | None = None,
    loopback: bool = True,
    web_ui: str | None = None,
    origins: Sequence[str] = (),
    model: str = DEFAULT_MODEL,
) -> ASGIApp:
    """The page for ``client``'s namespace, and the API; runs it starts go to ``task_queue``.
    ``token``: the access token (``None`` on loopback only); ``web_ui``: the Temporal Web UI's
    base URL; ``origins``: other origins allowed to use the API (CORS); ``model``: the Start
    form's model, and a run's that names none."""
    check_access(token, loopback)
    # Its task queue is where the runs it starts go, and where a new memory namespace runs.
    agents = (
        client if isinstance(client, AgentClient) else AgentClient(client, task_queue=task_queue)
    )
    settings = ApiSettings(
        task_queue=task_queue,
        token=token,
        loopback=loopback,
        origins=origins,
        web_ui=web_ui,
        model=model,
    )
    # The Start form offers the model this server's runs default to (the demo's scripted model
    # on the demo's queue), written into the page as it is served.
    filled = {MODEL_SLOT: html.escape(model, quote=True).encode()}

    def page(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return _file(name, filled)

        return serve

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if "/" in name or name.startswith(".") or not (STATIC / name).is_file():
            raise HttpError(404, f"no static file {name!r}")
        return _file(name)

    routes = [
        route("/", page("runs.html"), ("GET",)),
        route("/runs/{id}", page("run.html"), ("GET",)),
        route("/memory", page("memory.html"), ("GET",)),
        route("/static/{name}", static, ("GET",)),
        *api_routes(agents, settings),
    ]
    app = json_app(
        routes,
        log=log,
        event_prefix="ui",
        not_found=lambda path: f"no {path} here; the runs are at /",
        middleware=[
            Middleware(
                Guard, token=token, loopback=loopback, origins=origins, max_body=settings.max_body
            )
        ],
    )
    return cors(app, origins)


def _file(name: str, filled: dict[bytes, bytes] | None = None) -> Response:
    path = STATIC / name
    media = next((t for suffix, t in _TYPES.items() if name.endswith(suffix)), "text/plain")
    body = path.read_bytes()
    for slot, value in (filled or {}).items():
        body = body.replace(slot, value)
    return Response(body, media_type=media)
