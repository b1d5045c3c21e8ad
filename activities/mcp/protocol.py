"""One MCP request each (``tools/list``, ``tools/call``) over a worker's session, with the
failure rules of ``treadle.activities.mcp.activity``: what the server answers is returned, a server
that does not answer raises ``McpUnavailableError`` and retires the session.

This module and ``sessions`` are where the ``mcp`` SDK is imported; ``activity`` loads them
only when a server is used, so a worker without MCP servers never pays the SDK's import (about
a second).
"""

from __future__ import annotations

import asyncio

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, Tool
from pydantic import ValidationError

from treadle.activities.mcp.errors import McpTimeoutError, McpUnavailableError
from treadle.activities.mcp.sessions import Connection, one_line
from treadle.workflows.agent.messages.mcp import McpCallRequest

MAX_LIST_PAGES = 100
"""A server whose ``tools/list`` cursor never ends is cut off after this many pages."""
CALL_BACKSTOP_SECONDS = 5.0
"""The SDK's own read timeout ends a slow call; this much later the attempt ends regardless
(a write blocked on a full pipe is not covered by the SDK's timeout)."""

# Failures of the transport itself (not answers of the server): the session is retired.
TRANSPORT_FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    httpx2.TransportError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


async def list_tools(conn: Connection, timeout: float, started: float = 0.0) -> tuple[Tool, ...]:
    """Every tool the server lists now, page by page, within ``timeout``: what is left of its
    ``list_timeout_seconds`` after ``started`` seconds spent starting (or reaching) it."""
    name = conn.server.name
    client: Client = conn.client
    if client.server_capabilities.tools is None:
        return ()  # a server of prompts or resources only
    tools: list[Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    try:
        async with asyncio.timeout(timeout):
            for _ in range(MAX_LIST_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None or cursor in seen:
                    break
                seen.add(cursor)
    except TimeoutError:
        conn.retire()
        raise McpTimeoutError(name, _listing_timeout(conn, started)) from None
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            conn.retire()
            raise McpUnavailableError(name, "closed the connection while listing") from exc
        raise McpUnavailableError(name, f"refused to list its tools: {_rpc_error(exc)}") from exc
    except ValidationError as exc:
        raise McpUnavailableError(name, "answered tools/list with an invalid result") from exc
    except TRANSPORT_FAILURES as exc:
        conn.retire()
        raise McpUnavailableError(name, f"failed while listing: {one_line(exc)}") from exc
    unique = {tool.name: tool for tool in tools}  # a server listing a name twice: the last wins
    return tuple(unique.values())


async def call_tool(
    conn: Connection, request: McpCallRequest, timeout: float
) -> CallToolResult | str:
    """The server's ``CallToolResult``, or the text of its refusal (a JSON-RPC error, a result
    the SDK could not read); ``McpUnavailableError`` when it did not answer."""
    name = conn.server.name
    client: Client = conn.client
    try:
        async with asyncio.timeout(timeout + CALL_BACKSTOP_SECONDS):
            return await client.call_tool(
                request.tool, request.arguments, read_timeout_seconds=timeout
            )
    except TimeoutError:
        conn.retire()
        raise McpTimeoutError(name, f"did not answer {request.tool} within {timeout:g}s") from None
    except MCPError as exc:
        if exc.code == REQUEST_TIMEOUT:
            # A server stuck on one call may be stuck for all: the next attempt gets a new one
            # (for stdio, a new process; the old one is stopped, and its work with it).
            conn.retire()
            raise McpTimeoutError(
                name, f"did not answer {request.tool} within {timeout:g}s"
            ) from exc
        if exc.code == CONNECTION_CLOSED:
            conn.retire()
            raise McpUnavailableError(name, f"closed the connection during {request.tool}") from exc
        return f"server {name} refused the call to {request.tool}: {_rpc_error(exc)}"
    except ValidationError as exc:
        problems = exc.error_count()
        return f"server {name} answered {request.tool} with an invalid result ({problems} problems)"
    except RuntimeError as exc:
        # The SDK checks structured output against the tool's output schema; a mismatch is
        # the server's answer being wrong, not the connection.
        if "structured content" in str(exc) or "schema" in str(exc):
            return f"server {name} answered {request.tool} with an invalid result: {exc}"
        raise
    except TRANSPORT_FAILURES as exc:
        conn.retire()
        raise McpUnavailableError(name, f"failed during {request.tool}: {one_line(exc)}") from exc


def _rpc_error(exc: MCPError) -> str:
    return f"{' '.join(exc.message.split())} (JSON-RPC error {exc.code})"


def _listing_timeout(conn: Connection, started: float) -> str:
    """Why a listing ended, naming the configured limit (not what was left of it) and where the
    time went, so the limit can be raised knowingly."""
    limit = conn.server.list_timeout_seconds
    spent = f"; starting or reaching it took {started:.1f}s of them" if started >= 0.1 else ""
    return (
        f"did not list its tools within its list_timeout_seconds of {limit:g}s{spent} (raise it "
        "for a server that starts slowly or lists many tools; the run lists it again at a later "
        "step)"
    )
