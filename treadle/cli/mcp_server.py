"""`treadle serve mcp`: Treadle as an MCP server (``treadle.web.mcp``), over stdio for a client
that starts it (Claude Desktop, an IDE), or over streamable HTTP with ``--http``.

    treadle --task-queue treadle-demo serve mcp                    # stdio
    treadle --task-queue treadle-demo serve mcp --http [--port 8767] [--token TOKEN]

``start_run`` without a model starts the run with ``--model``, else the model a run on the
queue gets (``treadle.cli.defaults``: the demo's scripted ``openai:demo`` on the demo's queue).
"""

from __future__ import annotations

import argparse
import os

from temporalio.client import Client

from treadle.cli.defaults import model_for
from treadle.cli.serving import listening, serve_until_interrupted
from treadle.cli.ui import TOKEN_ENV, is_loopback
from treadle.client import AgentClient
from treadle.web import serve
from treadle.web.guard import new_token

__all__ = ["MCP_PORT", "cmd_serve_mcp"]

MCP_PORT = 8767


async def cmd_serve_mcp(client: Client, args: argparse.Namespace) -> int:
    # The MCP SDK takes ~0.7 s to import: only `serve mcp` pays it, not every CLI command.
    from treadle.web.mcp import mcp_http_app, mcp_server

    agents = AgentClient(client, task_queue=args.task_queue)
    model = model_for(args.task_queue, args.model)
    server = mcp_server(agents, task_queue=args.task_queue, model=model)
    if not args.http:
        await server.run_stdio_async()  # until the client closes its end
        return 0
    port = MCP_PORT if args.port is None else args.port
    loopback = is_loopback(args.host)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    made_up = token is None and not loopback
    if made_up:
        token = new_token()
    app = mcp_http_app(server, token=token, loopback=loopback, origins=args.cors_origin)
    async with server.session_manager.run():
        served = await listening(serve.start(app, args.host, port), args.host, port)
        secret = f"; token {token}" if made_up else ""
        return await serve_until_interrupted(
            f"Treadle's MCP server on {served.url}/mcp (namespace {client.namespace}){secret}; "
            "Ctrl-C to stop",
            served.stop,
            "Treadle's MCP server stopped.",
        )
