"""The two MCP activities: ``list_mcp_tools`` and ``call_mcp_tool``.

What a server *answers* is data for the model: an ``isError`` result, a JSON-RPC error (unknown
tool, arguments its schema refuses), a result the SDK cannot read all come back as
``ToolResult(success=False, output="ERROR: ...")``. A server that does not answer (cannot be
started or reached, closes the connection, outlives its timeout) fails the attempt with a
retryable ``ApplicationError`` (``McpUnavailableError.to_application_error``); Temporal
retries it, and the workflow turns the final failure into an ``ERROR`` observation.

A call of a tool that is not safe to repeat (its annotations do not say ``readOnlyHint`` or
``idempotentHint``) is recorded in the attempt's heartbeat details before it is sent; an attempt
that finds an earlier one sent it (the worker died, or the server stopped answering) does not
send it again but tells the model the outcome is unknown. Safe tools are simply called again.

The SDK is imported off the event loop, and inside the heartbeats: a first MCP use on a busy
worker, or a slow server start, never costs an attempt its heartbeat timeout.

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

from treadle.activities import telemetry
from treadle.activities.content import door
from treadle.activities.errors import StoreUnavailable
from treadle.activities.heartbeat import heartbeating
from treadle.activities.mcp.config import McpConfig, McpServerConfig
from treadle.activities.mcp.errors import McpUnavailableError
from treadle.activities.mcp.schemas import SchemaRefused, SchemaShelf
from treadle.activities.sent_marks import mark_sent, outcome_unknown, sent_before
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.tools.builtin import cap_output
from treadle.workflows.agent.messages.mcp import (
    NOT_CONFIGURED,
    McpCallRequest,
    McpListRequest,
    McpToolInfo,
    McpToolList,
    namespaced_name,
    unique_names,
    vanished,
)
from treadle.workflows.agent.messages.models import ToolResult

if TYPE_CHECKING:
    # The ``mcp`` SDK takes about a second to import: ``sessions``, ``protocol`` and
    # ``results`` (which use it) are imported where a server is first used, so a worker
    # without MCP servers starts as fast as before.
    from mcp.types import Tool

    from treadle.activities.mcp.sessions import McpSessions


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
        self._schemas = SchemaShelf(store)

    @property
    def sessions(self) -> McpSessions:
        """The worker's sessions to its servers (the SDK loads with the first use)."""
        if self._sessions is None:
            from treadle.activities.mcp.sessions import McpSessions

            self._sessions = McpSessions(self.config, self._environ)
        return self._sessions

    @property
    def schemas(self) -> SchemaShelf:
        """Where listed tools' schemas are stored once (the worker may set ``store`` later)."""
        if self._schemas.store is not self.store:
            self._schemas = SchemaShelf(self.store)
        return self._schemas

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
            await load_sdk()
            outcomes = await asyncio.gather(
                *(self._listing(name, request.refresh) for name in names)
            )
            listed = [
                (name, o) for name, o in zip(names, outcomes, strict=True) if isinstance(o, Listing)
            ]
            tools, refused = await self._offered(listed)
        unavailable = {
            name: o for name, o in zip(names, outcomes, strict=True) if isinstance(o, str)
        }
        # A refused tool is reported beside the servers that did not answer (its key is the
        # tool's ``mcp__`` name): the run's ``mcp_tools`` line names it, the others are offered.
        unavailable.update(refused)
        listed_at = min((listing.listed_at for _, listing in listed), default=datetime.now(UTC))
        activity.logger.info(
            "mcp.tools_listed servers=%s tools=%d unavailable=%s",
            ",".join(name for name, _ in listed) or "-",
            len(tools),
            ",".join(unavailable) or "-",
        )
        return McpToolList(tools=tools, unavailable=unavailable, listed_at=listed_at)

    async def _offered(
        self, listed: list[tuple[str, Listing]]
    ) -> tuple[tuple[McpToolInfo, ...], dict[str, str]]:
        """The listed tools as the workflow carries them (each schema stored once, by key),
        and those refused -> why (a schema too large or unusable: ``schemas``)."""
        from treadle.activities.mcp.results import (
            tool_info,  # loaded with the SDK (see TYPE_CHECKING)
        )

        pairs = [(name, tool.name) for name, listing in listed for tool in listing.tools]
        namespaced = unique_names(pairs)
        servers = {server.name: server for server in self.config.servers}
        tools: list[McpToolInfo] = []
        refused: dict[str, str] = {}
        for name, listing in listed:
            for tool in listing.tools:
                info = tool_info(servers[name], tool, namespaced[(name, tool.name)])
                try:
                    tools.append(await self.schemas.offered(info))
                except SchemaRefused as exc:
                    refused[info.name] = str(exc)
                    activity.logger.warning(
                        "mcp.tool_refused server=%s tool=%s reason=%s", name, tool.name, exc
                    )
        return tuple(tools), refused

    async def _listing(self, name: str, refresh: bool) -> Listing | str:
        """The server's listing, or why there is none (one line)."""
        server = self.config.get(name)
        if server is None:
            configured = ", ".join(self.config.names()) or "none"
            return f"{NOT_CONFIGURED} (configured: {configured})"
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
        from treadle.activities.mcp.protocol import list_tools

        loop = asyncio.get_running_loop()
        began = loop.time()
        async with self.sessions.session(server, timeout=server.list_timeout_seconds) as conn:
            started = loop.time() - began
            remaining = max(0.1, server.list_timeout_seconds - started)
            tools = await list_tools(conn, remaining, started)
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
                try:  # stored argument values (a file's content) read back first
                    arguments = await door.resolve_value(self.store, request.arguments)
                except door.NoStore as exc:
                    result = _error(str(exc), request)
                except StoreUnavailable as exc:  # not sent: the workflow waits, then again
                    raise exc.to_application_error() from exc
                else:
                    result = await self.call(request.model_copy(update={"arguments": arguments}))
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
        return await door.tool_output(self.store, result)

    async def call(self, request: McpCallRequest) -> ToolResult:
        """``call_mcp_tool`` without Temporal's error translation or the store."""
        server = self.config.get(request.server)
        if server is None:
            return _error(
                f"MCP server {request.server!r} is not configured on this worker", request
            )
        timeout = request.timeout_seconds or server.timeout_seconds
        loop = asyncio.get_running_loop()
        started = loop.time()

        def running_for() -> str:
            return f"{request.server}/{request.tool} running for {loop.time() - started:.0f}s"

        async with heartbeating(progress=running_for):
            await load_sdk()
            from treadle.activities.mcp.protocol import call_tool
            from treadle.activities.mcp.results import result_text

            repeatable = await self._repeatable(server, request.tool)
            if not repeatable and (request.sent_before or sent_before(request.call_id)):
                activity.logger.warning(
                    "mcp.call_outcome_unknown server=%s tool=%s call_id=%s",
                    request.server,
                    request.tool,
                    request.call_id,
                )
                return _error(outcome_unknown(f"{request.server}/{request.tool}"), request)
            async with self.sessions.session(server, timeout=server.list_timeout_seconds) as conn:
                if not repeatable:
                    await mark_sent(request.call_id, running_for())
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

    async def _repeatable(self, server: McpServerConfig, tool: str) -> bool:
        """Whether calling ``tool`` twice is as good as once: the server's annotations say it
        is read-only or idempotent. A tool without them, or not listed, is not."""
        listing = self._listings.get(server.name)
        if listing is None or all(listed.name != tool for listed in listing.tools):
            listing = await self.refresh_listing(server)
        for listed in listing.tools:
            if listed.name == tool and listed.annotations is not None:
                hints = listed.annotations
                return hints.read_only_hint is True or hints.idempotent_hint is True
        return False

    async def _vanished(self, server: McpServerConfig, tool: str) -> bool:
        """After a failed call: is the tool missing from a fresh listing? A server that cannot
        be listed now does not prove it gone: ``False``."""
        try:
            listing = await self.refresh_listing(server)
        except McpUnavailableError:
            return False
        return all(listed.name != tool for listed in listing.tools)


async def load_sdk() -> None:
    """Import the ``mcp`` SDK (about a second) in a thread: the event loop keeps running, so
    every activity on the worker keeps heartbeating while a first MCP use imports it."""
    await asyncio.to_thread(_import_sdk)


def _import_sdk() -> None:
    import treadle.activities.mcp.protocol
    import treadle.activities.mcp.results
    import treadle.activities.mcp.sessions  # noqa: F401


def _error(text: str, request: McpCallRequest) -> ToolResult:
    """A failed call as the model reads it: ``ERROR: ...``, cut like any tool's output."""
    return ToolResult(success=False, output=f"ERROR: {cap_output(text, request.max_output_chars)}")
