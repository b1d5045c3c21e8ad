"""One live MCP session per configured server and worker process, shared by every call.

Why not a fresh session per call: starting a stdio server is starting a process (measured with
tests/support/mcp_server.py: a median 1.3 s to start it and call once, 0.3 s to stop it, against
4 ms a call over a kept session; streamable HTTP: 56 ms fresh, 6 ms kept), and many stdio
servers keep state between calls (an open browser page, a database connection) that a fresh
process would lose.

How a kept session stays safe:

- **Opened lazily, by the first call or listing** that needs the server, under a per-server lock
  so concurrent callers share one session; bounded by the server's ``list_timeout_seconds``.
- **Owned by a task of its own.** The ``mcp`` SDK's transports are anyio task groups, which must
  be left by the task that entered them; activity attempts come and go, so a dedicated owner task
  enters the ``Client`` and holds it until asked to stop.
- **Checked before reuse.** A stdio server that died while idle (crash, OOM kill) closed its
  pipes; such a session is dropped before it is handed out, so a call never starts on it.
- **Retired on a connection failure or a timeout**: no new call gets it, and it closes once the
  calls still running on it finish (in the background: a stdio server may take seconds to exit).
  The failing attempt raises a retryable error; Temporal's retry opens a fresh session.
- **Closed with the worker** (``McpSessions.aclose``), within a bound per server.

Cancellation of an attempt (heartbeat timeout, a cancelled run) cancels only that request: the
SDK tells the server, and the session stays up for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Mapping

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from treadle.activities.mcp.config import McpConfig, McpServerConfig
from treadle.activities.mcp.errors import McpTimeoutError, McpUnavailableError

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_SECONDS = 10.0
"""How long closing one session may take before its owner task is cancelled: the SDK's stdio
shutdown closes stdin, waits 2 s, sends SIGTERM, waits 2 s, then kills."""
DEFAULT_READ_TIMEOUT_SECONDS = 300.0
"""The SDK's per-request read timeout where a request sets none (calls and listings set theirs)."""


