"""The agent loop as deterministic workflow code: ``AgentEngine``, which ``AgentWorkflow`` is.

Plan (model activity) -> act (tool activities, one or several at once) -> observe -> post-tools
hook -> plan ... until the model answers. Every move goes through the transition table in
``state_machine``; memory writes are checked against ``memory.OWNERSHIP``.

The class is the loop and its doors (signals, update, queries). Everything the run knows is one
``AgentRun`` (``state``); what a decision may do is in ``approvals``, what the run shows in
``status``, activity options in ``options``.

Why it lives apart from ``workflow.py``: the sandbox re-imports a workflow's own module for
every run it caches, so this module's thousand lines would be compiled objects held once per
parked run. It is passed through the sandbox instead (``worker.PASSTHROUGH_MODULES``), shared
by every run, and holds no state of its own: all of a run's state is on its instance.

Determinism: no I/O, clock, randomness or environment here except through ``workflow.*``. The
conversation lives in workflow state; activities receive only what one call needs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue, SearchAttributeUpdate
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from workflows import telemetry
from workflows.agent import (
    approvals,
    client_queries,
    events,
    handover,
    hooks,
    mcp,
    options,
    planning,
    recovery,
    reflection,
    status,
    threads,
)
from workflows.agent import search_attributes as sa
from workflows.agent.approvals import Refused
from workflows.agent.catalogue import (
    TOOLS,
    AskClientArgs,
    StartPhaseArgs,
    ToolArgumentsError,
    parse_arguments,
)
from workflows.agent.client_queries import AnswerRefused
from workflows.agent.events import AgentEvent, ClientAnswer, ClientQuery, EventKind
from workflows.agent.hooks import HookRequest, HookResult
from workflows.agent.mcp import McpCallRequest, McpListRequest, McpToolList
from workflows.agent.models import (
    AgentInput,
    AgentResult,
    AgentStatus,
    Decision,
    GuideSignal,
    ModelResponse,
    PendingApproval,
    RunStatus,
    SendReceipt,
    ThreadExport,
    ToolCall,
    ToolOutcome,
    ToolResult,
    Trace,
    Turn,
    UserMessage,
)
from workflows.agent.progress import ProgressSummary
from workflows.agent.state import AgentRun
from workflows.agent.state_machine import Event, State, next_state
from workflows.agent.status import cut
from workflows.base import describe_errors, failure_message

with workflow.unsafe.imports_passed_through():
    # Activity classes are referenced by method (names by object, not string). Their modules
    # load the HTTP client library, which must not be re-imported in the sandbox every run.
    from activities.hooks import HookActivities
    from activities.mcp import McpActivities
    from activities.model.activity import ModelActivities
    from activities.tools.builtin import ToolActivities

SIGNALS = ("approve", "reject", "modify", "guide")
"""The signals a run understands; any other name is refused in the trace."""

CLIENT_QUERIES = "client-queries"
"""``workflow.patched`` id: a final answer asking the client, and the ``ask_client`` tool, wait
for the client (before, the answer ended the run and the tool was unknown)."""

CARRY_CONTENT_HASHES = "carry-content-hashes"
"""``workflow.patched`` id: tool results' content hashes reach the progress tracker."""

COALESCED_SEARCH_ATTRIBUTES = "coalesced-search-attributes"
"""``workflow.patched`` id: search-attribute changes are sent once before the run waits, not
at every transition (a step costs 2 upsert events instead of 4)."""

WAITING_STATES = frozenset(
    {
        State.PLANNING,
        State.ACTING,
        State.PARALLEL_ACTING,
        State.WAITING_FOR_HUMAN,
        State.WAITING_FOR_CLIENT,
        State.WAITING_FOR_USER_INPUT,
        State.REFLECTING,
    }
)
"""States whose handler may wait (an activity, a signal, a timer): what the Web UI's list shows
while the run is in one of them must be current, so pending search attributes go out first.
PostToolsHook waits only when the run has hooks; the others (Observing, Recovering,
PhaseTransition) pass within one workflow task."""


