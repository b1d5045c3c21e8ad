"""`treadle serve a2a`: Treadle as an A2A agent (``treadle.web.a2a``; the ``a2a`` extra).

treadle --task-queue treadle-demo serve a2a [--model MODEL] [--port 8768] [--token TOKEN]

A task's thread runs with ``--model``, else the model a run on the queue gets
(``treadle.cli.defaults``: the demo's scripted ``openai:demo`` on the demo's queue).
"""

from __future__ import annotations

import argparse
import os

from temporalio.client import Client

from treadle.cli.defaults import model_for
from treadle.cli.exits import UsageError
from treadle.cli.serving import listening, serve_until_interrupted
from treadle.cli.ui import TOKEN_ENV, is_loopback
from treadle.client import AgentClient
from treadle.web import serve
from treadle.web.guard import new_token

__all__ = ["A2A_PORT", "cmd_serve_a2a"]

A2A_PORT = 8768


async def cmd_serve_a2a(client: Client, args: argparse.Namespace) -> int:
    try:
        from treadle.web.a2a import a2a_app
    except ImportError as exc:
        raise UsageError(
            f"serve a2a needs the a2a extra: pip install 'treadle[a2a]' ({exc.name} is missing)"
        ) from None
    port = A2A_PORT if args.port is None else args.port
    loopback = is_loopback(args.host)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    made_up = token is None and not loopback
    if made_up:
        token = new_token()
    model = model_for(args.task_queue, args.model)
    agents = AgentClient(client, task_queue=args.task_queue)
    app, card = a2a_app(
        agents,
        url=f"http://{args.host}:{port}/",
        task_queue=args.task_queue,
        model=model,
        token=token,
        loopback=loopback,
        origins=args.cors_origin,
    )
    served = await listening(serve.start(app, args.host, port), args.host, port)
    card.supported_interfaces[0].url = served.url + "/"  # the port chosen, for port 0
    secret = f"; token {token}" if made_up else ""
    return await serve_until_interrupted(
        f"Treadle's A2A agent on {served.url}/ (card: {served.url}/.well-known/agent-card.json, "
        f"model {model}){secret}; Ctrl-C to stop",
        served.stop,
        "Treadle's A2A agent stopped.",
    )