class Connection:
    """One MCP session to one server, held open by its owner task."""

    def __init__(self, server: McpServerConfig, environ: Mapping[str, str]) -> None:
        self.server = server
        self._environ = environ
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self.inflight = 0
        self.retired = False
        self.http_refusal: str | None = None
        """The last error status an HTTP server answered with (the SDK reports only "Server
        returned an error response"), so an operator reads "HTTP 401 Unauthorized"."""

    async def open(self, timeout: float) -> None:
        """Start the server (or reach it) and complete the MCP handshake within ``timeout``.
        On failure the owner may still be running: the caller closes the connection."""
        # A fresh context: the owner outlives the activity attempt that opened it, and must not
        # carry that attempt's activity context (or keep it alive) for the worker's lifetime.
        self._owner = asyncio.create_task(
            self._own(), name=f"mcp-session-{self.server.name}", context=contextvars.Context()
        )
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._ready)
        except TimeoutError:
            raise McpTimeoutError(
                self.server.name, f"did not complete the MCP handshake within {timeout:g}s"
            ) from None
        except Exception as exc:
            reason = connect_failure(self.server, exc)
            if self.http_refusal is not None:
                reason = f"refused the connection: {self.http_refusal}"
            raise McpUnavailableError(self.server.name, reason) from exc

    @property
    def client(self) -> Client:
        return self._ready.result()

    def alive(self) -> bool:
        """Open, not retired, and its transport still up."""
        if self.retired or self._owner is None or self._owner.done():
            return False
        if not self._ready.done() or self._ready.cancelled() or self._ready.exception():
            return False
        return not transport_closed(self.client)

    def retire(self) -> None:
        """No new call gets this session; it closes when the last running call releases it."""
        self.retired = True

    async def _own(self) -> None:
        try:
            async with self._client() as client:
                self._ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not self._ready.done():
                self._ready.cancel()
            raise
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                # The transport failed under a running session (the server died mid-call):
                # the calls on it see the connection close; the next caller opens a new one.
                log.info("mcp.session_failed server=%s error=%s", self.server.name, one_line(exc))
        finally:
            self.retired = True

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        """The SDK's client for this server's transport, entered (handshake done)."""
        server, environ = self.server, self._environ
        async with contextlib.AsyncExitStack() as stack:
            if server.command is not None:
                client = Client(
                    StdioServerParameters(
                        command=server.command,
                        args=list(server.args),
                        # Only the variables the config names (over the SDK's safe defaults).
                        env={name: environ[name] for name in server.env if name in environ},
                        cwd=server.cwd,
                    ),
                    cache=None,  # the activities keep their own cache of listings
                    read_timeout_seconds=DEFAULT_READ_TIMEOUT_SECONDS,
                )
            else:
                assert server.url is not None  # the config allows exactly one transport
                headers = {
                    header: environ[variable]
                    for header, variable in server.headers_from_env.items()
                    if variable in environ
                }
                # A client passed in is not closed by the transport: the stack closes it.
                http = await stack.enter_async_context(create_mcp_http_client(headers))
                http.event_hooks["response"].append(self._note_refusal)
                client = Client(
                    streamable_http_client(server.url, http_client=http),
                    cache=None,
                    read_timeout_seconds=DEFAULT_READ_TIMEOUT_SECONDS,
                )
            yield await stack.enter_async_context(client)

    async def _note_refusal(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.http_refusal = f"HTTP {response.status_code} {response.reason_phrase}".strip()

    def close_soon(self) -> asyncio.Task[None]:
        """Close in the background; the returned task finishes when the session is closed."""
        self.retired = True
        return asyncio.create_task(self.close(), context=contextvars.Context())

    async def close(self) -> None:
        self.retired = True
        self._stop.set()
        owner = self._owner
        if owner is None:
            return
        if not self._ready.done():
            owner.cancel()  # still connecting: nothing to shut down politely
        done, _ = await asyncio.wait({owner}, timeout=CLOSE_TIMEOUT_SECONDS)
        if not done:
            log.warning("mcp.session_close_timeout server=%s", self.server.name)
            owner.cancel()
            await asyncio.wait({owner}, timeout=CLOSE_TIMEOUT_SECONDS)
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved: a failed open was already reported


class McpSessions:
    """The worker's sessions, one per configured server, opened on first use."""

    def __init__(self, config: McpConfig, environ: Mapping[str, str]) -> None:
        self.config = config
        self._environ = environ
        self._connections: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.opened = 0
        """Sessions opened so far (for tests and logs: reuse keeps this low)."""

    @contextlib.asynccontextmanager
    async def session(
        self, server: McpServerConfig, *, timeout: float
    ) -> AsyncIterator[Connection]:
        """A live session to ``server`` for the block, opened within ``timeout`` when there is
        none; ``McpUnavailableError`` when none can be opened. Call ``retire()`` on it when the
        block saw the connection fail."""
        connection = await self._acquire(server, timeout)
        try:
            yield connection
        finally:
            connection.inflight -= 1
            if connection.retired:
                self._forget(connection)
                if connection.inflight == 0:
                    self._track(connection.close_soon())

    async def _acquire(self, server: McpServerConfig, timeout: float) -> Connection:
        lock = self._locks.setdefault(server.name, asyncio.Lock())
        async with lock:
            connection = self._connections.get(server.name)
            if connection is not None and not connection.alive():
                self._forget(connection)
                if connection.inflight == 0:
                    self._track(connection.close_soon())
                connection = None
            if connection is None:
                connection = Connection(server, self._environ)
                try:
                    await connection.open(timeout)
                except BaseException:
                    self._track(connection.close_soon())
                    raise
                self.opened += 1
                log.info("mcp.session_opened server=%s transport=%s", server.name, server.transport)
                self._connections[server.name] = connection
            connection.inflight += 1
            return connection

    def is_open(self, name: str) -> bool:
        """Whether the worker holds a live session to server ``name`` now."""
        connection = self._connections.get(name)
        return connection is not None and connection.alive()

    def _forget(self, connection: Connection) -> None:
        if self._connections.get(connection.server.name) is connection:
            del self._connections[connection.server.name]

    def _track(self, task: asyncio.Task[None]) -> None:
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every session (the worker is stopping); waits for background closes too."""
        connections = list(self._connections.values())
        self._connections.clear()
        closing = [*self._closing, *(c.close_soon() for c in connections)]
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)


def transport_closed(client: Client) -> bool:
    """Whether the session's transport has closed (a stdio server that exited, say).

    The SDK has no public flag for it: this reads its JSON-RPC dispatcher's ``_closed``, set
    when the server's output ends. Where that attribute is missing (another SDK version or
    transport), this answers ``False`` and a dead session is found by the call itself, which
    fails with a retryable error: the check saves an attempt, correctness does not need it.
    """
    try:
        dispatcher = client.session._dispatcher
    except (AttributeError, RuntimeError):
        return True
    return getattr(dispatcher, "_closed", False) is True


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, which anyio task groups raise."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def one_line(exc: BaseException) -> str:
    """An exception (the first inside any group) as one line: ``Type: message``."""
    first = leaves(exc)[0]
    text = " ".join(str(first).split())
    return f"{type(first).__name__}: {text}" if text else type(first).__name__


def connect_failure(server: McpServerConfig, exc: BaseException) -> str:
    """Why a session could not be opened, in words an operator can act on."""
    first = leaves(exc)[0]
    if isinstance(first, FileNotFoundError) and server.command is not None:
        return f"could not be started: {server.command!r} not found"
    if isinstance(first, PermissionError) and server.command is not None:
        return f"could not be started: {server.command!r} is not executable"
    if isinstance(first, httpx2.ConnectError):
        return f"could not be reached at {server.url}: {' '.join(str(first).split())}"
    if server.command is not None and "Connection closed" in str(first):
        return "exited before completing the MCP handshake (see the worker's stderr)"
    return f"could not be connected: {one_line(first)}"
