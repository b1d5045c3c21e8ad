"""The two MCP activities: ``list_mcp_tools`` and ``call_mcp_tool``.

What a server *answers* is data for the model: an ``isError`` result, a JSON-RPC error (unknown
tool, arguments its schema refuses), a result the SDK cannot read all come back as
``ToolResult(success=False, output="ERROR: ...")``. A server that does not answer (cannot be
started or reached, closes the connection, outlives its timeout) fails the attempt with a
retryable ``ApplicationError`` (``McpUnavailableError.to_application_error``); Temporal
retries it, and the workflow turns the final failure into an ``ERROR`` observation.

After any failed call the server's tool list is fetched again: when the tool is gone the model
reads "ERROR: tool X is no longer offered by server Y", whatever the server's own wording, and
the worker's cached listing is updated.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING

from temporalio import activity

from activities import telemetry
from activities.heartbeat import heartbeating
from activities.mcp.config import McpConfig, McpServerConfig
from activities.mcp.errors import McpUnavailableError
from activities.store.conversation import ConversationStore
from activities.tools.builtin import cap_output, store_long_output
from workflows.agent.mcp import (
    McpCallRequest,
    McpListRequest,
    McpToolList,
    namespaced_name,
    unique_names,
    vanished,
)
from workflows.agent.models import ToolResult

if TYPE_CHECKING:
    # The ``mcp`` SDK takes about a second to import: ``sessions``, ``protocol`` and
    # ``results`` (which use it) are imported where a server is first used, so a worker
    # without MCP servers starts as fast as before.
    from mcp.types import Tool

    from activities.mcp.sessions import McpSessions


@dataclass(frozen=True)
class Listing:
    """One server's tools as last listed by this worker."""

    tools: tuple[Tool, ...]
    listed_at: datetime


