"""`treadle ui`: the browser page for people who work with agents.

    treadle ui [--host 127.0.0.1] [--port 8765] [--token TOKEN] [--web-ui URL]

Runs and threads (filtered by what they wait for), one run's conversation as it happens, and
the decisions it waits for (approve / reject / modify a call, answer its question, guide it),
made in place. It connects to Temporal like every command (``--address``, ``--namespace``,
``--profile``); runs it starts go to ``--task-queue``.

It listens on loopback unless told otherwise. Beyond loopback an access token is required
(``--token``, ``TREADLE_UI_TOKEN``, or one made up at start): the URL printed carries it once,
and the page keeps it in a cookie no script reads.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import Any

from temporalio.client import Client

from treadle.cli.exits import UsageError
from treadle.cli.serving import listening, serve_until_interrupted
from treadle.web import serve
from treadle.web.ui import ui_app
from treadle.web.ui.guard import new_token

__all__ = ["DEFAULT_PORT", "register"]

DEFAULT_PORT = 8765
DEFAULT_WEB_UI = "http://127.0.0.1:8233"
"""The dev server's Web UI (``ui_port`` in temporal-dev.yaml)."""
TOKEN_ENV = "TREADLE_UI_TOKEN"


def register(subparsers: Any) -> None:
    """Add the `ui` command (sets ``handler``)."""
    p = subparsers.add_parser("ui", help="the browser page: runs, conversations, approvals")
    p.add_argument("--host", default=serve.LOOPBACK, help="address to listen on (default loopback)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free port"
    )
    p.add_argument(
        "--token",
        help=f"access token (default: {TOKEN_ENV}; made up when listening beyond loopback)",
    )
    p.add_argument(
        "--web-ui",
        default=DEFAULT_WEB_UI,
        help=f"the Temporal Web UI the page links to (default {DEFAULT_WEB_UI}; '' for none)",
    )
    p.set_defaults(handler=cmd_ui)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def cmd_ui(client: Client, args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port from 0 to 65535")
    loopback = is_loopback(args.host)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is None and not loopback:
        token = new_token()
    app = ui_app(
        client,
        task_queue=args.task_queue,
        token=token,
        loopback=loopback,
        web_ui=args.web_ui.rstrip("/") or None,
    )
    served = await listening(serve.start(app, args.host, args.port), args.host, args.port)
    url = served.url + (f"/?token={token}" if token else "/")
    return await serve_until_interrupted(
        f"Treadle's page on {url} (namespace {client.namespace}); Ctrl-C to stop",
        served.stop,
        "Treadle's page stopped.",
    )
