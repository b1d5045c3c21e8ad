"""The run's MCP tools: listed before its first model call, and a server whose listing failed
listed again at later steps until it answers.

The first listing (``list_mcp_tools``, one activity for every server of ``config.mcp_servers``)
reports a server that is down, refused or too slow instead of failing: the run goes on with the
others. Under load a server may just be slow that once, so its tools are not lost for the whole
run: before the next step, then 2, 4 and 8 steps after each try (``McpRelisting.due``), the run
asks again for the servers still missing, at most ``RELISTS`` times, and their tools join the
offered ones the step they answer. A server the worker does not have
(``mcp.NOT_CONFIGURED``) is not asked again: no step changes that.

The model reads where each such server stands, as a note of the loop in the conversation (a
user message): not listed yet and listed again before step N; answered, with its tools; or
given up. The trace says the same (``McpToolsListed`` once, ``McpToolsRelisted`` per listing
made again), and the live stream's ``mcp_tools`` event comes again when tools join.

Versioned: a run starts listing again only when ``workflow.patched(RELIST_PATCH)`` says so, and
it is asked only when a listing left a server out, so a run whose servers all answered records
no marker, and a history recorded before (where a missing server stayed missing for the run)
replays as it ran. The listing's state (``AgentRun.mcp_relist``) is carried across
continue-as-new.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from treadle.workflows.agent import calls
from treadle.workflows.agent.messages import mcp
from treadle.workflows.agent.messages.mcp import McpListRequest, McpRelisting, McpToolList
from treadle.workflows.agent.messages.models import Turn
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import cut
from treadle.workflows.agent.parts.toolbox import Toolbox
from treadle.workflows.base import failure_message

__all__ = ["RELISTS", "RELIST_PATCH", "due", "list_tools"]

RELIST_PATCH = "mcp-servers-listed-again"
"""The patch that lets a run list again the MCP servers its first listing missed."""
RELISTS = 4
"""How many times a run lists again a server that did not answer, before giving it up."""
MAX_WHY_CHARS = 300
"""A server's reason as the model reads it in a note (the trace has it whole)."""


def due(run: AgentRun) -> bool:
    """Whether the run lists its missing MCP servers again before this step."""
    relist = run.mcp_relist
    return relist is not None and run.memory.step >= relist.due


async def list_tools(run: AgentRun, pub: Publisher) -> None:
    """The first listing of the run's MCP servers, or a listing again of those it missed."""
    if run.mcp is None:
        await _first(run, pub)
    elif run.mcp_relist is not None and due(run):
        await _again(run, pub, run.mcp, run.mcp_relist)


def _waiting(listed: McpToolList) -> dict[str, str]:
    """The servers worth asking again -> why they are missing."""
    return {
        name: why
        for name, why in listed.servers_unavailable().items()
        if not why.startswith(mcp.NOT_CONFIGURED)
    }


async def _ask(run: AgentRun, servers: tuple[str, ...], summary: str) -> McpToolList:
    """The ``list_mcp_tools`` activity's answer for ``servers`` (empty: all); a failed
    activity (its worker lost every attempt) is every server unavailable, saying why."""
    try:
        return await calls.list_mcp_tools(
            run.input.config, McpListRequest(servers=servers), summary
        )
    except ActivityError as exc:
        if is_cancelled_exception(exc):
            raise
        why = f"could not be listed: {failure_message(exc)}"
        return McpToolList(
            unavailable={name: why for name in servers or (mcp.ALL_SERVERS,)},
            listed_at=workflow.now(),
        )


async def _first(run: AgentRun, pub: Publisher) -> None:
    """List the run's MCP servers before its first model call. A server that is down is a
    trace line; the run goes on without it, and lists it again later (``RELIST_PATCH``)."""
    config = run.input.config
    servers = () if mcp.ALL_SERVERS in config.mcp_servers else config.mcp_servers
    listed = await _ask(run, servers, f"list MCP tools of {', '.join(config.mcp_servers)}")
    run.mcp = listed
    pub.record(run.state, "McpToolsListed", listed.describe())
    missing = Toolbox(config, run.mcp, run.loaded_tools).missing()
    if missing:
        pub.record(run.state, "McpToolsMissing", f"not offered by any server: {', '.join(missing)}")
    pub.emit("mcp_tools", listed.describe(), ok=not listed.unavailable)
    if listed.unavailable:
        workflow.logger.warning(
            "agent.mcp_unavailable", extra={"unavailable": dict(listed.unavailable)}
        )
    waiting = _waiting(listed)
    if not waiting or not workflow.patched(RELIST_PATCH):
        return
    relist = McpRelisting(tries=0, due=run.memory.step + 1)
    run.mcp_relist = relist
    _note(run, f"{_missing(waiting)}. Their tools are not offered yet: {_next(relist)}.")


async def _again(run: AgentRun, pub: Publisher, before: McpToolList, relist: McpRelisting) -> None:
    """List again the servers ``before`` missed; those that answer offer their tools from
    this step on."""
    waiting = _waiting(before)
    tries = relist.tries + 1
    servers = () if mcp.ALL_SERVERS in waiting else tuple(waiting)
    names = ", ".join(servers) or "every server"
    listed = await _ask(run, servers, f"list MCP tools of {names} again ({tries} of {RELISTS})")
    after = _merged(before, listed, waiting)
    run.mcp = after
    joined = [name for name in after.servers() if name not in before.servers()]
    still = _waiting(after)
    relist = McpRelisting(tries=tries, due=run.memory.step + 2**tries)
    run.mcp_relist = relist if still and tries < RELISTS else None
    pub.record(
        run.state, "McpToolsRelisted", f"{tries} of {RELISTS} for {names}: {after.describe()}"
    )
    said = []
    if joined:
        pub.emit("mcp_tools", after.describe(), ok=not after.unavailable)
        offered = ", ".join(t.name for t in after.tools if t.server in joined)
        said.append(f"MCP server(s) {', '.join(joined)} answered: offered from now on: {offered}.")
    if still:
        later = _next(relist) if run.mcp_relist is not None else "they are given up for this run"
        said.append(f"{_missing(still)}. Their tools are not offered: {later}.")
    elif not joined:  # they answered with no tools
        said.append(f"MCP server(s) {names} answered, with no tools.")
    _note(run, " ".join(said))


def _merged(before: McpToolList, listed: McpToolList, asked: dict[str, str]) -> McpToolList:
    """``before`` with the servers ``asked`` replaced by what ``listed`` says of them: their
    tools added (a name already offered stays as it was), their reasons the new ones."""
    known = set(before.names())
    unavailable = {k: v for k, v in before.unavailable.items() if k not in asked}
    return McpToolList(
        tools=(*before.tools, *(t for t in listed.tools if t.name not in known)),
        unavailable={**unavailable, **listed.unavailable},
        listed_at=min(before.listed_at, listed.listed_at),
    )


def _missing(waiting: dict[str, str]) -> str:
    return "MCP server(s) not listed: " + "; ".join(
        f"{name} ({cut(why, MAX_WHY_CHARS)})" for name, why in waiting.items()
    )


def _next(relist: McpRelisting) -> str:
    left = RELISTS - relist.tries
    return f"the run lists them again before step {relist.due + 1} ({left} more time(s) at most)"


def _note(run: AgentRun, note: str) -> None:
    """What the loop tells the model, as a note in the conversation before its next call."""
    m = run.memory
    m.history = (*m.history, Turn(step=m.step, note=note))
