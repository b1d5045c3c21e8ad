"""`treadle ui`: the browser page for people who work with agents, and the HTTP API it uses;
`treadle api`: the HTTP API alone (docs/api.md).

    treadle ui  [--host 127.0.0.1] [--port 8765] [--token TOKEN] [--web-ui URL] [--cors-origin URL]
                [--model PROVIDER:MODEL]
    treadle api [--host 127.0.0.1] [--port 8766] [--token TOKEN] [--web-ui URL] [--cors-origin URL]
                [--model PROVIDER:MODEL]

Runs and threads (filtered by what they wait for), one run's conversation as it happens, and
the decisions it waits for (approve / reject / modify a call, answer its question, guide it),
made in place. It connects to Temporal like every command (``--address``, ``--namespace``,
``--profile``); runs it starts go to ``--task-queue``, with ``--model`` when they name none
(on the demo's queue, ``treadle-demo``, the demo's scripted model ``openai:demo``).

Both listen on loopback unless told otherwise. Beyond loopback an access token is required
(``--token``, ``TREADLE_UI_TOKEN``, or one made up at start and printed): programs send it as
``Authorization: Bearer TOKEN``; the page's URL carries it once, and the page keeps it in a
cookie no script reads. No other origin may use them unless named (``--cors-origin``).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import Any

from temporalio.client import Client

from treadle.cli.defaults import model_for
from treadle.cli.exits import UsageError
from treadle.cli.serving import listening, serve_until_interrupted
from treadle.web import serve
from treadle.web.api import DEFAULT_MODEL, MAX_BODY_BYTES, ApiSettings, api_app
from treadle.web.guard import new_token
from treadle.web.ui import ui_app

__all__ = ["DEFAULT_PORT", "register"]

DEFAULT_PORT = 8765
API_PORT = 8766
DEFAULT_WEB_UI = "http://127.0.0.1:8233"
"""The dev server's Web UI (``ui_port`` in temporal-dev.yaml)."""
TOKEN_ENV = "TREADLE_UI_TOKEN"


def register(subparsers: Any) -> None:
    """Add the `ui` and `api` commands (each sets ``handler``)."""
    ui = subparsers.add_parser("ui", help="the browser page: runs, conversations, approvals")
    _options(ui, DEFAULT_PORT)
    ui.set_defaults(handler=cmd_ui)
    api = subparsers.add_parser("api", help="the HTTP API: runs and threads over HTTP and SSE")
    _options(api, API_PORT)
    api.add_argument(
        "--max-body",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"the largest request body in bytes (default {MAX_BODY_BYTES})",
    )
    api.set_defaults(handler=cmd_api)


def _options(p: Any, port: int) -> None:
    p.add_argument("--host", default=serve.LOOPBACK, help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=port, help=f"default {port}; 0: any free port")
    p.add_argument(
        "--token",
        help=f"access token (default: {TOKEN_ENV}; made up when listening beyond loopback)",
    )
    p.add_argument(
        "--web-ui",
        default=DEFAULT_WEB_UI,
        help=f"the Temporal Web UI runs link to (default {DEFAULT_WEB_UI}; '' for none)",
    )
    p.add_argument(
        "--model",
        help=f"the model of a run started without one, and the page's Start form's (default "
        f"{DEFAULT_MODEL}; on the demo's task queue, the demo's scripted model)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="URL",
        help="an origin allowed cross-origin access (https://app.example); repeatable; none "
        "by default",
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_model(args: argparse.Namespace) -> str:
    """``--model``, else the model a run on the served queue gets (``treadle.cli.defaults``)."""
    return model_for(args.task_queue, args.model)


def _access(args: argparse.Namespace) -> tuple[bool, str | None]:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port from 0 to 65535")
    loopback = is_loopback(args.host)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is None and not loopback:
        token = new_token()
    return loopback, token


async def cmd_ui(client: Client, args: argparse.Namespace) -> int:
    loopback, token = _access(args)
    app = ui_app(
        client,
        task_queue=args.task_queue,
        token=token,
        loopback=loopback,
        web_ui=args.web_ui.rstrip("/") or None,
        origins=args.cors_origin,
        model=default_model(args),
    )
    served = await listening(serve.start(app, args.host, args.port), args.host, args.port)
    url = served.url + (f"/?token={token}" if token else "/")
    return await serve_until_interrupted(
        f"Treadle's page on {url} (namespace {client.namespace}); Ctrl-C to stop",
        served.stop,
        "Treadle's page stopped.",
    )


async def cmd_api(client: Client, args: argparse.Namespace) -> int:
    loopback, token = _access(args)
    if args.max_body < 1:
        raise UsageError(f"--max-body {args.max_body} is not a positive number of bytes")
    settings = ApiSettings(
        task_queue=args.task_queue,
        token=token,
        loopback=loopback,
        origins=tuple(args.cors_origin),
        web_ui=args.web_ui.rstrip("/") or None,
        max_body=args.max_body,
        model=default_model(args),
    )
    served = await listening(
        serve.start(api_app(client, settings), args.host, args.port), args.host, args.port
    )
    given = args.token or os.environ.get(TOKEN_ENV)
    secret = f"; token {token}" if token and not given else ""
    return await serve_until_interrupted(
        f"Treadle's API on {served.url}/v1 (namespace {client.namespace}); its document: "
        f"{served.url}/v1/openapi.json{secret}; Ctrl-C to stop",
        served.stop,
        "Treadle's API stopped.",
    )
