"""Running a step's tool calls, whatever their kind: Acting, ParallelActing, WaitingForClient.

``ToolRunner`` keeps the step's calls as the toolbox checked them (``check``, once, when the
model asked; a human's ``modify`` replaces one with its own checked form), and runs each on one
path (``act``): a call that did not pass its check is its ``ERROR:`` observation; one that
runs in the workflow (``start_phase``) changes the run's state; one that runs in an activity
(built-in and your own: ``run_tool``; an MCP server's: ``call_mcp_tool``) is awaited through
``calls``. An ``ask_client`` call opens a client query instead, answered in WaitingForClient.
It also lists the run's MCP tools before the first model call (and again the servers that
did not answer, at later steps: ``mcp_listing``).

The checked forms live on the instance, not in ``AgentRun``: a step's calls are checked in the
same run that acts on them (continue-as-new happens between steps, or while only sub-agents
run, whose ``delegate`` calls the next run checks again: ``checked``), and a replay checks
them again on its way, deterministically.

A step's sub-agents may outlive the run (``child_ends``): when its history asks for a hand-over
while only they run, the run hands over without waiting (``_hand_over_while_children_run``),
and the next run waits for their ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from treadle.workflows import telemetry
from treadle.workflows.agent import calls, mcp_listing, snapshotting
from treadle.workflows.agent.messages import events, mcp
from treadle.workflows.agent.messages.catalogue import (
    AskClientArgs,
    DelegateArgs,
    StartPhaseArgs,
    WaitArgs,
)
from treadle.workflows.agent.messages.mcp import McpCallRequest
from treadle.workflows.agent.messages.models import (
    ToolCall,
    ToolOutcome,
    ToolPolicy,
    ToolRequest,
    ToolResult,
)
from treadle.workflows.agent.messages.state_machine import Event, State
from treadle.workflows.agent.parts import client_queries, handover, recovery, waiting
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import cut
from treadle.workflows.agent.parts.toolbox import CheckedCall, OfferedTool, Toolbox
from treadle.workflows.agent.subagents import delegation
from treadle.workflows.agent.subagents import ends as child_ends
from treadle.workflows.agent.subagents import reports as child_reports
from treadle.workflows.base import describe_errors, failure_message

HAND_OVER_PAUSE = timedelta(seconds=1)
"""A run that continues as new while its sub-agents run decides it after this timer (see
``_hand_over_while_children_run``)."""


class ToolRunner:
    """Checks, runs and publishes one run's tool calls."""

    def __init__(
        self,
        run: AgentRun,
        publisher: Publisher,
        hand_over: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._run = run
        self._pub = publisher
        self._checked: dict[str, CheckedCall] = {}
        self._hand_over = hand_over
        """The engine's hand-over (continue-as-new when due), for a step whose children run on."""

    def box(self) -> Toolbox:
        """The run's toolbox as it is now (its MCP list changes when a tool vanishes)."""
        run = self._run
        return Toolbox(run.input.config, run.mcp, run.loaded_tools)

    # ----------------------------------------------------------------------------------------
    # Checked once, carried onward
    # ----------------------------------------------------------------------------------------

    def check(self, tool_calls: Iterable[ToolCall]) -> tuple[CheckedCall, ...]:
        """The model's calls, checked by the toolbox."""
        box = self.box()
        return tuple(box.check(call) for call in tool_calls)

    def carry(self, checked: Iterable[CheckedCall]) -> None:
        """The step's calls as they will run (the previous step's are done)."""
        self._checked = {c.call.id: c for c in checked}

    def replace(self, checked: CheckedCall) -> None:
        """A human modified a call: its new arguments, checked, run instead."""
        self._checked[checked.call.id] = checked

    def checked(self, call: ToolCall) -> CheckedCall:
        """``call`` as it was checked (checked now only if this run never saw it checked)."""
        found = self._checked.get(call.id)
        if found is None or found.call.name != call.name or found.call.arguments != call.arguments:
            found = self.box().check(call)
            self._checked[call.id] = found
        return found

    def target_of(self, call_id: str) -> str:
        """What the step's call ``call_id`` acts on, cut to a line."""
        found = [c for c in self._run.memory.current_tool_calls if c.id == call_id]
        return self.checked(found[0]).short_target if found else ""

    # ----------------------------------------------------------------------------------------
    # The tools the run offers beyond the code's: listed once, recorded
    # ----------------------------------------------------------------------------------------

    async def list_loaded_tools(self) -> None:
        """Once per run (the list is carried across continue-as-new): which tools the worker
        loaded from your own modules. Recorded, so a replay offers what the run offered. A run
        started lean (``AgentRun.lean_start``) lists them with its first model call instead
        (``planning.model_request``, ``loaded``): no local activity, no marker."""
        run = self._run
        if run.loaded_tools is not None or run.lean_start:
            return
        try:
            names = (await calls.list_loaded_tools(run.input.config)).names
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            # A worker built without the activity (its own activity list): it loaded none.
            names = ()
            self._pub.record(run.state, "LoadedToolsUnavailable", failure_message(exc))
        self.loaded(names)

    def loaded(self, names: tuple[str, ...]) -> None:
        """The loaded tools the run offers from now on, recorded."""
        run = self._run
        run.loaded_tools = names
        if names:
            self._pub.record(run.state, "LoadedToolsListed", ", ".join(names))

    async def list_mcp_tools(self) -> None:
        """List the tools of the run's MCP servers before its first model call, or again
        those of the servers it missed, when due (``mcp_listing``)."""
        await mcp_listing.list_tools(self._run, self._pub)

    # ----------------------------------------------------------------------------------------
    # Acting
    # ----------------------------------------------------------------------------------------

    async def act(self) -> Event:
        """Run every call not yet observed: concurrently in ParallelActing, else in order.
        An ``ask_client`` call goes first: the run waits for the client (WaitingForClient),
        then comes back here for the others."""
        m = self._run.memory
        self._finish_wait()
        done = {o.call.id for o in m.observations}
        todo = [c for c in m.current_tool_calls if c.id not in done]
        for call in [c for c in todo if c.name == client_queries.ASK_CLIENT]:
            outcome = self._ask_client(self.checked(call))
            if outcome is None:
                return Event.CLIENT_QUERY
            m.observations = (*m.observations, outcome)
        for call in [c for c in todo if c.name == waiting.WAIT]:
            outcome = self._open_wait(self.checked(call))
            if outcome is None:
                return Event.WAIT
            m.observations = (*m.observations, outcome)
        opened_here = {client_queries.ASK_CLIENT, waiting.WAIT}
        todo = [c for c in todo if c.name not in opened_here]
        checked = [self.checked(c) for c in todo]
        if self._run.state is State.PARALLEL_ACTING:
            carried = any(child_ends.carried(self._run, c.id) for c in todo)
            outcomes = await self._together(checked)
            outcomes = await snapshotting.merge_parallel(
                self._run, self._pub, outcomes, calls.snapshot_workspace
            )
            if carried:  # the step's calls, some observed by an earlier run: in their order
                order = {c.id: n for n, c in enumerate(m.current_tool_calls)}
                every = sorted((*m.observations, *outcomes), key=lambda o: order.get(o.call.id, 0))
                m.observations, outcomes = tuple(every), []
        else:
            outcomes = []
            for c in checked:
                if self._may_outlive([c]):
                    # The run may hand over while this child runs: what it observed goes first.
                    m.observations, outcomes = (*m.observations, *outcomes), []
                    (outcome,) = await self._together([c], outlive=True)
                else:
                    outcome = await self._run_call(c)
                if c.tool is not None and c.tool.runs == "workflow" and outcome.result.snapshot:
                    # A sub-agent's workspace, merged into the run's (naming what it changed).
                    (outcome,) = await snapshotting.merge_parallel(
                        self._run, self._pub, [outcome], calls.snapshot_workspace
                    )
                else:
                    snapshotting.keep(self._run, outcome)
                outcomes.append(outcome)
        m.observations = m.observations + tuple(outcomes)
        if all(o.success for o in m.observations):
            return Event.TOOL_SUCCESS
        return Event.TOOL_FAILURE

    def _may_outlive(self, checked: list[CheckedCall]) -> bool:
        """The calls start (or wait for) children, which may outlive the run: the run may
        hand over while they run."""
        return self._run.input.config.subagents is not None and any(
            c.call.name == delegation.DELEGATE for c in checked
        )

    async def _together(
        self, checked: list[CheckedCall], *, outlive: bool | None = None
    ) -> list[ToolOutcome]:
        """Run ``checked`` concurrently. When the run itself is cancelled, every call is
        cancelled and waited for: the run ends after its children did, each with its answer.
        Children that may outlive the run (``outlive``) may be left to the next run."""
        tasks = [asyncio.ensure_future(self._run_call(c)) for c in checked]
        if outlive is None:
            outlive = self._may_outlive(checked)
        try:
            if outlive:
                await self._hand_over_while_children_run(checked, tasks)
            return list(await asyncio.gather(*tasks))
        except BaseException:
            if delegation.run_cancelled():
                if outlive:  # the run's task was waiting, not the calls': cancel them
                    self._run.family.hand_over(False)  # a cancelled run hands nothing over
                    for task in tasks:
                        task.cancel()
                await workflow.wait(tasks)
            raise

    async def _hand_over_while_children_run(
        self, checked: list[CheckedCall], tasks: Sequence[asyncio.Future[ToolOutcome]]
    ) -> None:
        """Wait for the step's calls; when only children that outlive the run are left and
        the run's history asks for a hand-over, hand over without them: the calls that ended
        are observed (and merged) now, and the next run waits for the children's ends
        (``child_ends.carried``), the children running on, not started again."""
        run, hand_over = self._run, self._hand_over
        if hand_over is None:
            return
        bound = run.input.config.continue_as_new_after_events

        def done_or_due() -> bool:
            if all(t.done() for t in tasks):
                return True
            left = [c for c, t in zip(checked, tasks, strict=True) if not t.done()]
            return all(child_ends.carried(run, c.call.id) for c in left) and handover.is_due(bound)

        def done_or_handing_over() -> bool:
            if all(t.done() for t in tasks):
                return True
            # Decided in the predicate, before any task resumes: a call that resumes after it
            # leaves its child's end to the next run (``child_ends.awaited``), never lost
            # between the two.
            run.family.hand_over()
            return True

        await workflow.wait_condition(done_or_due)
        if all(t.done() for t in tasks):
            return
        # Due: decided again after a timer. A hand-over decided while the SDK applies an
        # activation's signals (a child's report makes it due) would close the run before the
        # same activation's cancellation is applied, and that cancellation would be lost with
        # the run; a timer's activation applies the cancellation before the run decides.
        await workflow.sleep(HAND_OVER_PAUSE, summary="hand over while sub-agents run")
        await workflow.wait_condition(done_or_handing_over)
        if not run.family.handing_over:
            return
        ended = [t.result() for t in tasks if t.done()]
        merged = await snapshotting.merge_parallel(run, self._pub, ended, calls.snapshot_workspace)
        run.memory.observations = (*run.memory.observations, *merged)
        await hand_over()
        # Cannot happen: the hand-over was due above, and the history only grows.
        raise ApplicationError("a hand-over while children run was not made", non_retryable=True)

    async def _run_call(self, checked: CheckedCall) -> ToolOutcome:
        """The one path every call takes."""
        call, tool = checked.call, checked.tool
        if checked.error is not None or tool is None:
            return self._finished(self._failed(call, checked.error))
        if tool.runs == "workflow":
            if isinstance(checked.args, StartPhaseArgs):
                return recovery.start_phase_call(self._run, call, checked.args, workflow.now())
            if isinstance(checked.args, DelegateArgs):  # a sub-agent: a child workflow
                offered = (*self.box().offered_names(), *(t.name for t in self.box().offered_mcp()))
                outcome = await delegation.delegate(
                    self._run, self._pub, call, checked.args, offered
                )
                return self._finished(outcome, checked.short_target)
            # Cannot happen: ``act`` opens ``ask_client`` and ``wait`` itself.
            return self._failed(call, f"ERROR: unknown tool {call.name!r}")
        if tool.runs == "mcp":
            return await self._run_mcp(checked)
        target = checked.short_target
        self._pub.emit("tool_started", call.name, tool=call.name, call_id=call.id, target=target)
        return self._finished(await self._run_activity(checked, tool, target), target)

    def _failed(self, call: ToolCall, error: str | None) -> ToolOutcome:
        return ToolOutcome.of(call, error or "ERROR: not run", success=False)

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

    async def _run_activity(
        self, checked: CheckedCall, tool: OfferedTool, target: str
    ) -> ToolOutcome:
        """A built-in tool or your own: the ``run_tool`` activity, on the run's tool queue."""
        run, config, call = self._run, self._run.input.config, checked.call
        try:
            result = await calls.run_tool(
                config,
                tool_request(run, checked),
                f"step {run.memory.step} · {call.name} {target}",
                command=call.name == "run_command",
                tool_timeout=tool.spec.timeout_seconds if tool.spec else None,
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return self._failed(call, f"ERROR: {call.name} failed: {failure_message(exc)}")
        return observed(call, result, config.max_observation_chars)

    async def _run_mcp(self, checked: CheckedCall) -> ToolOutcome:
        """An MCP server's tool: the ``call_mcp_tool`` activity. A tool its server no longer
        offers is dropped from the run's list, so the model is not offered it again (and a
        later call of it in the same step is not offered)."""
        run, config, call = self._run, self._run.input.config, checked.call
        info = next((t.mcp for t in self.box().offered_mcp() if t.name == call.name), None)
        if info is None or checked.arguments is None:
            return self._finished(self._failed(call, self.box().check(call).error))
        target = checked.short_target
        try:
            request = McpCallRequest(
                server=info.server,
                tool=info.tool,
                arguments=checked.arguments,
                call_id=call.id,
                step=run.memory.step,
                max_output_chars=config.max_observation_chars,
            )
        except ValidationError as exc:
            # A provider's call id or a server's tool name out of bounds: the call's error,
            # not the run's (a ValidationError would fail the run).
            error = f"ERROR: {call.name} cannot be called: {describe_errors(exc)}"
            return self._finished(self._failed(call, error))
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
        outcome = observed(call, result, config.max_observation_chars)
        return self._finished(outcome, target)

    # ----------------------------------------------------------------------------------------
    # ask_client: a tool the client answers (Loom's server query)
    # ----------------------------------------------------------------------------------------

    def _ask_client(self, checked: CheckedCall) -> ToolOutcome | None:
        """Open a client query for an ``ask_client`` call (``None``: wait for it), or the call's
        outcome when it cannot be asked: bad arguments, or a run that does not offer the tool."""
        run, config, call = self._run, self._run.input.config, checked.call
        error = checked.error
        if error is None and client_queries.ASK_CLIENT not in self.box().offered_names():
            error = "ERROR: ask_client is not offered in this run (client_queries is off)"
        args = checked.args
        if error is not None or not isinstance(args, AskClientArgs):
            error = error or "ERROR: ask_client arguments did not parse"
            return self._finished(self._failed(call, error))
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

    async def wait_for_client(self) -> Event:
        """WaitingForClient: durably, until the client answers or the timeout passes; either
        way the ``ask_client`` call gets its observation and Acting goes on."""
        run, m, config = self._run, self._run.memory, self._run.input.config
        query = run.client.query
        if query is None:  # cannot happen: Acting opened it
            raise ApplicationError("WaitingForClient without a query", non_retryable=True)
        self._pub.record(
            State.WAITING_FOR_CLIENT,
            "AwaitingClient",
            f"{query.id} {query.kind}: {cut(query.what, 200)}",
        )
        self._pub.emit(
            "client_query",
            f"{query.kind}: {cut(query.what, 200)}",
            query=query,
            call_id=query.call_id,
            commands=events.answer_commands(workflow.info().workflow_id, query),
        )
        self._pub.show()
        child_reports.report_soon(run, self._pub, urgent=True)  # a sub-agent: its parent asks
        timeout = config.client_query_timeout_seconds
        waited = (workflow.now() - query.asked_at).total_seconds()
        # A timeout is not an error here: the model is told, and the run goes on.
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: run.client.answer is not None,
                timeout=max(timeout - waited, 0.001),
                timeout_summary=f"client query {query.id}",
            )
        answer = run.client.answer
        telemetry.client_query("answered" if answer is not None else "timed_out")
        asked = [c for c in m.current_tool_calls if c.id == query.call_id]
        if not asked:  # cannot happen: the query was opened for one of these calls
            raise ApplicationError(f"no call {query.call_id} for {query.id}", non_retryable=True)
        if answer is None:
            self._pub.record(State.WAITING_FOR_CLIENT, "ClientQueryTimedOut", f"{query.id}")
        observation = client_queries.observation(query, answer, timeout)
        ok = answer is not None and answer.declined is None
        m.observations = (
            *m.observations,
            ToolOutcome.of(
                asked[0],
                cut(observation, config.max_observation_chars),
                success=ok,
            ),
        )
        parallel = run.client.parallel
        run.client.query = None
        run.client.answer = None
        run.client.parallel = False
        self._pub.emit(
            "client_answered",
            observation if not ok else f"{query.kind}: {len(observation)} characters",
            query=query,
            call_id=query.call_id,
            ok=ok,
        )
        child_reports.report_soon(run, self._pub, urgent=True)
        return Event.CLIENT_QUERY_DONE_PARALLEL if parallel else Event.CLIENT_QUERY_DONE

    # ----------------------------------------------------------------------------------------
    # wait: a durable timer (Waiting), ended on time or early
    # ----------------------------------------------------------------------------------------

    def _open_wait(self, checked: CheckedCall) -> ToolOutcome | None:
        """Open the wait a ``wait`` call asks for (``None``: go to Waiting), or the call's
        outcome: bad arguments, a run that does not offer the tool, a time already passed."""
        run, config, call = self._run, self._run.input.config, checked.call
        error = checked.error
        if error is None and waiting.WAIT not in self.box().offered_names():
            error = "ERROR: wait is not offered in this run (its max_wait_seconds is 0)"
        args = checked.args
        if error is not None or not isinstance(args, WaitArgs):
            return self._finished(
                self._failed(call, error or "ERROR: wait arguments did not parse")
            )
        opened = waiting.open_wait(
            call,
            args,
            workflow.now(),
            config.max_wait_seconds,
            parallel=run.state is State.PARALLEL_ACTING,
        )
        if isinstance(opened, str):
            return self._finished(ToolOutcome.of(call, opened, success=True))
        run.waiting = opened
        return None

    async def wait(self) -> Event:
        """Waiting: parked on a durable timer (no activity, no worker busy) until it wakes on
        time, or early when a user message, guidance or a ``wake`` signal arrives."""
        run = self._run
        w = run.waiting
        if not w.active:  # cannot happen: Acting opened it
            raise ApplicationError("Waiting without a wait", non_retryable=True)
        self._pub.record(State.WAITING, "WaitStarted", waiting.describe(w))
        self._pub.emit("tool_started", waiting.describe(w), tool=waiting.WAIT, call_id=w.call_id)
        self._pub.show()
        remaining = waiting.remaining_seconds(w, workflow.now())
        if remaining > 0 and w.woken_by is None:
            # Waking on time is not an error: the timeout is the timer.
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: run.waiting.woken_by is not None,
                    timeout=remaining,
                    timeout_summary=f"wait {w.call_id}",
                )
        w.result = waiting.observation(w, workflow.now(), run.input.config.max_wait_seconds)
        self._pub.record(State.WAITING, "WaitEnded", w.result)
        return Event.WOKE_PARALLEL if w.parallel else Event.WOKE

    def _finish_wait(self) -> None:
        """Back from Waiting: the ``wait`` call's observation joins the step's."""
        run, m = self._run, self._run.memory
        w = run.waiting
        if w.result is None:
            return
        asked = [c for c in m.current_tool_calls if c.id == w.call_id]
        if asked:
            outcome = ToolOutcome.of(asked[0], w.result, success=True)
            m.observations = (*m.observations, self._finished(outcome))
        run.waiting = waiting.WaitState()


def tool_request(run: AgentRun, checked: CheckedCall) -> ToolRequest:
    """What a tool activity needs: the call with its checked arguments, the workspace, and the
    part of the config that limits tools."""
    config = run.input.config
    return ToolRequest(
        call=checked.call.model_copy(update={"arguments": checked.request_arguments()}),
        workspace=run.input.workspace,
        policy=ToolPolicy(
            allow_run_command=config.allow_run_command,
            command_allowlist=config.command_allowlist,
            command_timeout_seconds=config.command_timeout_seconds,
            max_output_chars=config.max_observation_chars,
            memory_namespace=config.memory.namespace if config.memory else None,
            memory_ttl_seconds=(
                config.memory.ttl_days * 86400 if config.memory and config.memory.ttl_days else None
            ),
        ),
        sync=snapshotting.sync(run),
    )


def observed(call: ToolCall, result: ToolResult, max_chars: int) -> ToolOutcome:
    """What a tool activity's result becomes in the run: the same result, its output cut to
    ``max_chars`` (its content hashes tell progress tracking a real change from the same
    content written again)."""
    update = {"output": cut(result.output, max_chars)}
    return ToolOutcome(call=call, result=result.model_copy(update=update))
