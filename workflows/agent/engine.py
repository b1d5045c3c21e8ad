"""The agent loop as deterministic workflow code: ``AgentEngine``, which ``AgentWorkflow`` is.

Plan (model activity) -> act (tool activities, one or several at once) -> observe -> post-tools
hook -> plan ... until the model answers. Every move goes through the transition table in
``state_machine``; memory writes are checked against ``memory.OWNERSHIP``.

This module is the table's driver (``drive``, ``_fire``) and one handler per state. Beside it:
everything the run knows is one ``AgentRun`` (``state``); the activities it calls, with their
options, are in ``calls``; which tools the run offers and the one check of a call in
``toolbox``; running a step's checked calls in ``acting``; the signals, updates and queries in
``handlers``; what the run shows (trace, stream, search attributes, Web UI details) in
``publishing``; what a decision may do in ``approvals``.

Why it lives apart from ``workflow.py``: the sandbox re-imports a workflow's own module for
every run it caches, so this module would be compiled objects held once per parked run. It is
passed through the sandbox instead (``worker.PASSTHROUGH_MODULES``), shared by every run, and
holds no state of its own: all of a run's state is on its instance.

Determinism: no I/O, clock, randomness or environment here except through ``workflow.*``. The
conversation lives in workflow state; activities receive only what one call needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from treadle.workflows import telemetry
from treadle.workflows.agent import compressing, interrupting, mcp_listing, post_tools, snapshotting
from treadle.workflows.agent.acting import ToolRunner
from treadle.workflows.agent.handlers import SIGNALS, AgentHandlers
from treadle.workflows.agent.messages import events
from treadle.workflows.agent.messages import search_attributes as sa
from treadle.workflows.agent.messages.models import (
    AgentInput,
    AgentResult,
    ModelResponse,
    RunStatus,
    Turn,
)
from treadle.workflows.agent.messages.state_machine import Event, State, next_state
from treadle.workflows.agent.parts import (
    approvals,
    client_queries,
    handover,
    midturn,
    planning,
    recovery,
    reflection,
    status,
    threads,
    typed_answers,
)
from treadle.workflows.agent.parts.outages import Outage
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import cut
from treadle.workflows.agent.parts.toolbox import CheckedCall
from treadle.workflows.agent.subagents import reports as child_reports
from treadle.workflows.base import failure_message

__all__ = ["SIGNALS", "WAITING_STATES", "AgentEngine"]

WAITING_STATES = frozenset(
    {
        State.PLANNING,
        State.ACTING,
        State.PARALLEL_ACTING,
        State.WAITING_FOR_HUMAN,
        State.WAITING_FOR_CLIENT,
        State.WAITING,
        State.WAITING_FOR_USER_INPUT,
        State.REFLECTING,
    }
)
"""States whose handler may wait (an activity, a signal, a timer): what the Web UI's list shows
while the run is in one of them must be current, so pending search attributes go out first.
PostToolsHook waits only when the run has hooks; the others (Observing, Recovering,
PhaseTransition) pass within one workflow task."""


class AgentEngine(AgentHandlers):
    """One durable agent run: plan, act, observe until the model answers. ``AgentWorkflow``
    adds the workflow definition (``@workflow.defn``, ``@workflow.run``, ``@workflow.init``);
    ``AgentHandlers`` its signals, updates and queries."""

    def __init__(self, input: AgentInput) -> None:
        # ``resume`` is the whole run handed over by continue-as-new; a new run starts fresh.
        if input.resume is None:
            self._run = AgentRun.begin(input, workflow.now())
            # Read from the start event: the same on every replay of this run.
            shown = workflow.info().typed_search_attributes.get(sa.AGENT_STATE)
            self._run.lean_start = shown is not None  # started by one of Treadle's clients
        else:
            self._run = handover.resumed(input)
        self._pub = Publisher(self._run, input.stream)
        self._tools = ToolRunner(self._run, self._pub, self._hand_over_if_due)

    def store_outage(self, outage: Outage | None) -> None:
        """``calls.OutageWatcher``: a call waits for the store, or the store answered."""
        self._pub.store_outage(outage)

    # ----------------------------------------------------------------------------------------
    # The engine
    # ----------------------------------------------------------------------------------------

    async def drive(self, input: AgentInput) -> AgentResult:
        """The run: the states' handlers until a terminal state."""
        handlers: dict[State, Callable[[], Awaitable[Event]]] = {
            State.WAITING_FOR_USER_INPUT: self._wait_for_user,
            State.PLANNING: self._plan,
            State.ACTING: self._tools.act,
            State.PARALLEL_ACTING: self._tools.act,
            State.WAITING_FOR_HUMAN: self._wait_for_human,
            State.WAITING_FOR_CLIENT: self._tools.wait_for_client,
            State.WAITING: self._tools.wait,
            State.OBSERVING: self._observe,
            State.POST_TOOLS_HOOK: self._post_tools_hook,
            State.REFLECTING: self._reflect,
            State.RECOVERING: self._recover,
            State.PHASE_TRANSITION: self._phase_transition,
        }
        run = self._run
        if input.resume is None:
            self._start()
        else:
            self._pub.record(run.state, "Resumed", f"run {run.runs} of this workflow id")
            self._pub.emit("state", f"resumed: run {run.runs} of this workflow id")
            self._pub.show()
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
                    self._pub.send_attributes()
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
                self._pub.record(run.state, "RunFailed", str(exc))
                self._pub.emit("error", f"run failed: {exc}")
                self._pub.upsert([sa.AGENT_STATE.value_set(State.ERROR.value)])
            self._pub.send_attributes(exact=True)
            # A sub-agent outliving its parent's runs: the parent's newest run learns why.
            why = "was cancelled" if is_cancelled_exception(exc) else f"failed: {exc}"
            await child_reports.ended_report(run, self._pub, why)
            raise
        self._pub.send_attributes(exact=True)
        outcome = {State.DONE: RunStatus.DONE, State.HALTED: RunStatus.HALTED}
        m = run.memory
        result = AgentResult(
            status=outcome.get(run.state, RunStatus.ERROR),
            answer=m.final_answer,
            error=m.error,
            steps=m.step,
            usage=m.usage,
            cost_usd=status.run_cost(run),
            output=typed_answers.output_of(run.input.config, m.final_answer),
            usage_by_model=m.usage_by_model,
            workspace_snapshot=run.workspace_snapshot,
            **threads.readable_when_closed(run, self._pub.stream_end()),
        )
        # A sub-agent: the events not passed on (and its result, when it outlives its parent's
        # runs: the parent's newest run reads it from there).
        await child_reports.last_report(run, self._pub, result)
        return result

    def _start(self) -> None:
        run, config = self._run, self._run.input.config
        self._pub.upsert([sa.AGENT_MODEL.value_set(run.model)])
        self._pub.emit("started", cut(run.input.task, 2_000))
        self._fire(Event.START, f"task: {cut(run.input.task, 200)}")
        if config.phases:
            total = len(config.phases)
            run.tracker.start_phase(1, config.phases[0], workflow.now(), total=total)
            self._pub.record(
                State.PLANNING, "PhaseStarted", f"phase 1 of {total}: {config.phases[0]}"
            )
            self._pub.emit("phase", f"phase 1 of {total}: {config.phases[0]}")

    def _fire(self, event: Event, data: str = "") -> None:
        """Apply one transition, record it, and publish it to the Web UI and visibility."""
        run = self._run
        before = run.state
        after = next_state(before, event)
        run.state = after
        if after in (State.ERROR, State.HALTED) and run.memory.error and not data:
            data = run.memory.error
        move = f"{before.value} -> {after.value}"
        self._pub.record(before, event.value, f"{move} · {data}" if data else move)
        workflow.logger.info(
            "agent.transition",
            extra={"from": before.value, "event": event.value, "to": after.value},
        )
        self._pub.upsert(
            [sa.AGENT_STATE.value_set(after.value), sa.AGENT_STEP.value_set(run.memory.step)]
        )
        self._pub.emit("state", f"{move} · {data}" if data else move)
        if after.is_terminal:
            m = run.memory
            if after is not State.DONE and m.error:
                self._pub.emit("error", m.error)
            self._pub.emit("ended", m.error or m.final_answer or after.value)
        self._pub.show()

    async def _hand_over_if_due(self) -> None:
        """At a safe point, continue as new when it is due (see ``handover``)."""
        why = handover.due(self._run)
        if why is None:
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._pub.record(self._run.state, "ContinuedAsNew", why)
        self._pub.emit("continued", why)
        self._pub.send_attributes(exact=True)
        await handover.continue_as_new(self._run, self._pub.stream)

    # ----------------------------------------------------------------------------------------
    # State handlers: each does its one job and returns the event that decides what's next.
    # ----------------------------------------------------------------------------------------

    async def _plan(self) -> Event:
        run, m, config = self._run, self._run.memory, self._run.input.config
        if run.parent_gone is not None:  # a sub-agent ends with its parent
            m.error = f"{run.parent_gone}: a sub-agent ends with its parent"
            return Event.FATAL_ERROR
        child_reports.report_soon(run, self._pub)  # a sub-agent: its parent sees it go on
        await self._hand_over_if_due()
        if m.step - m.turn_start_step >= config.max_steps:
            m.error = (
                f"max steps reached: the model gave no final answer within {config.max_steps} steps"
            )
            return Event.MAX_STEPS
        await self._tools.list_loaded_tools()
        if config.mcp_servers and (run.mcp is None or mcp_listing.due(run)):
            await self._tools.list_mcp_tools()
        m.step += 1
        telemetry.step_started(m.step)
        joined = midturn.join_turn(run)  # a thread's messages steered into this turn
        if joined:
            self._pub.record(
                State.PLANNING, "MessagesJoined", f"step {m.step} reads {len(joined)} message(s)"
            )
        planned = planning.model_request(run)
        if isinstance(planned, planning.CannotCall):
            m.error = planned.reason
            return planned.event
        if planned.prompt_estimate is not None:
            m.prompt_estimate = planned.prompt_estimate  # what ``calibrate`` compares with
        request = planned.request.model_copy(
            update={"stream": config.stream_tokens, "step": m.step}
        )
        try:
            called = await interrupting.call_model(run, request, self._pub)
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            ended = planning.cut_reply(run, request, exc)  # its tokens were spent: they count
            if ended is not None:
                m.error = ended.reason
                return ended.event
            m.error = f"model call failed: {failure_message(exc)}"
            return Event.FATAL_ERROR
        if isinstance(called, interrupting.Interrupted):
            # The reply so far is the record's, marked; the step is made again with the message.
            m.history = (*m.history, midturn.interrupted_turn(run, called.said))
            spent = interrupting.spend(run, request, called)
            self._pub.record(
                State.PLANNING,
                "ModelInterrupted",
                f"step {m.step}: kept {len(called.said)} character(s) of the reply; {spent}",
            )
            return Event.INTERRUPTED
        model, response = called
        if run.loaded_tools is None:  # listed with this call (``AgentRun.lean_start``)
            self._tools.loaded(response.loaded_tools or ())
        run.served_by = model
        run.spend(model, response.usage)
        planning.calibrate(m, response.usage)
        telemetry.model_spent(model, response.usage, config.prices)
        if response.conversation is not None:
            # The store now holds everything this call sent: the next call sends only the rest.
            m.conversation_head = response.conversation
            m.conversation_sent = request.conversation_messages + len(request.messages)
            m.conversation_turns = len(m.history)
        described = planning.describe_response(response, None if model == run.model else model)
        self._pub.record(State.PLANNING, "ModelResponse", described)
        # Each call is checked here, once: the checked form is what is approved and what runs.
        checked = self._tools.check(response.tool_calls)
        self._pub.emit(
            "model",
            response.content or "",
            tool_calls=tuple(f"{c.call.name} {c.short_target}".strip() for c in checked),
            prompt_tokens=m.usage.prompt_tokens,
            completion_tokens=m.usage.completion_tokens,
            total_tokens=m.usage.total_tokens,
        )
        if planning.confidence_is_low(run, response, workflow.now()):
            return Event.LOW_CONFIDENCE
        typed = typed_answers.judge(config, response, m.step)
        if typed is not None:
            run.tracker.record_reply(empty=False)
            return self._typed_answer(typed)
        if response.tool_calls:
            run.tracker.record_reply(empty=False)
            return self._plan_tools(response, checked)
        answer = (response.content or "").strip()
        empty = run.tracker.record_reply(empty=not answer)
        if empty is not None:
            return self._stuck(empty)
        asked = self._detect_client_query(answer)
        if asked is not None:
            # Loom's QueryDetectionStrategy: the reply asks for something only the client has.
            # It becomes an ask_client call, so the answer is its result in the conversation;
            # approvals and the step's checks apply to it as to the model's own calls.
            call = client_queries.detected_call(*asked, step=m.step)
            self._pub.record(
                State.PLANNING, "ClientQueryDetected", f"{asked[0]}: {cut(asked[1], 200)}"
            )
            detected = response.model_copy(update={"tool_calls": (call,)})
            return self._plan_tools(detected, self._tools.check([call]))
        too_short = planning.answer_feedback(answer, config.min_answer_length)
        if too_short is not None:
            self._feedback(Turn(step=m.step, assistant_text=answer, note=too_short))
            return Event.ANSWER_TOO_SHORT
        return self._answer(answer)

    def _answer(self, answer: str) -> Event:
        run, m = self._run, self._run.memory
        m.final_answer = answer
        # The answer is part of the conversation: a thread's next turn sees it in context.
        m.history = (*m.history, Turn(step=m.step, assistant_text=answer))
        self._pub.emit("answer", answer)
        return Event.TURN_ANSWERED if run.input.thread else Event.LLM_FINAL_ANSWER

    def _typed_answer(self, typed: typed_answers.Accepted | typed_answers.Invalid) -> Event:
        """A reply judged against ``output_schema``: the answer, or sent back (bounded)."""
        m, config = self._run.memory, self._run.input.config
        if isinstance(typed, typed_answers.Accepted):
            return self._answer(typed.text)
        used = typed_answers.corrections(m.history, m.turn_start_step)
        if used >= config.output_retries:
            m.error = (
                f"the final answer did not match output_schema after {used} correction(s): "
                f"{typed.problem}"
            )
            return Event.FATAL_ERROR
        self._feedback(typed.turn)
        return Event.ANSWER_INVALID

    def _detect_client_query(self, answer: str) -> tuple[client_queries.Kind, str] | None:
        """A final answer that asks the client for something, where the run offers ask_client."""
        if client_queries.ASK_CLIENT not in self._tools.box().offered_names():
            return None
        return client_queries.detect(answer)

    def _plan_tools(self, response: ModelResponse, checked: tuple[CheckedCall, ...]) -> Event:
        m, config = self._run.memory, self._run.input.config
        calls = planning.unique_ids(response.tool_calls, m.history, m.step)
        checked = tuple(c.with_id(call.id) for c, call in zip(checked, calls, strict=True))
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
        m.said(response)
        m.current_tool_calls = calls
        self._tools.carry(checked)
        waiting = approvals.approvals_needed(
            checked, self._tools.box().approval_required(), m.step, workflow.now()
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
        self._pub.record(
            State.PLANNING, "Feedback", turn.note or turn.outcomes[0].observation[:200]
        )

    async def _reflect(self) -> Event:
        """Reflecting (agentsm): compress older history into a summary; after a low-confidence
        reply, also ask the model to reconsider it."""
        run, m, config = self._run, self._run.memory, self._run.input.config
        if run.flags.reflect_reason == "low confidence":
            note = reflection.reconsider_note(
                m.confidence_score, config.confidence_threshold, m.retry_count, config.max_retries
            )
            m.history = (*m.history, m.turn(note=note))
            m.said(None)
        await compressing.compress(self._run, self._pub)
        run.flags.reflect_reason = ""
        return Event.REFLECT_DONE

    async def _wait_for_user(self) -> Event:
        return await threads.wait_for_user(self._run, self._hand_over_if_due)

    async def _wait_for_human(self) -> Event:
        run, m = self._run, self._run.memory
        if m.pending_guidance is not None:
            return await self._wait_for_guidance()
        waiting = ", ".join(f"{p.call_id} ({p.tool})" for p in m.pending_approvals)
        self._pub.record(State.WAITING_FOR_HUMAN, "AwaitingApproval", waiting)
        workflow_id = workflow.info().workflow_id
        waiting_before = run.waiting_approvals()
        for p in waiting_before:
            telemetry.human_wait_started(p.tool)
            self._pub.emit(
                "approval_needed",
                f"{p.tool} {self._tools.target_of(p.call_id)}".strip(),
                tool=p.tool,
                call_id=p.call_id,
                arguments=p.arguments,
                commands=events.approval_commands(workflow_id, p.call_id),
            )
        self._pub.show()
        await child_reports.tell_parent(run, self._pub)  # a sub-agent: its parent shows it
        # Durable: this wait survives worker restarts and lasts as long as it must.
        await workflow.wait_condition(lambda: approvals.all_decided(m))
        await child_reports.tell_parent(run, self._pub)
        decided = {p.call_id: p.decision for p in m.pending_approvals}
        for p in waiting_before:
            outcome = decided.get(p.call_id)
            telemetry.human_wait_ended(p.tool, outcome.value if outcome else "decided")
        return approvals.resolve(m, parallel=run.input.config.parallel_tools)

    async def _wait_for_guidance(self) -> Event:
        """A stuck run asks a human: continue with guidance for the model, or halt."""
        run, m = self._run, self._run.memory
        self._pub.record(State.WAITING_FOR_HUMAN, "AwaitingGuidance", m.pending_guidance or "")
        self._pub.emit(
            "guidance_needed",
            m.pending_guidance or "",
            commands=events.guidance_commands(workflow.info().workflow_id),
        )
        self._pub.show()
        child_reports.report_soon(run, self._pub, urgent=True)  # its parent shows it stuck
        telemetry.human_wait_started("guidance")
        await workflow.wait_condition(lambda: m.human_guidance is not None)
        telemetry.human_wait_ended("guidance", "answered")
        return approvals.follow_guidance(run)

    async def _observe(self) -> Event:
        """Commit the results to history, then run Nexora's progress check on them."""
        run, m = self._run, self._run.memory
        by_id = {o.call.id: o for o in m.observations}
        outcomes = tuple(by_id[c.id] for c in m.current_tool_calls if c.id in by_id)
        box = self._tools.box()
        for o in outcomes:
            self._pub.record(
                State.OBSERVING,
                "ToolObserved",
                f"{o.call.name} {'ok' if o.success else 'failed'}: {cut(o.observation, 200)}",
            )
            planning.track(
                run.tracker,
                o,
                run.input.config.test_commands,
                target=self._tools.checked(o.call).progress_target,
                mutating=box.mutates(o.call.name),
            )
        # A long reply is told apart by its stored whole (the preview may repeat).
        repeated = run.tracker.record_message(m.assistant_ref or m.assistant_text or "")
        m.history = (*m.history, m.turn(outcomes=outcomes))
        m.current_tool_calls = ()
        m.observations = ()
        m.pending_approvals = ()
        m.said(None)
        # A sub-agent's call names what it changed (its merged snapshot's paths): the hooks run.
        run.flags.last_step_mutated = any(
            (o.success and box.mutates(o.call.name)) or bool(snapshotting.changed_by_child(o))
            for o in outcomes
        )

        stuck = run.tracker.check() or repeated
        if stuck:
            return self._stuck(stuck)
        if run.tracker.should_report():
            progress = run.tracker.summary(workflow.now(), run.started_at)
            self._pub.record(run.state, "Progress", progress.describe())
            self._pub.emit("progress", progress.describe())
            workflow.logger.info("agent.progress", extra=progress.model_dump(mode="json"))
        if run.flags.pending_phase is not None:
            return Event.PHASE_COMPLETE
        if run.flags.last_step_mutated:
            return Event.FILES_CHANGED
        return Event.NEEDS_REFLECTION if self._run.reflection_due() else Event.CONTINUE

    def _stuck(self, reason: str) -> Event:
        """Nexora's check found the run stuck: say why everywhere, then recover."""
        run = self._run
        run.recovery.stuck_reason = reason
        self._pub.record(run.state, "Stuck", reason)
        self._pub.emit("stuck", reason)
        workflow.logger.warning("agent.stuck", extra={"reason": reason, "step": run.memory.step})
        telemetry.stuck(run.tracker.stuck_kind())
        return Event.STUCK

    async def _post_tools_hook(self) -> Event:
        await post_tools.run(self._run, self._pub, self._tools.box())
        return Event.NEEDS_REFLECTION if self._run.reflection_due() else Event.HOOK_DONE

    async def _recover(self) -> Event:
        event = recovery.recover(self._run)
        history = self._run.memory.history
        if event is Event.RECOVERED and history and history[-1].note:
            self._pub.emit("hint", history[-1].note)
        return event

    async def _phase_transition(self) -> Event:
        event = recovery.phase_transition(self._run, workflow.now())
        last = self._run.trace[-1] if self._run.trace else None
        if last is not None and last.event == "PhaseStarted":
            self._pub.emit("phase", last.data)
        return event
