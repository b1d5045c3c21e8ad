"""Running a step's tool calls: Acting and ParallelActing's work.

``ToolRunner.act`` runs every call of the step not yet observed and returns the event that
says what follows. An ``ask_client`` call opens a client query instead (the engine waits for
the answer in WaitingForClient).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from workflows import telemetry
from workflows.agent import calls, client_queries, mcp, planning, recovery, status
from workflows.agent.catalogue import (
    TOOLS,
    AskClientArgs,
    StartPhaseArgs,
    ToolArgumentsError,
    parse_arguments,
)
from workflows.agent.mcp import McpCallRequest
from workflows.agent.models import ToolCall, ToolOutcome, ToolResult
from workflows.agent.publishing import Publisher
from workflows.agent.state import AgentRun
from workflows.agent.state_machine import Event, State
from workflows.agent.status import cut
from workflows.base import describe_errors, failure_message

CLIENT_QUERIES = "client-queries"
"""``workflow.patched`` id: a final answer asking the client, and the ``ask_client`` tool, wait
for the client (before, the answer ended the run and the tool was unknown)."""

CARRY_CONTENT_HASHES = "carry-content-hashes"
"""``workflow.patched`` id: tool results' content hashes reach the progress tracker."""


class ToolRunner:
    """Runs one run's tool calls and publishes each as it starts and finishes."""

    def __init__(self, run: AgentRun, publisher: Publisher) -> None:
        self._run = run
        self._pub = publisher

    async def act(self) -> Event:
        """Run every call not yet observed: concurrently in ParallelActing, else in order.
        An ``ask_client`` call goes first: the run waits for the client (WaitingForClient),
        then comes back here for the others."""
        m = self._run.memory
        done = {o.call.id for o in m.observations}
        todo = [c for c in m.current_tool_calls if c.id not in done]
        asks = [c for c in todo if c.name == client_queries.ASK_CLIENT]
        # Runs recorded before client queries existed called no such tool (it was unknown).
        if asks and workflow.patched(CLIENT_QUERIES):
            for call in asks:
                outcome = self._ask_client(call)
                if outcome is None:
                    return Event.CLIENT_QUERY
                m.observations = (*m.observations, outcome)
            todo = [c for c in todo if c.name != client_queries.ASK_CLIENT]
        if self._run.state is State.PARALLEL_ACTING:
            outcomes = list(await asyncio.gather(*(self._run_call(c) for c in todo)))
        else:
            outcomes = [await self._run_call(c) for c in todo]
        m.observations = m.observations + tuple(outcomes)
        if all(o.success for o in m.observations):
            return Event.TOOL_SUCCESS
        return Event.TOOL_FAILURE

    def _ask_client(self, call: ToolCall) -> ToolOutcome | None:
        """Open a client query for an ``ask_client`` call (``None``: wait for it), or the call's
        outcome when it cannot be asked: bad arguments, or a run that does not offer the tool."""
        run, config = self._run, self._run.input.config
        error: str | None = None
        try:
            args = parse_arguments(call.name, call.arguments)
        except ToolArgumentsError as exc:
            error = f"ERROR: {exc}"
        else:
            if client_queries.ASK_CLIENT not in planning.offered_tools(config):
                error = "ERROR: ask_client is not offered in this run (client_queries is off)"
        if error is not None or not isinstance(args, AskClientArgs):
            error = error or "ERROR: ask_client arguments did not parse"
            return self._finished(ToolOutcome(call=call, observation=error, success=False))
        client = run.client
        client.asked += 1
        telemetry.client_query("asked")
        client.parallel = run.state is State.PARALLEL_ACTING
        client.query = client_queries.new_query(
            call,
            args.kind,
            args.what,
            number=client.asked,
            step=run.memory.step,
            now=workflow.now(),
            timeout_seconds=config.client_query_timeout_seconds,
            detected=call.id == client_queries.detected_id(run.memory.step),
        )
        client.answer = None
        return None

    async def _run_call(self, call: ToolCall) -> ToolOutcome:
        run = self._run
        if mcp.is_mcp_name(call.name):
            return await self._run_mcp_call(call)
        try:
            args = parse_arguments(call.name, call.arguments)
        except ToolArgumentsError as exc:
            return self._finished(
                ToolOutcome(call=call, observation=f"ERROR: {exc}", success=False)
            )
        if isinstance(args, StartPhaseArgs):
            return recovery.start_phase_call(run, call, args, workflow.now())
        if isinstance(args, AskClientArgs):
            # Only replaying a run recorded before client queries (``act`` asks the others):
            # the tool did not exist then, and no activity ran for it.
            return ToolOutcome(
                call=call, observation=f"ERROR: unknown tool {call.name!r}", success=False
            )
        target = status.short_target(TOOLS[call.name].target(args))
        self._pub.emit("tool_started", call.name, tool=call.name, call_id=call.id, target=target)
        outcome = await self._run_activity(call, args, target)
        return self._finished(outcome, target)

    def _finished(self, outcome: ToolOutcome, target: str | None = None) -> ToolOutcome:
        """Publish a call's ``tool_finished`` event (its observation cut to a line's worth)."""
        call = outcome.call
        self._pub.emit(
            "tool_finished",
            cut(outcome.observation, 200),
            tool=call.name,
            call_id=call.id,
            target=target,
            ok=outcome.success,
        )
        return outcome

    async def _run_activity(self, call: ToolCall, args: Any, target: str) -> ToolOutcome:
        run, config = self._run, self._run.input.config
        try:
            result = await calls.run_tool(
                config,
                planning.tool_request(run, call, args),
                f"step {run.memory.step} · {call.name} {target}",
                command=call.name == "run_command",
                tool_timeout=TOOLS[call.name].timeout_seconds,
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return ToolOutcome(
                call=call,
                observation=f"ERROR: {call.name} failed: {failure_message(exc)}",
                success=False,
            )
        # Progress tracking tells a real change from the same content written again by these
        # hashes. Runs recorded before they were carried keep replaying without.
        carried = workflow.patched(CARRY_CONTENT_HASHES)
        return planning.observed(call, result, config.max_observation_chars, hashes=carried)

    async def _run_mcp_call(self, call: ToolCall) -> ToolOutcome:
        """One call of an MCP server's tool: the ``call_mcp_tool`` activity. A tool the run
        does not offer, arguments that are not a JSON object, a server that never answered:
        each is the call's ``ERROR:`` observation. A tool its server no longer offers is
        dropped from the run's list, so the model is not offered it again."""
        run, config = self._run, self._run.input.config
        info = next((t for t in planning.offered_mcp_tools(run) if t.name == call.name), None)
        target = status.short_target(mcp.call_target(call.arguments))
        error: str | None = None
        arguments: dict[str, Any] = {}
        if info is None:
            unavailable = run.mcp.unavailable if run.mcp is not None else {}
            error = f"ERROR: tool {call.name} is not offered in this run" + (
                f" (MCP servers unavailable: {', '.join(unavailable)})" if unavailable else ""
            )
        else:
            try:
                arguments = mcp.parse_arguments(call.name, call.arguments)
            except mcp.McpArgumentsError as exc:
                error = f"ERROR: {exc}"
        if error is not None or info is None:
            error = error or f"ERROR: tool {call.name} is not offered in this run"
            return self._finished(ToolOutcome(call=call, observation=error, success=False))
        try:
            request = McpCallRequest(
                server=info.server,
                tool=info.tool,
                arguments=arguments,
                call_id=call.id,
                step=run.memory.step,
                max_output_chars=config.max_observation_chars,
            )
        except ValidationError as exc:
            # A provider's call id or a server's tool name out of bounds: the call's error,
            # not the run's (a ValidationError would fail the run).
            error = f"ERROR: {call.name} cannot be called: {describe_errors(exc)}"
            return self._finished(ToolOutcome(call=call, observation=error, success=False))
        self._pub.emit("tool_started", call.name, tool=call.name, call_id=call.id, target=target)
        try:
            result = await calls.call_mcp_tool(
                config,
                request,
                f"step {run.memory.step} · {call.name} {target}".strip(),
                info.attempt_timeout(),
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            result = ToolResult(
                success=False, output=f"ERROR: {call.name} failed: {failure_message(exc)}"
            )
        if not result.success and result.output == f"ERROR: {mcp.vanished(info.server, info.tool)}":
            if run.mcp is not None:
                run.mcp = run.mcp.without(call.name)
            self._pub.record(run.state, "McpToolVanished", f"{call.name}: {result.output}")
        outcome = planning.observed(call, result, config.max_observation_chars, hashes=True)
        return self._finished(outcome, target)