class McpActivities:
    """The MCP activities of one worker: its configured servers, their sessions (kept open,
    see ``sessions``) and their cached tool lists. Enter it (or ``aclose()``) to stop the
    servers it started when the worker stops.

    ``environ`` supplies the variables the config names (stdio ``env``, HTTP
    ``headers_from_env``); it is read when a server is started or reached.
    """

    def __init__(
        self,
        config: McpConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        store: ConversationStore | None = None,
    ) -> None:
        self.config = config if config is not None else McpConfig()
        self.store = store
        self._environ: Mapping[str, str] = environ if environ is not None else {}
        self._sessions: McpSessions | None = None
        self._listings: dict[str, Listing] = {}

    @property
    def sessions(self) -> McpSessions:
        """The worker's sessions to its servers (the SDK loads with the first use)."""
        if self._sessions is None:
            from activities.mcp.sessions import McpSessions

            self._sessions = McpSessions(self.config, self._environ)
        return self._sessions

    async def __aenter__(self) -> McpActivities:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every server session this worker opened."""
        if self._sessions is not None:
            await self._sessions.aclose()

    # ----------------------------------------------------------------------------------------
    # list_mcp_tools
    # ----------------------------------------------------------------------------------------

    @activity.defn(name="list_mcp_tools")
    async def list_mcp_tools(self, request: McpListRequest) -> McpToolList:
        """List the tools of the named servers (all when none are named), from the worker's
        cache unless ``refresh``; a server that fails is reported, never raised."""
        names = tuple(dict.fromkeys(request.servers or self.config.names()))
        # Starting several stdio servers may take a while: heartbeats tell Temporal the worker
        # is alive, so the workflow can give a long start-to-close timeout and a short
        # heartbeat timeout.
        async with heartbeating("listing MCP servers"):
            outcomes = await asyncio.gather(
                *(self._listing(name, request.refresh) for name in names)
            )
        listed = [
            (name, o) for name, o in zip(names, outcomes, strict=True) if isinstance(o, Listing)
        ]
        unavailable = {
            name: o for name, o in zip(names, outcomes, strict=True) if isinstance(o, str)
        }
        from activities.mcp.results import tool_info  # loaded with the SDK (see TYPE_CHECKING)

        pairs = [(name, tool.name) for name, listing in listed for tool in listing.tools]
        namespaced = unique_names(pairs)
        servers = {server.name: server for server in self.config.servers}
        tools = tuple(
            tool_info(servers[name], tool, namespaced[(name, tool.name)])
            for name, listing in listed
            for tool in listing.tools
        )
        listed_at = min((listing.listed_at for _, listing in listed), default=datetime.now(UTC))
        activity.logger.info(
            "mcp.tools_listed servers=%s tools=%d unavailable=%s",
            ",".join(name for name, _ in listed) or "-",
            len(tools),
            ",".join(unavailable) or "-",
        )
        return McpToolList(tools=tools, unavailable=unavailable, listed_at=listed_at)

    async def _listing(self, name: str, refresh: bool) -> Listing | str:
        """The server's listing, or why there is none (one line)."""
        server = self.config.get(name)
        if server is None:
            configured = ", ".join(self.config.names()) or "none"
            return f"not configured on this worker (configured: {configured})"
        cached = self._listings.get(name)
        if cached is not None and not refresh:
            return cached
        try:
            return await self.refresh_listing(server)
        except McpUnavailableError as exc:
            activity.logger.warning("mcp.server_unavailable server=%s reason=%s", name, exc.reason)
            return exc.reason
        except Exception as exc:
            # A bug in one server's listing (or in the SDK) must not cost the run every
            # other server's tools: it is reported like a server that is down, with a trace.
            activity.logger.exception("mcp.server_listing_failed server=%s", name)
            return f"could not be listed: {type(exc).__name__}: {' '.join(str(exc).split())}"

    async def refresh_listing(self, server: McpServerConfig) -> Listing:
        """Ask the server for its tools now (connecting first if need be) and cache them;
        ``McpUnavailableError`` when it does not answer within ``list_timeout_seconds``."""
        from activities.mcp.protocol import list_tools

        loop = asyncio.get_running_loop()
        deadline = loop.time() + server.list_timeout_seconds
        async with self.sessions.session(server, timeout=server.list_timeout_seconds) as conn:
            remaining = max(0.1, deadline - loop.time())
            tools = await list_tools(conn, remaining)
        listing = Listing(tools=tools, listed_at=datetime.now(UTC))
        self._listings[server.name] = listing
        return listing

    # ----------------------------------------------------------------------------------------
    # call_mcp_tool
    # ----------------------------------------------------------------------------------------

    @activity.defn(name="call_mcp_tool")
    async def call_mcp_tool(self, request: McpCallRequest) -> ToolResult:
        """Call one tool of one MCP server; what the server answers is the result, a server
        that does not answer fails the attempt (retryable)."""
        try:
            with telemetry.tool_call(
                f"{request.server}/{request.tool}",
                request.call_id,
                step=request.step,
                **{"treadle.mcp.server": request.server},
            ) as span:
                result = await self.call(request)
                span.finished(result.success)
        except McpUnavailableError as exc:
            activity.logger.warning(
                "mcp.call_failed server=%s tool=%s call_id=%s reason=%s",
                request.server,
                request.tool,
                request.call_id,
                exc.reason,
            )
            raise exc.to_application_error() from exc
        activity.logger.info(
            "mcp.call_finished server=%s tool=%s call_id=%s step=%d success=%s",
            request.server,
            request.tool,
            request.call_id,
            request.step,
            result.success,
        )
        return await store_long_output(self.store, result)

    async def call(self, request: McpCallRequest) -> ToolResult:
        """``call_mcp_tool`` without Temporal's error translation or the store."""
        server = self.config.get(request.server)
        if server is None:
            return _error(
                f"MCP server {request.server!r} is not configured on this worker", request
            )
        from activities.mcp.protocol import call_tool
        from activities.mcp.results import result_text

        timeout = request.timeout_seconds or server.timeout_seconds
        loop = asyncio.get_running_loop()
        started = loop.time()

        def running_for() -> str:
            return f"{request.server}/{request.tool} running for {loop.time() - started:.0f}s"

        async with heartbeating(progress=running_for):
            async with self.sessions.session(server, timeout=server.list_timeout_seconds) as conn:
                answer = await call_tool(conn, request, timeout)
            if isinstance(answer, str) or answer.is_error:
                refusal = answer if isinstance(answer, str) else result_text(answer)
                if await self._vanished(server, request.tool):
                    refusal = vanished(server.name, request.tool)
                return _error(refusal, request)
        text = cap_output(result_text(answer), request.max_output_chars)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        # The same call answering the same text again is not progress (Nexora).
        return ToolResult(
            success=True,
            output=text,
            content_hashes={namespaced_name(request.server, request.tool): digest},
        )

    async def _vanished(self, server: McpServerConfig, tool: str) -> bool:
        """After a failed call: is the tool missing from a fresh listing? A server that cannot
        be listed now does not prove it gone: ``False``."""
        try:
            listing = await self.refresh_listing(server)
        except McpUnavailableError:
            return False
        return all(listed.name != tool for listed in listing.tools)


def _error(text: str, request: McpCallRequest) -> ToolResult:
    """A failed call as the model reads it: ``ERROR: ...``, cut like any tool's output."""
    return ToolResult(success=False, output=f"ERROR: {cap_output(text, request.max_output_chars)}")