class AgentEngine:
    """One durable agent run: plan, act, observe until the model answers. ``AgentWorkflow``
    adds the workflow definition (``@workflow.defn``, ``@workflow.run``, ``@workflow.init``)."""

    def __init__(self, input: AgentInput) -> None:
        # ``resume`` is the whole run handed over by continue-as-new; a new run starts fresh.
        if input.resume is None:
            self._run = AgentRun.begin(input, workflow.now())
        else:
            self._run = AgentRun.model_validate(input.resume)
        # The live stream (its own signal, update and queries); its tail and offsets come
        # along on continue-as-new. Publishing from the workflow adds no history event.
        self._stream = WorkflowStream(prior_state=input.stream)
        self._events = self._stream.topic(events.EVENTS_TOPIC, type=AgentEvent)
        # Search-attribute changes waiting to be sent together (see ``_upsert``).
        self._pending_attributes: dict[str, SearchAttributeUpdate[Any]] = {}
        self._coalesce_attributes = False

    # ----------------------------------------------------------------------------------------
    # The engine
    # ----------------------------------------------------------------------------------------

    async def drive(self, input: AgentInput) -> AgentResult:
        """The run: the states' handlers until a terminal state."""
        handlers: dict[State, Callable[[], Awaitable[Event]]] = {
            State.WAITING_FOR_USER_INPUT: self._wait_for_user,
            State.PLANNING: self._plan,
            State.ACTING: self._act,
            State.PARALLEL_ACTING: self._act,
            State.WAITING_FOR_HUMAN: self._wait_for_human,
            State.WAITING_FOR_CLIENT: self._wait_for_client,
            State.OBSERVING: self._observe,
            State.POST_TOOLS_HOOK: self._post_tools_hook,
            State.REFLECTING: self._reflect,
            State.RECOVERING: self._recover,
            State.PHASE_TRANSITION: self._phase_transition,
        }
        run = self._run
        # Runs recorded before coalescing upserted at every transition, and replay so.
        self._coalesce_attributes = run.input.config.search_attributes and workflow.patched(
            COALESCED_SEARCH_ATTRIBUTES
        )
        if input.resume is None:
            self._start()
        else:
            self._record(run.state, "Resumed", f"run {run.runs} of this workflow id")
            self._emit("state", f"resumed: run {run.runs} of this workflow id")
            self._show()
        try:
            while not run.state.is_terminal:
                handler = handlers.get(run.state)
                if handler is None:
                    # A state the table allows but this engine does not drive yet: a bug.
                    raise ApplicationError(
                        f"no handler for state {run.state.value}",
                        type="InvalidTransition",
                        non_retryable=True,
                    )
                run.memory.enter(run.state)
                if run.state in WAITING_STATES or (
                    run.state is State.POST_TOOLS_HOOK and run.input.config.hooks
                ):
                    self._send_attributes()
                self._fire(await handler())
        except (workflow.ContinueAsNewError, GeneratorExit):
            # The hand-over to the next run of the chain, or the worker dropping this run from
            # its cache (the coroutine is closed, outside any workflow task): not a failure, and
            # nothing may be recorded.
            raise
        except BaseException as exc:
            # Cancellation can surface as asyncio.CancelledError or as an ActivityError whose
            # cause is a CancelledError; either way the run ends in Cancelled and Temporal
            # records it as cancelled because we re-raise.
            if is_cancelled_exception(exc):
                if not run.state.is_terminal:
                    self._fire(Event.CANCEL, "the run was cancelled")
            else:
                # A bug (InvalidTransition, OwnershipViolation): the run fails, and its search
                # attribute must not keep claiming it is alive in its last state.
                self._record(run.state, "RunFailed", str(exc))
                self._emit("error", f"run failed: {exc}")
                self._upsert([sa.AGENT_STATE.value_set(State.ERROR.value)])
            self._send_attributes()
            raise
        self._send_attributes()
        outcome = {State.DONE: RunStatus.DONE, State.HALTED: RunStatus.HALTED}
        m = run.memory
        return AgentResult(
            status=outcome.get(run.state, RunStatus.ERROR),
            answer=m.final_answer,
            error=m.error,
            steps=m.step,
            usage=m.usage,
            cost_usd=status.run_cost(run),
        )

    def _start(self) -> None:
        run, config = self._run, self._run.input.config
        self._upsert([sa.AGENT_MODEL.value_set(run.model)])
        self._emit("started", cut(run.input.task, 2_000))
        self._fire(Event.START, f"task: {cut(run.input.task, 200)}")
        if config.phases:
            total = len(config.phases)
            run.tracker.start_phase(1, config.phases[0], workflow.now(), total=total)
            self._record(State.PLANNING, "PhaseStarted", f"phase 1 of {total}: {config.phases[0]}")
            self._emit("phase", f"phase 1 of {total}: {config.phases[0]}")

    def _fire(self, event: Event, data: str = "") -> None:
        """Apply one transition, record it, and publish it to the Web UI and visibility."""
        run = self._run
        before = run.state
        after = next_state(before, event)
        run.state = after
        if after in (State.ERROR, State.HALTED) and run.memory.error and not data:
            data = run.memory.error
        move = f"{before.value} -> {after.value}"
        self._record(before, event.value, f"{move} · {data}" if data else move)
        workflow.logger.info(
            "agent.transition",
            extra={"from": before.value, "event": event.value, "to": after.value},
        )
        self._upsert(
            [sa.AGENT_STATE.value_set(after.value), sa.AGENT_STEP.value_set(run.memory.step)]
        )
        self._emit("state", f"{move} · {data}" if data else move)
        if after.is_terminal:
            m = run.memory
            if after is not State.DONE and m.error:
                self._emit("error", m.error)
            self._emit("ended", m.error or m.final_answer or after.value)
        self._show()

    def _emit(self, kind: EventKind, text: str = "", **fields: Any) -> None:
        """Publish one event on the run's live stream (see ``events``)."""
        run = self._run
        # Bounded, so the stream (kept in memory, its tail carried across continue-as-new)
        # stays small whatever the model writes: the whole text is in status and the trace.
        self._events.publish(
            events.bounded(
                AgentEvent(
                    kind=kind,
                    step=run.memory.step,
                    state=run.state.value,
                    at=workflow.now(),
                    text=text,
                    run=run.runs,
                    **fields,
                )
            )
        )
        # Keep the newest items only (the activity's token batches count too); offsets go on.
        end = self._stream_end()
        if end > events.EVENTS_KEPT:
            self._stream.truncate(end - events.EVENTS_KEPT)

    def _stream_end(self) -> int:
        """The stream's next offset, from its own offset query (what a watcher would see)."""
        handler = workflow.get_query_handler(events.OFFSET_QUERY)
        if handler is None:
            raise ApplicationError(
                f"the workflow stream registered no {events.OFFSET_QUERY} query",
                non_retryable=True,
            )
        return int(handler())

    async def _hand_over_if_due(self) -> None:
        """At a safe point, continue as new when it is due (see ``handover``)."""
        why = handover.due(self._run)
        if why is None:
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._record(self._run.state, "ContinuedAsNew", why)
        self._emit("continued", why)
        self._send_attributes()
        await handover.continue_as_new(self._run, self._stream)

    def _upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        """Keep AgentState / AgentStep / AgentModel current: the changes wait in
        ``_pending_attributes`` (the newest value of each wins) until the run is about to wait
        or end: the transitions between two waits cost one upsert event, not one each."""
        if not self._run.input.config.search_attributes:
            return
        if not self._coalesce_attributes:
            workflow.upsert_search_attributes(updates)
            return
        for update in updates:
            self._pending_attributes[update.key.name] = update

    def _send_attributes(self) -> None:
        if self._pending_attributes:
            workflow.upsert_search_attributes(list(self._pending_attributes.values()))
            self._pending_attributes.clear()

    def _record(self, state: State, event: str, data: str) -> None:
        self._run.record(state, event, data, workflow.now())

    def _show(self) -> None:
        workflow.set_current_details(status.details(self._run, workflow.now()))

    # ----------------------------------------------------------------------------------------
    # State handlers: each does its one job and returns the event that decides what's next.
    # ----------------------------------------------------------------------------------------

    async def _plan(self) -> Event:
        run, m, config = self._run, self._run.memory, self._run.input.config
        await self._hand_over_if_due()
        if m.step - m.turn_start_step >= config.max_steps:
            m.error = (
                f"max steps reached: the model gave no final answer within {config.max_steps} steps"
            )
            return Event.MAX_STEPS
        if config.mcp_servers and run.mcp is None:
            await self._list_mcp_tools()
        m.step += 1
        telemetry.step_started(m.step)
        request = planning.model_request(run)
        if isinstance(request, planning.CannotCall):
            m.error = request.reason
            return request.event
        request = request.model_copy(update={"stream": config.stream_tokens, "step": m.step})
        try:
            response: ModelResponse = await workflow.execute_activity_method(
                ModelActivities.call_model,
                request,
                **options.model_call(
                    config, f"step {m.step} · model {run.model.partition(':')[2]}"
                ),
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            m.error = f"model call failed: {failure_message(exc)}"
            return Event.FATAL_ERROR
        run.spend(run.model, response.usage)
        telemetry.model_spent(run.model, response.usage, config.prices)
        if response.conversation is not None:
            # The store now holds everything this call sent: the next call sends only the rest.
            m.conversation_head = response.conversation
            m.conversation_sent = request.conversation_messages + len(request.messages)
            m.conversation_turns = len(m.history)
        self._record(State.PLANNING, "ModelResponse", planning.describe_response(response))
        self._emit(
            "model",
            response.content or "",
            tool_calls=tuple(
                f"{c.name} {planning.call_target(c.name, c.arguments)}".strip()
                for c in response.tool_calls
            ),
            prompt_tokens=m.usage.prompt_tokens,
            completion_tokens=m.usage.completion_tokens,
            total_tokens=m.usage.total_tokens,
        )
        if planning.confidence_is_low(run, response, workflow.now()):
            return Event.LOW_CONFIDENCE
        if response.tool_calls:
            return self._plan_tools(response)
        answer = (response.content or "").strip()
        asked = self._detect_client_query(answer)
        if asked is not None:
            # Loom's QueryDetectionStrategy: the reply asks for something only the client has.
            # It becomes an ask_client call, so the answer is its result in the conversation;
            # approvals and the step's checks apply to it as to the model's own calls.
            call = client_queries.detected_call(*asked, step=m.step)
            self._record(State.PLANNING, "ClientQueryDetected", f"{asked[0]}: {cut(asked[1], 200)}")
            return self._plan_tools(response.model_copy(update={"tool_calls": (call,)}))
        too_short = planning.answer_feedback(answer, config.min_answer_length)
        if too_short is not None:
            self._feedback(Turn(step=m.step, assistant_text=answer, note=too_short))
            return Event.ANSWER_TOO_SHORT
        m.final_answer = answer
        # The answer is part of the conversation: a thread's next turn sees it in context.
        m.history = (*m.history, Turn(step=m.step, assistant_text=answer))
        self._emit("answer", answer)
        return Event.TURN_ANSWERED if run.input.thread else Event.LLM_FINAL_ANSWER

    async def _list_mcp_tools(self) -> None:
        """List the tools of the run's MCP servers, once (the list is carried across
        continue-as-new). A server that is down is a trace line; the run goes on without it."""
        run, config = self._run, self._run.input.config
        servers = () if mcp.ALL_SERVERS in config.mcp_servers else config.mcp_servers
        try:
            listed: McpToolList = await workflow.execute_activity_method(
                McpActivities.list_mcp_tools,
                McpListRequest(servers=servers),
                **options.mcp_listing(config, f"list MCP tools of {', '.join(config.mcp_servers)}"),
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            why = f"could not be listed: {failure_message(exc)}"
            listed = McpToolList(
                unavailable={name: why for name in servers or (mcp.ALL_SERVERS,)},
                listed_at=workflow.now(),
            )
        run.mcp = listed
        self._record(run.state, "McpToolsListed", listed.describe())
        missing = sorted(
            name
            for name in config.tools or ()
            if mcp.is_mcp_name(name) and listed.find(name) is None
        )
        if missing:
            self._record(
                run.state, "McpToolsMissing", f"not offered by any server: {', '.join(missing)}"
            )
        self._emit("mcp_tools", listed.describe(), ok=not listed.unavailable)
        if listed.unavailable:
            workflow.logger.warning(
                "agent.mcp_unavailable", extra={"unavailable": dict(listed.unavailable)}
            )

    def _detect_client_query(self, answer: str) -> tuple[client_queries.Kind, str] | None:
        """A final answer that asks the client for something, where the run offers ask_client.
        Histories recorded before client queries existed replay their answers unchanged."""
        config = self._run.input.config
        if client_queries.ASK_CLIENT not in planning.offered_tools(config):
            return None
        asked = client_queries.detect(answer)
        if asked is None or not workflow.patched(CLIENT_QUERIES):
            return None
        return asked

    def _plan_tools(self, response: ModelResponse) -> Event:
        m, config = self._run.memory, self._run.input.config
        calls = planning.unique_ids(response.tool_calls, m.history, m.step)
        too_many = planning.too_many_calls_feedback(
            response, calls, config.max_tool_calls_per_step, m.step
        )
        if too_many is not None:
            self._feedback(too_many)
            return Event.TOO_MANY_TOOL_CALLS
        blacklisted = planning.blacklist_feedback(response, calls, config.blacklisted_tools, m.step)
        if blacklisted is not None:
            self._feedback(blacklisted)
            return Event.TOOL_BLACKLISTED
        m.assistant_text = response.content
        m.current_tool_calls = calls
        waiting = approvals.approvals_needed(
            calls,
            planning.approval_required(config, planning.offered_mcp_tools(self._run)),
            m.step,
            workflow.now(),
        )
        if waiting:
            m.pending_approvals = waiting
            return Event.HUMAN_APPROVAL_REQUIRED
        if len(calls) > 1 and config.parallel_tools:
            return Event.LLM_PARALLEL_TOOL_CALLS
        return Event.LLM_TOOL_CALL

    def _feedback(self, turn: Turn) -> None:
        """Planning's own note to the model (too short, blacklisted), kept in the history."""
        m = self._run.memory
        m.history = (*m.history, turn)
        self._record(State.PLANNING, "Feedback", turn.note or turn.outcomes[0].observation[:200])

    async def _reflect(self) -> Event:
        """Reflecting (agentsm): compress older history into a summary; after a low-confidence
        reply, also ask the model to reconsider it."""
        run, m, config = self._run, self._run.memory, self._run.input.config
        if run.reflect_reason == "low confidence":
            note = reflection.reconsider_note(
                m.confidence_score, config.confidence_threshold, m.retry_count, config.max_retries
            )
            m.history = (*m.history, Turn(step=m.step, assistant_text=m.assistant_text, note=note))
            m.assistant_text = None
        await self._compress()
        run.reflect_reason = ""
        return Event.REFLECT_DONE

    async def _compress(self) -> None:
        run, m, config = self._run, self._run.memory, self._run.input.config
        keep = config.reflection_keep_recent
        older, recent = m.history[:-keep], m.history[-keep:]
        if not older:
            self._record(State.REFLECTING, "HistoryKept", f"no turns older than the last {keep}")
            return
        unresolved = reflection.unresolved_errors(older, recent)
        model = config.reflection_model or run.model
        try:
            response: ModelResponse = await workflow.execute_activity_method(
                ModelActivities.call_model,
                reflection.summary_request(model, m.task, older),
                **options.summary_call(
                    config, f"step {m.step} · reflect {model.partition(':')[2]}"
                ),
            )
            summary = (response.content or "").strip()
            run.spend(model, response.usage)
            telemetry.model_spent(model, response.usage, config.prices)
            if not summary or response.tool_calls:
                raise reflection.NoSummary("the summary reply was empty or called tools")
            how = "summarised by the model"
        except (ActivityError, reflection.NoSummary) as exc:
            if is_cancelled_exception(exc):
                raise
            summary = reflection.compact(older)
            how = "compacted without a model"
            detail = failure_message(exc) if isinstance(exc, ActivityError) else str(exc)
            self._record(State.REFLECTING, "ReflectionFallback", f"summary call failed: {detail}")
        m.history = (reflection.summary_turn(older, summary, unresolved), *recent)
        # The conversation changed from its start: the next call sends it whole again.
        m.conversation_head = None
        m.conversation_sent = 0
        m.conversation_turns = 0
        self._record(
            State.REFLECTING,
            "HistoryCompressed",
            f"{len(older)} turns {how}; {len(recent)} kept verbatim; "
            f"{len(unresolved)} unresolved error(s) carried",
        )

    async def _wait_for_user(self) -> Event:
        return await threads.wait_for_user(self._run, self._hand_over_if_due)

    async def _wait_for_human(self) -> Event:
        run, m = self._run, self._run.memory
        if m.pending_guidance is not None:
            return await self._wait_for_guidance()
        waiting = ", ".join(f"{p.call_id} ({p.tool})" for p in m.pending_approvals)
        self._record(State.WAITING_FOR_HUMAN, "AwaitingApproval", waiting)
        workflow_id = workflow.info().workflow_id
        waiting_before = run.waiting_approvals()
        for p in waiting_before:
            telemetry.human_wait_started(p.tool)
            self._emit(
                "approval_needed",
                f"{p.tool} {planning.call_target(p.tool, p.arguments)}".strip(),
                tool=p.tool,
                call_id=p.call_id,
                arguments=p.arguments,
                commands=events.approval_commands(workflow_id, p.call_id),
            )
        self._show()
        # Durable: this wait survives worker restarts and lasts as long as it must.
        await workflow.wait_condition(lambda: approvals.all_decided(m))
        decided = {p.call_id: p.decision for p in m.pending_approvals}
        for p in waiting_before:
            outcome = decided.get(p.call_id)
            telemetry.human_wait_ended(p.tool, outcome.value if outcome else "decided")
        return approvals.resolve(m, parallel=run.input.config.parallel_tools)

    async def _wait_for_guidance(self) -> Event:
        """A stuck run asks a human: continue with guidance for the model, or halt."""
        run, m = self._run, self._run.memory
        self._record(State.WAITING_FOR_HUMAN, "AwaitingGuidance", m.pending_guidance or "")
        self._emit(
            "guidance_needed",
            m.pending_guidance or "",
            commands=events.guidance_commands(workflow.info().workflow_id),
        )
        self._show()
        telemetry.human_wait_started("guidance")
        await workflow.wait_condition(lambda: m.human_guidance is not None)
        telemetry.human_wait_ended("guidance", "answered")
        return approvals.follow_guidance(run)

    async def _act(self) -> Event:
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
        run.client_queries_asked += 1
        telemetry.client_query("asked")
        run.client_query_parallel = run.state is State.PARALLEL_ACTING
        run.client_query = client_queries.new_query(
            call,
            args.kind,
            args.what,
            number=run.client_queries_asked,
            step=run.memory.step,
            now=workflow.now(),
            timeout_seconds=config.client_query_timeout_seconds,
            detected=call.id == client_queries.detected_id(run.memory.step),
        )
        run.client_answer = None
        return None

    async def _wait_for_client(self) -> Event:
        """WaitingForClient: durably, until the client answers or the timeout passes; either
        way the ``ask_client`` call gets its observation and Acting goes on."""
        run, m, config = self._run, self._run.memory, self._run.input.config
        query = run.client_query
        if query is None:  # cannot happen: Acting opened it
            raise ApplicationError("WaitingForClient without a query", non_retryable=True)
        self._record(
            State.WAITING_FOR_CLIENT,
            "AwaitingClient",
            f"{query.id} {query.kind}: {cut(query.what, 200)}",
        )
        self._emit(
            "client_query",
            f"{query.kind}: {cut(query.what, 200)}",
            query=query,
            call_id=query.call_id,
            commands=events.answer_commands(workflow.info().workflow_id, query),
        )
        self._show()
        timeout = config.client_query_timeout_seconds
        waited = (workflow.now() - query.asked_at).total_seconds()
        # A timeout is not an error here: the model is told, and the run goes on.
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: run.client_answer is not None,
                timeout=max(timeout - waited, 0.001),
                timeout_summary=f"client query {query.id}",
            )
        answer = run.client_answer
        telemetry.client_query("answered" if answer is not None else "timed_out")
        calls = [c for c in m.current_tool_calls if c.id == query.call_id]
        if not calls:  # cannot happen: the query was opened for one of these calls
            raise ApplicationError(f"no call {query.call_id} for {query.id}", non_retryable=True)
        call = calls[0]
        if answer is None:
            self._record(State.WAITING_FOR_CLIENT, "ClientQueryTimedOut", f"{query.id}")
        observation = client_queries.observation(query, answer, timeout)
        ok = answer is not None and answer.declined is None
        m.observations = (
            *m.observations,
            ToolOutcome(
                call=call, observation=cut(observation, config.max_observation_chars), success=ok
            ),
        )
        parallel = run.client_query_parallel
        run.client_query = None
        run.client_answer = None
        run.client_query_parallel = False
        self._emit(
            "client_answered",
            observation if not ok else f"{query.kind}: {len(observation)} characters",
            query=query,
            call_id=query.call_id,
            ok=ok,
        )
        return Event.CLIENT_QUERY_DONE_PARALLEL if parallel else Event.CLIENT_QUERY_DONE

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
            # Only replaying a run recorded before client queries (``_act`` asks the others):
            # the tool did not exist then, and no activity ran for it.
            return ToolOutcome(
                call=call, observation=f"ERROR: unknown tool {call.name!r}", success=False
            )
        target = status.short_target(TOOLS[call.name].target(args))
        self._emit("tool_started", call.name, tool=call.name, call_id=call.id, target=target)
        outcome = await self._run_activity(call, args, target)
        return self._finished(outcome, target)

    def _finished(self, outcome: ToolOutcome, target: str | None = None) -> ToolOutcome:
        """Publish a call's ``tool_finished`` event (its observation cut to a line's worth)."""
        call = outcome.call
        self._emit(
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
            result: ToolResult = await workflow.execute_activity_method(
                ToolActivities.run_tool,
                planning.tool_request(run, call, args),
                **options.tool_call(
                    config,
                    f"step {run.memory.step} · {call.name} {target}",
                    command=call.name == "run_command",
                    tool_timeout=TOOLS[call.name].timeout_seconds,
                ),
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
        self._emit("tool_started", call.name, tool=call.name, call_id=call.id, target=target)
        try:
            result: ToolResult = await workflow.execute_activity_method(
                McpActivities.call_mcp_tool,
                request,
                **options.mcp_call(
                    config,
                    f"step {run.memory.step} · {call.name} {target}".strip(),
                    info.attempt_timeout(),
                ),
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
            self._record(run.state, "McpToolVanished", f"{call.name}: {result.output}")
        outcome = planning.observed(call, result, config.max_observation_chars, hashes=True)
        return self._finished(outcome, target)

    async def _observe(self) -> Event:
        """Commit the results to history, then run Nexora's progress check on them."""
        run, m = self._run, self._run.memory
        by_id = {o.call.id: o for o in m.observations}
        outcomes = tuple(by_id[c.id] for c in m.current_tool_calls if c.id in by_id)
        for o in outcomes:
            self._record(
                State.OBSERVING,
                "ToolObserved",
                f"{o.call.name} {'ok' if o.success else 'failed'}: {cut(o.observation, 200)}",
            )
            planning.track(
                run.tracker,
                o,
                run.input.config.test_commands,
                mutating=planning.mutates(run, o.call.name),
            )
        repeated = run.tracker.record_message(m.assistant_text or "")
        m.history = (
            *m.history,
            Turn(step=m.step, assistant_text=m.assistant_text, outcomes=outcomes),
        )
        m.current_tool_calls = ()
        m.observations = ()
        m.pending_approvals = ()
        m.assistant_text = None
        run.last_step_mutated = any(
            o.success and planning.mutates(run, o.call.name) for o in outcomes
        )

        stuck = run.tracker.check() or repeated
        if stuck:
            run.stuck_reason = stuck
            self._record(State.OBSERVING, "Stuck", stuck)
            self._emit("stuck", stuck)
            workflow.logger.warning("agent.stuck", extra={"reason": stuck, "step": m.step})
            telemetry.stuck(run.tracker.stuck_kind())
            return Event.STUCK
        if run.tracker.should_report():
            progress = run.tracker.summary(workflow.now(), run.started_at)
            self._record(run.state, "Progress", progress.describe())
            self._emit("progress", progress.describe())
            workflow.logger.info("agent.progress", extra=progress.model_dump(mode="json"))
        if run.pending_phase is not None:
            return Event.PHASE_COMPLETE
        if run.last_step_mutated:
            return Event.FILES_CHANGED
        return Event.NEEDS_REFLECTION if self._run.reflection_due() else Event.CONTINUE

    async def _post_tools_hook(self) -> Event:
        """Loom's post-tools hook: each hook of the config, in order, after a step whose tools
        changed files (``git_commit`` commits them). A failed hook is a trace line."""
        run, config = self._run, self._run.input.config
        history = run.memory.history
        last = history[-1] if history else None
        outcomes = [o for o in (last.outcomes if last else ()) if o.success]
        changed = sorted({p for o in outcomes for p in o.mutated_paths})
        if not config.hooks:
            self._record(
                State.POST_TOOLS_HOOK,
                "HookRun",
                f"changed: {', '.join(changed) if changed else '(by command)'}",
            )
        for name in config.hooks:
            result = await self._run_hook(name, last.step if last else run.memory.step, outcomes)
            self._record(State.POST_TOOLS_HOOK, "HookRun", hooks.describe(result))
            self._emit("hook", hooks.describe(result), tool=name, ok=result.outcome != "failed")
        return Event.NEEDS_REFLECTION if run.reflection_due() else Event.HOOK_DONE

    async def _run_hook(self, name: str, step: int, outcomes: list[ToolOutcome]) -> HookResult:
        config, info = self._run.input.config, workflow.info()
        mutating = [o for o in outcomes if planning.mutates(self._run, o.call.name)]
        request = HookRequest(
            hook=name,
            workspace=self._run.input.workspace,
            step=step,
            tools=tuple(dict.fromkeys(o.call.name for o in mutating)),
            files=tuple(sorted({p for o in mutating for p in o.mutated_paths})),
            commit_author=config.commit_author,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
        )
        try:
            result: HookResult = await workflow.execute_activity_method(
                HookActivities.run_hook,
                request,
                **hooks.hook_call(
                    f"step {step} · hook {name}",
                    heartbeat_timeout_seconds=config.heartbeat_timeout_seconds,
                    task_queue=config.tool_task_queue,
                ),
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return HookResult.failure(name, failure_message(exc))
        return result

    async def _recover(self) -> Event:
        event = recovery.recover(self._run)
        history = self._run.memory.history
        if event is Event.RECOVERED and history and history[-1].note:
            self._emit("hint", history[-1].note)
        return event

    async def _phase_transition(self) -> Event:
        event = recovery.phase_transition(self._run, workflow.now())
        last = self._run.trace[-1] if self._run.trace else None
        if last is not None and last.event == "PhaseStarted":
            self._emit("phase", last.data)
        return event

    # ----------------------------------------------------------------------------------------
    # Human approval: the doors. The checks are in ``approvals``; a refused signal is recorded
    # in the trace and in ``status().last_event``, and the run keeps waiting.
    # ----------------------------------------------------------------------------------------

    # Signal handlers take ``*bodies``: a handler that cannot take what arrives would fail the
    # workflow task, which Temporal retries forever. Every body is checked, and a refusal is a
    # trace line, never an exception.

    @workflow.signal
    def approve(self, *bodies: Any) -> None:
        """``{"call_id": "..."}``: run the pending call as the model asked."""
        self._signal("approve", bodies)

    @workflow.signal
    def reject(self, *bodies: Any) -> None:
        """``{"call_id": "...", "reason": "..."}``: do not run it; the reason is the observation."""
        self._signal("reject", bodies)

    @workflow.signal
    def modify(self, *bodies: Any) -> None:
        """``{"call_id": "...", "arguments": {...}}``: run it with these (checked) arguments."""
        self._signal("modify", bodies)

    @workflow.signal
    def guide(self, *bodies: Any) -> None:
        """``{"guidance": "..."}`` or ``{"halt": true, "reason": "..."}`` for a stuck run."""
        try:
            signal = approvals.check_guide(self._run, approvals.signal_body("guide", bodies))
        except Refused as exc:
            self._refused("guide", exc)
            return
        self._apply_guide(signal)

    @workflow.signal(dynamic=True)
    def unknown_signal(self, name: str, bodies: Sequence[RawValue]) -> None:
        """Any other signal name: Temporal accepts it, so the trace says it was not understood
        (instead of a misspelt ``aprove`` vanishing)."""
        self._refused(name, Refused(f"unknown signal (this run takes: {', '.join(SIGNALS)})"))

    @workflow.update
    def decide(self, decision: Decision) -> PendingApproval | None:
        """Approve, reject or modify one pending call (returns it as decided), or guide a
        stuck run (returns nothing)."""
        checked = approvals.check_update(self._run, decision)
        if isinstance(checked, GuideSignal):
            self._apply_guide(checked)
            return None
        return self._apply(decision.action, checked)

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        # Raised in the validator, the refusal rejects the update: nothing reaches the history.
        approvals.check_update(self._run, decision)

    def _signal(self, action: str, bodies: tuple[Any, ...]) -> None:
        try:
            body = approvals.signal_body(action, bodies)
            checked = approvals.check_decision(self._run, action, body)
        except Refused as exc:
            self._refused(action, exc)
            return
        self._apply(action, checked)

    def _refused(self, signal: str, why: Refused) -> None:
        self._record(self._run.state, "SignalRefused", f"{signal[:100]}: {why}")
        self._emit("refused", f"{signal[:100]}: {why}")
        workflow.logger.warning("agent.signal.refused", extra={"signal": signal, "why": str(why)})

    def _apply(self, action: str, checked: approvals.Checked) -> PendingApproval:
        decided = approvals.apply_decision(self._run.memory, checked)
        self._record(self._run.state, "SignalReceived", f"{action} {decided.call_id}")
        self._emit(
            "decided",
            f"{action} {decided.call_id}" + (f": {decided.reason}" if decided.reason else ""),
            tool=decided.tool,
            call_id=decided.call_id,
            arguments=decided.arguments,
        )
        self._show()
        return decided

    def _apply_guide(self, signal: GuideSignal) -> None:
        self._run.memory.human_guidance = signal
        self._record(self._run.state, "SignalReceived", "guide: halt" if signal.halt else "guide")
        self._emit("decided", "guide: halt" if signal.halt else "guide")

    # ----------------------------------------------------------------------------------------
    # Threads: the user's next message, and closing. Validators refuse before any history.
    # ----------------------------------------------------------------------------------------

    @workflow.update
    def send(self, message: UserMessage) -> SendReceipt:
        """``{"text": "..."}``: the thread's next user message; queued behind a running turn."""
        run = self._run
        queued = run.state is not State.WAITING_FOR_USER_INPUT or bool(run.inbox)
        run.inbox.append(message.text)
        self._record(
            run.state,
            "UserMessageReceived",
            f"{'queued at ' + str(len(run.inbox)) if queued else 'received'}: "
            f"{cut(message.text, 200)}",
        )
        self._emit("message", cut(message.text, 2_000))
        return SendReceipt(queued=queued, position=len(run.inbox), state=run.state)

    @send.validator
    def _validate_send(self, message: UserMessage) -> None:
        threads.check_message(self._run, message)

    @workflow.update
    def close(self) -> AgentStatus:
        """End the thread once it has answered the messages it already has."""
        self._run.closing = True
        self._record(
            self._run.state, "CloseRequested", f"{len(self._run.inbox)} message(s) to answer first"
        )
        return status.status(self._run, workflow.now(), self._stream_end())

    @close.validator
    def _validate_close(self) -> None:
        threads.check_close(self._run)

    # ----------------------------------------------------------------------------------------
    # Client queries (Loom's server query): the client's answer. The validator refuses before
    # any history.
    # ----------------------------------------------------------------------------------------

    @workflow.update
    def answer_query(self, answer: ClientAnswer) -> ClientQuery:
        """``{"query_id": "q1", "kind": "file_read", "content": "..."}`` (or ``"declined"``):
        the answer to the pending client query; returns the query it answered."""
        run = self._run
        query = run.client_query
        if query is None or run.client_answer is not None:
            # Two answers validated in one activation: the first one counts.
            raise ApplicationError("the query was already answered", type="AnswerRefused")
        run.client_answer = answer
        self._record(
            run.state,
            "ClientAnswerReceived",
            f"{query.id}: " + ("declined" if answer.declined is not None else "answered"),
        )
        return query

    @answer_query.validator
    def _validate_answer_query(self, answer: ClientAnswer) -> None:
        run = self._run
        try:
            client_queries.check_answer(
                run.client_query if run.client_answer is None else None,
                answer,
                run.input.config.client_query_max_answer_chars,
            )
        except AnswerRefused as exc:
            raise ApplicationError(str(exc), type="AnswerRefused", non_retryable=True) from None

    # ----------------------------------------------------------------------------------------
    # Queries
    # ----------------------------------------------------------------------------------------

    @workflow.query
    def state(self) -> AgentStatus:
        """Where the run is: state, step, pending approvals, token usage, last event."""
        return status.status(self._run, workflow.now(), self._stream_end())

    @workflow.query
    def export(self) -> ThreadExport:
        """The conversation in Loom's shape: ``agent_state`` and ``conversation.messages``."""
        return threads.export(self._run)

    @workflow.query
    def progress(self) -> ProgressSummary:
        """Nexora's totals: phases completed / total, files, tool calls, tests, elapsed."""
        return self._run.tracker.summary(workflow.now(), self._run.started_at)

    @workflow.query
    def trace(self) -> Trace:
        """The append-only log: step, state, event, data, timestamp."""
        return Trace(entries=tuple(self._run.trace), earlier=self._run.trace_earlier)
