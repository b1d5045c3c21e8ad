"""A real MCP server for the MCP tests, built on the ``mcp`` package's ``MCPServer``.

    python tests/support/mcp_server.py              # stdio (what a worker's ``command`` starts)
    python tests/support/mcp_server.py --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp

Tools: ``add(a, b)`` and ``echo(text)`` (read-only), ``write_note(text)`` (mutating: appends to
the file ``MCP_TEST_NOTES`` names), ``fail()`` (an ``isError`` result), ``crash()`` (an
unexpected exception), ``slow(seconds)``, ``big(chars)`` (a long text), ``pid()``.

Which tools are offered is read from the file ``MCP_TEST_TOOLS`` names (comma-separated names)
on every listing and call, so a test can change the list under a running server; without the
variable every tool is offered. ``MCP_TEST_LIST_DELAY`` (seconds) slows every listing;
``MCP_TEST_SLOW_ONCE`` (a file's path) only the first of all the server's processes.
``MCP_TEST_SECRET``, when set, is what ``whoami`` answers (to prove that an environment
variable named in the config reaches a stdio server), and with
``--http`` every request must carry ``Authorization: Bearer <MCP_TEST_SECRET>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
MUTATING = ToolAnnotations(read_only_hint=False, destructive_hint=False)


def offered() -> set[str] | None:
    """The tool names the ``MCP_TEST_TOOLS`` file lists now; ``None``: all of them."""
    path = os.environ.get("MCP_TEST_TOOLS")
    if not path:
        return None
    text = Path(path).read_text(encoding="utf-8")
    return {name.strip() for name in text.split(",") if name.strip()}


class TestServer(MCPServer):
    """``MCPServer`` whose tool list follows the ``MCP_TEST_TOOLS`` file."""

    async def list_tools(self) -> Any:
        # A server slow to list (MCP_TEST_LIST_DELAY seconds) after a quick handshake.
        await asyncio.sleep(float(os.environ.get("MCP_TEST_LIST_DELAY") or 0))
        # Slow to list the first time only, in any of its processes: the first listing leaves
        # the file MCP_TEST_SLOW_ONCE names and waits past any test's timeout; later ones
        # find it and answer.
        once = os.environ.get("MCP_TEST_SLOW_ONCE")
        if once and not os.path.exists(once):
            Path(once).write_text("listed once, slowly", encoding="utf-8")
            await asyncio.sleep(120)
        tools = await super().list_tools()
        names = offered()
        return [tool for tool in tools if names is None or tool.name in names]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        names = offered()
        if names is not None and name not in names:
            raise ToolError(f"Unknown tool: {name}")
        return await super().call_tool(name, arguments, context)


server = TestServer("treadle-test", log_level="WARNING")


@server.tool(annotations=READ_ONLY)
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(annotations=MUTATING)
def write_note(text: str) -> str:
    """Append a line to the notes file."""
    notes = os.environ.get("MCP_TEST_NOTES")
    if notes:
        with open(notes, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return f"noted: {text}"


@server.tool()
def fail() -> str:
    """Always fails, as a tool that anticipated its failure."""
    raise ToolError("the fail tool failed on purpose")


@server.tool()
def crash() -> str:
    """Always crashes with an unexpected exception."""
    raise RuntimeError("boom")


@server.tool(annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}s"


_arrived: dict[str, int] = {}


@server.tool(annotations=READ_ONLY)
async def meet(group: str, count: int) -> str:
    """Wait until ``count`` calls of the same group are in the server at once (a minute at
    most): "met" proves the calls overlapped, "alone" that they came one after another."""
    _arrived[group] = _arrived.get(group, 0) + 1
    for _ in range(600):
        if _arrived[group] >= count:
            return "met"
        await asyncio.sleep(0.1)
    return "alone"


@server.tool(annotations=READ_ONLY)
def big(chars: int) -> str:
    """A long text of the given length."""
    line = "0123456789" * 7 + "\n"
    return (line * (chars // len(line) + 1))[:chars]


@server.tool(annotations=READ_ONLY)
def pid() -> str:
    """This server's process id (a test kills it to see the worker recover)."""
    return str(os.getpid())


@server.tool(annotations=READ_ONLY)
def whoami() -> str:
    """What the MCP_TEST_SECRET variable holds in this process."""
    return os.environ.get("MCP_TEST_SECRET", "(unset)")


def require_bearer(app: Any, secret: str) -> Any:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <secret>``."""
    expected = f"Bearer {secret}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


def serve_http(port: int) -> None:
    import uvicorn

    app: Any = server.streamable_http_app()
    secret = os.environ.get("MCP_TEST_SECRET")
    if secret:
        app = require_bearer(app, secret)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


# --------------------------------------------------------------------------------------------
# Running it from the tests (used by tests/mcp/, never by the server itself)
# --------------------------------------------------------------------------------------------

SCRIPT = Path(__file__).resolve()


def stdio_entry(name: str = "test", **extra: Any) -> dict[str, Any]:
    """A ``[[servers]]`` entry that starts this script over stdio."""
    return {"name": name, "command": sys.executable, "args": [str(SCRIPT)], **extra}


def http_entry(name: str, url: str, **extra: Any) -> dict[str, Any]:
    """A ``[[servers]]`` entry for this script serving streamable HTTP at ``url``."""
    return {"name": name, "url": url, **extra}


@contextlib.contextmanager
def http_server(port: int, env: dict[str, str]) -> Iterator[str]:
    """This script serving streamable HTTP on ``port``; yields its URL once it accepts."""
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--http", str(port)],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not _accepts(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the MCP test server did not start on port {port}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    args = parser.parse_args(argv)
    if args.http is None:
        server.run("stdio")
    else:
        serve_http(args.http)


if __name__ == "__main__":
    sys.exit(main())
