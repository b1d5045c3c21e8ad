"""Serve an ASGI app with uvicorn inside the caller's event loop: ``start``, then ``stop``.

The socket is bound before uvicorn starts, so a port in use is an ``OSError`` the command turns
into one line, and port 0 gives the free port chosen (``Served.port``). uvicorn is told to keep
out of the process: no signal handlers (the command owns SIGINT and SIGTERM), no logging setup
and no access log (its warnings reach the root logger like any library's), no lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

__all__ = ["LOOPBACK", "Served", "start"]

LOOPBACK = "127.0.0.1"
GRACE_SECONDS = 5
"""How long ``stop`` lets requests still running finish before it cancels them."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn would install its own handlers and re-raise the signal after shutting down;
        # the command that started the service decides what a signal means.
        yield


class Served:
    """A running server: where it listens, and how to stop it."""

    def __init__(
        self, server: uvicorn.Server, task: asyncio.Task[None], sock: socket.socket
    ) -> None:
        self._server = server
        self._task = task
        self.host, self.port = sock.getsockname()[:2]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening, let running requests finish (up to ``GRACE_SECONDS``), close."""
        self._server.should_exit = True
        await self._task


async def start(app: ASGIApp, host: str = LOOPBACK, port: int = 0) -> Served:
    """Listen on ``host:port`` (port 0: any free port) and serve ``app`` in a task."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    config = uvicorn.Config(
        app,
        http="h11",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=GRACE_SECONDS,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name=f"uvicorn {host}:{port}")
    return Served(server, task, sock)
