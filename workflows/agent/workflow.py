"""``AgentWorkflow``: the agent loop as a deterministic Temporal workflow.

Plan (model activity) -> act (tool activities, one or several at once) -> observe -> post-tools
hook -> plan ... until the model answers. Every move goes through the transition table in
``workflows.state_machine``; memory writes are checked against ``workflows.memory.OWNERSHIP``.

Determinism: no I/O, clock, randomness or environment here except through ``workflow.*``. The
conversation lives in workflow state; activities receive only what one call needs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    is_cancelled_exception,
)

from workflows.agent import providers, reflection
from workflows.agent import search_attributes as sa
from workflows.agent.catalogue import (
    TOOLS,
    StartPhaseArgs,
    ToolArgumentsError,
    estimate_prompt_tokens,
    parse_arguments,
)
from workflows.agent.memory import AgentMemory
from workflows.agent.models import (
    AgentInput,
    AgentResult,
    AgentStatus,
    ApprovalDecision,
    ApproveSignal,
    Decision,
    GuideSignal,
    ModelRequest,
    ModelResponse,
    ModifySignal,
    PendingApproval,
    RejectSignal,
    RunStatus,
    TokenUsage,
    ToolCall,
    ToolOutcome,
    ToolPolicy,
    ToolRequest,
    ToolResult,
    Trace,
    TraceEntry,
    Turn,
)
from workflows.agent.progress import ProgressSummary, ProgressTracker
from workflows.agent.state_machine import Event, State, next_state

with workflow.unsafe.imports_passed_through():
    # Activity classes are referenced by method (names by object, not string). Their modules
    # load the HTTP client library, which must not be re-imported in the sandbox every run.
    from activities.model.activity import ModelActivities
    from activities.tools.builtin import ToolActivities

SUMMARY_TARGET_CHARS = 60

# Temporal fails a payload over 2 MB and terminates a run at 50 MB / 51,200 events without
# letting it react. The loop stops itself, with a clear error, well before either. (Reflection
# and continue-as-new will bound growth; until then these are the honest limits.)
MAX_MODEL_INPUT_BYTES = 1_500_000
MAX_HISTORY_BYTES = 40 * 1024 * 1024
MAX_HISTORY_EVENTS = 40_000
CARRY_CONTENT_HASHES = "carry-content-hashes"
"""``workflow.patched`` id: tool results' content hashes reach the progress tracker."""
MIN_COMPLETION_TOKENS = 64
"""Below this much room left in the token budget, another model call is not worth making."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters cut]"


def _failure_message(exc: ActivityError) -> str:
    """What an activity failure means, in one line.

    The activity's own ``ApplicationError`` carries the deliberate message (provider, status,
    provider text); a timeout says which timeout; only otherwise is the raw cause used.
    """
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return cause.message
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type else "activity"
        why = exc.retry_state.name.lower().replace("_", " ") if exc.retry_state else "retries over"
        return f"{kind} timeout ({why})"
    return str(cause or exc)


# A ValidationError in workflow code means bad data (an input another client built without our
# models, a corrupt body): fail the run with the message instead of retrying its task forever.
@workflow.defn(failure_exception_types=[ValidationError])
class AgentWorkflow:
    """One durable agent run: plan, act, observe until the model answers."""

    @workflow.init
    def __init__(self, input: AgentInput) -> None:
        self._input = input
        self._config = input.config
        # Chosen once per run: models[task_type], then models["default"], then input.model.
        self._model = providers.select(input.config.models, input.task_type, input.model)
        self._confidence_unavailable_noted = False
        # Nexora's tracker: recorded and checked by Observing, phases moved by PhaseTransition,
        # reset by Recovering. Pure and deterministic, so it replays like everything here.
        self._tracker = ProgressTracker(config=input.config.progress)
        self._started_at = workflow.now()
        self._stuck_reason: str | None = None
        self._hints_given = 0
        self._pending_phase: StartPhaseArgs | None = None
        self._last_step_mutated = False
        self._reflect_reason = ""
        self._state = State.IDLE
        self._memory = AgentMemory(
            task=input.task,
            task_type=input.task_type,
            **({"system_prompt": input.config.system_prompt} if input.config.system_prompt else {}),
        )
        self._trace: list[TraceEntry] = []
        self._last_event: str | None = None

    # ----------------------------------------------------------------------------------------
    # The engine
    # ----------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: AgentInput) -> AgentResult:
        handlers: dict[State, Callable[[], Awaitable[Event]]] = {
            State.PLANNING: self._plan,
            State.ACTING: self._act,
            State.PARALLEL_ACTING: self._act,
            State.WAITING_FOR_HUMAN: self._wait_for_human,
            State.OBSERVING: self._observe,
            State.POST_TOOLS_HOOK: self._post_tools_hook,
            State.REFLECTING: self._reflect,
            State.RECOVERING: self._recover,
            State.PHASE_TRANSITION: self._phase_transition,
        }
        self._upsert([sa.AGENT_MODEL.value_set(self._model)])
        self._fire(Event.START, f"task: {_cut(input.task, 200)}")
        if self._config.phases:
            total = len(self._config.phases)
            self._tracker.start_phase(1, self._config.phases[0], workflow.now(), total=total)
            self._record(
                State.PLANNING, "PhaseStarted", f"phase 1 of {total}: {self._config.phases[0]}"
            )
        try:
            while not self._state.is_terminal:
                handler = handlers.get(self._state)
                if handler is None:
                    # A state the table allows but this engine does not drive yet: a bug.
                    raise ApplicationError(
                        f"no handler for state {self._state.value}",
                        type="InvalidTransition",
                        non_retryable=True,
                    )
                self._memory.enter(self._state)
                self._fire(await handler())
        except BaseException as exc:
            # Cancellation can surface as asyncio.CancelledError or as an ActivityError whose
            # cause is a CancelledError; either way the run ends in Cancelled and Temporal
            # records it as cancelled because we re-raise.
            if is_cancelled_exception(exc):
                if not self._state.is_terminal:
                    self._fire(Event.CANCEL, "the run was cancelled")
            else:
                # A bug (InvalidTransition, OwnershipViolation): the run fails, and its search
                # attribute must not keep claiming it is alive in its last state.
                self._record(self._state, "RunFailed", str(exc))
                self._upsert([sa.AGENT_STATE.value_set(State.ERROR.value)])
            raise
        status = {State.DONE: RunStatus.DONE, State.HALTED: RunStatus.HALTED}
        return AgentResult(
            status=status.get(self._state, RunStatus.ERROR),
            answer=self._memory.final_answer,
            error=self._memory.error,
            steps=self._memory.step,
            usage=self._memory.usage,
            cost_usd=self._cost(),
        )

    def _fire(self, event: Event, data: str = "") -> None:
        """Apply one transition, record it, and publish it to the Web UI and visibility."""
        before = self._state
        after = next_state(before, event)
        self._state = after
        if after in (State.ERROR, State.HALTED) and self._memory.error and not data:
            data = self._memory.error
        move = f"{before.value} -> {after.value}"
        self._record(before, event.value, f"{move} · {data}" if data else move)
        workflow.logger.info(
            "agent.transition",
            extra={"from": before.value, "event": event.value, "to": after.value},
        )
        self._upsert(
            [sa.AGENT_STATE.value_set(after.value), sa.AGENT_STEP.value_set(self._memory.step)]
        )
        workflow.set_current_details(self._details())

    def _upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        if self._config.search_attributes:
            workflow.upsert_search_attributes(updates)

    def _record(self, state: State, event: str, data: str) -> None:
        self._last_event = f"{event}: {data}" if data else event
        self._trace.append(
            TraceEntry(
                step=self._memory.step,
                state=state.value,
                event=event,
                data=data,
                timestamp=workflow.now(),
            )
        )

    def _cost(self) -> float | None:
        """Usage priced per model with ``config.prices``; ``None`` if any model has no price."""
        prices = self._config.prices
        if not prices or not self._memory.usage_by_model:
            return None
        total = 0.0
        for model, usage in self._memory.usage_by_model.items():
            price = prices.get(model)
            if price is None:
                return None
            cached_price = price.prompt if price.cached_prompt is None else price.cached_prompt
            total += (
                (usage.prompt_tokens - usage.cached_tokens) * price.prompt
                + usage.cached_tokens * cached_price
                + usage.completion_tokens * price.completion
            ) / 1_000_000
        return round(total, 6)

    def _details(self) -> str:
        m = self._memory
        lines = [
            f"**State:** {self._state.value}",
            f"**Step:** {m.step} / {self._config.max_steps}",
            f"**Model:** {self._model}",
            f"**Tokens:** {m.usage.total_tokens}",
        ]
        waiting = [p for p in m.pending_approvals if p.decision is None]
        if waiting and self._state is State.WAITING_FOR_HUMAN:
            lines.append("**Waiting for approval:**")
            lines.extend(
                f"- `{p.call_id}` {p.tool} {json.dumps(p.arguments)[:120]}" for p in waiting
            )
        if m.pending_guidance:
            lines.append(f"**Stuck, waiting for guidance:** {m.pending_guidance}")
        elif self._stuck_reason:
            lines.append(f"**Stuck:** {self._stuck_reason}")
        progress = self._tracker.summary(workflow.now(), self._started_at)
        lines.append(f"**Progress:** {progress.describe()}")
        if m.error:
            lines.append(f"**Error:** {m.error}")
        if m.final_answer:
            lines.append(f"**Answer:** {_cut(m.final_answer, 300)}")
        return "\n\n".join(lines)

    # ----------------------------------------------------------------------------------------
    # State handlers: each does its one job and returns the event that decides what's next.
    # ----------------------------------------------------------------------------------------

    async def _plan(self) -> Event:
        m, config = self._memory, self._config
        if m.step >= config.max_steps:
            m.error = (
                f"max steps reached: the model gave no final answer within {config.max_steps} steps"
            )
            return Event.MAX_STEPS
        info = workflow.info()
        if (
            info.get_current_history_size() > MAX_HISTORY_BYTES
            or info.get_current_history_length() > MAX_HISTORY_EVENTS
        ):
            m.error = (
                f"history limit reached ({info.get_current_history_length()} events, "
                f"{info.get_current_history_size() // 1024} KiB) before Temporal's hard limit; "
                "split the task or lower max_steps"
            )
            return Event.FATAL_ERROR
        m.step += 1
        offered = tuple(
            name
            for name in TOOLS
            if name not in config.blacklisted_tools
            and (name != "run_command" or config.allow_run_command)
        )
        request = ModelRequest(
            model=self._model,
            messages=m.build_messages(),
            tools=offered,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            logprobs=config.confidence_threshold is not None,
        )
        size = len(request.model_dump_json())
        if size > MAX_MODEL_INPUT_BYTES:
            m.error = (
                f"the conversation ({size // 1024} KiB) no longer fits in one model call's "
                f"input (limit {MAX_MODEL_INPUT_BYTES // 1024} KiB); lower "
                "max_observation_chars or split the task"
            )
            return Event.FATAL_ERROR
        if config.token_budget is not None:
            estimate = estimate_prompt_tokens(request)
            cap = config.token_budget - m.usage.total_tokens - estimate
            if cap < MIN_COMPLETION_TOKENS:
                m.error = (
                    f"token budget exhausted: {m.usage.total_tokens} of {config.token_budget} "
                    f"tokens used, and the next call needs about {estimate} prompt tokens"
                )
                return Event.BUDGET_EXCEEDED
            # The cap keeps one call from overshooting what is left.
            request = request.model_copy(update={"max_tokens": min(cap, config.max_tokens or cap)})
        try:
            response: ModelResponse = await workflow.execute_activity_method(
                ModelActivities.call_model,
                request,
                start_to_close_timeout=timedelta(seconds=config.model_timeout_seconds),
                heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout_seconds),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=60),
                    maximum_attempts=config.model_max_attempts,
                ),
                summary=f"step {m.step} · model {self._model.partition(':')[2]}",
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            m.error = f"model call failed: {_failure_message(exc)}"
            return Event.FATAL_ERROR
        m.usage = m.usage + response.usage
        m.usage_by_model = {
            **m.usage_by_model,
            self._model: m.usage_by_model.get(self._model, TokenUsage()) + response.usage,
        }
        confidence = (
            "" if response.confidence is None else f", confidence {response.confidence:.2f}"
        )
        self._record(
            State.PLANNING,
            "ModelResponse",
            f"{len(response.tool_calls)} tool call(s), {response.usage.total_tokens} tokens"
            + confidence,
        )
        if self._confidence_is_low(response):
            return Event.LOW_CONFIDENCE

        if response.tool_calls:
            return self._plan_tools(response)
        answer = (response.content or "").strip()
        if not answer:
            self._feedback(
                Turn(
                    step=m.step,
                    assistant_text="",
                    note="Your last reply was empty. Call a tool, or reply with the final "
                    "answer as text.",
                )
            )
            return Event.ANSWER_TOO_SHORT
        if len(answer) < config.min_answer_length:
            self._feedback(
                Turn(
                    step=m.step,
                    assistant_text=answer,
                    note=f"Your answer was {len(answer)} characters; the final answer must be "
                    f"at least {config.min_answer_length}. Give the complete answer.",
                )
            )
            return Event.ANSWER_TOO_SHORT
        m.final_answer = answer
        return Event.LLM_FINAL_ANSWER

    def _confidence_is_low(self, response: ModelResponse) -> bool:
        """agentsm's confidence check, on the endpoint's own token log-probabilities."""
        m, threshold = self._memory, self._config.confidence_threshold
        if threshold is None:
            return False
        if response.confidence is None:
            if not self._confidence_unavailable_noted:
                self._confidence_unavailable_noted = True
                self._record(
                    State.PLANNING,
                    "ConfidenceUnavailable",
                    "the endpoint returned no token log-probabilities: confidence check off",
                )
            return False
        m.confidence_score = response.confidence
        if response.confidence >= threshold:
            return False
        if m.retry_count >= self._config.max_retries:
            self._record(
                State.PLANNING,
                "LowConfidenceAccepted",
                f"confidence {response.confidence:.2f} < {threshold}; "
                f"all {self._config.max_retries} reconsiderations used",
            )
            return False
        m.retry_count += 1
        m.assistant_text = response.content or ""
        self._reflect_reason = "low confidence"
        return True

    async def _reflect(self) -> Event:
        """Reflecting (agentsm): compress older history into a summary; after a low-confidence
        reply, also ask the model to reconsider it."""
        m = self._memory
        if self._reflect_reason == "low confidence":
            note = (
                f"Your last reply had low confidence ({m.confidence_score:.2f}, below "
                f"{self._config.confidence_threshold}). Re-read the task and the tool results; "
                "check with a tool if unsure, then reply again. "
                f"(Reconsideration {m.retry_count} of {self._config.max_retries}.)"
            )
            m.history = (*m.history, Turn(step=m.step, assistant_text=m.assistant_text, note=note))
            m.assistant_text = None
        await self._compress()
        self._reflect_reason = ""
        return Event.REFLECT_DONE

    async def _compress(self) -> None:
        m, keep = self._memory, self._config.reflection_keep_recent
        older, recent = m.history[:-keep], m.history[-keep:]
        if not older:
            self._record(State.REFLECTING, "HistoryKept", f"no turns older than the last {keep}")
            return
        unresolved = reflection.unresolved_errors(older, recent)
        model = self._config.reflection_model or self._model
        try:
            response: ModelResponse = await workflow.execute_activity_method(
                ModelActivities.call_model,
                reflection.summary_request(model, m.task, older),
                start_to_close_timeout=timedelta(seconds=self._config.model_timeout_seconds),
                heartbeat_timeout=timedelta(seconds=self._config.heartbeat_timeout_seconds),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2),
                summary=f"step {m.step} · reflect {model.partition(':')[2]}",
            )
            summary = (response.content or "").strip()
            m.usage = m.usage + response.usage
            m.usage_by_model = {
                **m.usage_by_model,
                model: m.usage_by_model.get(model, TokenUsage()) + response.usage,
            }
            if not summary or response.tool_calls:
                raise _NoSummary("the summary reply was empty or called tools")
            how = "summarised by the model"
        except (ActivityError, _NoSummary) as exc:
            if is_cancelled_exception(exc):
                raise
            summary = reflection.compact(older)
            how = "compacted without a model"
            detail = _failure_message(exc) if isinstance(exc, ActivityError) else str(exc)
            self._record(State.REFLECTING, "ReflectionFallback", f"summary call failed: {detail}")
        m.history = (reflection.summary_turn(older, summary, unresolved), *recent)
        self._record(
            State.REFLECTING,
            "HistoryCompressed",
            f"{len(older)} turns {how}; {len(recent)} kept verbatim; "
            f"{len(unresolved)} unresolved error(s) carried",
        )

    def _reflection_due(self) -> bool:
        every = self._config.reflect_every_n_steps
        due = bool(every) and self._memory.step % (every or 1) == 0
        if due:
            self._reflect_reason = f"every {every} steps"
        return due

    def _feedback(self, turn: Turn) -> None:
        """Planning's own note to the model (too short, blacklisted), kept in the history."""
        self._memory.history = (*self._memory.history, turn)
        self._record(State.PLANNING, "Feedback", turn.note or "blacklisted tool call(s)")

    def _plan_tools(self, response: ModelResponse) -> Event:
        m, config = self._memory, self._config
        calls = self._unique_ids(response.tool_calls)
        blacklisted = sorted({c.name for c in calls if c.name in config.blacklisted_tools})
        if blacklisted:
            # None of the response's calls run; each gets an answer so the protocol's
            # call/result pairing holds, and the model is told which tools are off limits.
            self._feedback(
                Turn(
                    step=m.step,
                    assistant_text=response.content,
                    outcomes=tuple(
                        ToolOutcome(
                            call=c,
                            observation=f"ERROR: tool {c.name} is not available in this run"
                            if c.name in blacklisted
                            else "ERROR: not run, because another call in the same response "
                            "used a tool that is not available",
                            success=False,
                        )
                        for c in calls
                    ),
                )
            )
            return Event.TOOL_BLACKLISTED
        m.assistant_text = response.content
        m.current_tool_calls = calls
        approvals = []
        for call in calls:
            if call.name not in config.require_approval:
                continue
            try:
                args = parse_arguments(call.name, call.arguments)
            except ToolArgumentsError:
                continue  # invalid calls never run, so nobody needs to approve them
            approvals.append(
                PendingApproval(
                    call_id=call.id,
                    tool=call.name,
                    arguments=args.model_dump(),
                    step=m.step,
                    requested_at=workflow.now(),
                )
            )
        if approvals:
            m.pending_approvals = tuple(approvals)
            return Event.HUMAN_APPROVAL_REQUIRED
        if len(calls) > 1 and config.parallel_tools:
            return Event.LLM_PARALLEL_TOOL_CALLS
        return Event.LLM_TOOL_CALL

    def _unique_ids(self, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        """Call ids address approvals and tool results, so they must be unique in the run."""
        seen = {o.call.id for turn in self._memory.history for o in turn.outcomes}
        unique = []
        for index, call in enumerate(calls):
            call_id = call.id
            if call_id in seen:
                call_id = f"{call.id}-s{self._memory.step}-{index}"
            seen.add(call_id)
            unique.append(call if call_id == call.id else call.model_copy(update={"id": call_id}))
        return tuple(unique)

    async def _wait_for_human(self) -> Event:
        m = self._memory
        if m.pending_guidance is not None:
            return await self._wait_for_guidance()
        waiting = ", ".join(f"{p.call_id} ({p.tool})" for p in m.pending_approvals)
        self._record(State.WAITING_FOR_HUMAN, "AwaitingApproval", waiting)
        workflow.set_current_details(self._details())
        # Durable: this wait survives worker restarts and lasts as long as it must.
        await workflow.wait_condition(
            lambda: all(p.decision is not None for p in m.pending_approvals)
        )
        rejected = [p for p in m.pending_approvals if p.decision is ApprovalDecision.REJECTED]
        rejected_ids = {p.call_id for p in rejected}
        call_by_id = {c.id: c for c in m.current_tool_calls}
        m.observations = tuple(
            ToolOutcome(
                call=call_by_id[p.call_id],
                observation=f"ERROR: a human rejected this call: {p.reason}",
                success=False,
            )
            for p in rejected
        )
        runnable = [c for c in m.current_tool_calls if c.id not in rejected_ids]
        if not runnable:
            return Event.HUMAN_REJECTED
        if len(runnable) > 1 and self._config.parallel_tools:
            return Event.HUMAN_APPROVED_PARALLEL
        if any(p.decision is ApprovalDecision.MODIFIED for p in m.pending_approvals):
            return Event.HUMAN_MODIFIED
        return Event.HUMAN_APPROVED

    async def _wait_for_guidance(self) -> Event:
        """A stuck run asks a human: continue with guidance for the model, or halt."""
        m = self._memory
        self._record(State.WAITING_FOR_HUMAN, "AwaitingGuidance", m.pending_guidance or "")
        workflow.set_current_details(self._details())
        await workflow.wait_condition(lambda: m.human_guidance is not None)
        guide, reason = m.human_guidance, m.pending_guidance
        m.human_guidance = None
        m.pending_guidance = None
        if guide is None or guide.halt:
            m.error = f"halted by a human: {guide.reason if guide and guide.reason else reason}"
            return Event.HUMAN_HALTED
        m.history = (*m.history, Turn(step=m.step, note=f"Guidance from a human: {guide.guidance}"))
        self._tracker.reset_after_recovery()
        self._stuck_reason = None
        return Event.HUMAN_GUIDED

    async def _act(self) -> Event:
        """Run every call not yet observed: concurrently in ParallelActing, else in order."""
        m = self._memory
        done = {o.call.id for o in m.observations}
        todo = [c for c in m.current_tool_calls if c.id not in done]
        if self._state is State.PARALLEL_ACTING:
            outcomes = list(await asyncio.gather(*(self._run_call(c) for c in todo)))
        else:
            outcomes = [await self._run_call(c) for c in todo]
        m.observations = m.observations + tuple(outcomes)
        if all(o.success for o in m.observations):
            return Event.TOOL_SUCCESS
        return Event.TOOL_FAILURE

    async def _run_call(self, call: ToolCall) -> ToolOutcome:
        config = self._config
        try:
            args = parse_arguments(call.name, call.arguments)
        except ToolArgumentsError as exc:
            return ToolOutcome(call=call, observation=f"ERROR: {exc}", success=False)
        spec = TOOLS[call.name]
        if isinstance(args, StartPhaseArgs):
            return self._start_phase_call(call, args)
        target = spec.target(args)
        if len(target) > SUMMARY_TARGET_CHARS:
            target = target[: SUMMARY_TARGET_CHARS - 1] + "…"
        canonical = call.model_copy(update={"arguments": args.model_dump_json()})
        is_command = call.name == "run_command"
        try:
            result: ToolResult = await workflow.execute_activity_method(
                ToolActivities.run_tool,
                ToolRequest(
                    call=canonical,
                    workspace=self._input.workspace,
                    policy=ToolPolicy(
                        allow_run_command=config.allow_run_command,
                        command_allowlist=config.command_allowlist,
                        command_timeout_seconds=config.command_timeout_seconds,
                        max_output_chars=config.max_observation_chars,
                    ),
                ),
                start_to_close_timeout=timedelta(
                    seconds=max(config.tool_timeout_seconds, config.command_timeout_seconds + 10)
                    if is_command
                    else config.tool_timeout_seconds
                ),
                # Only run_command runs long enough to heartbeat; file tools finish in
                # milliseconds and would trip a heartbeat timeout they never feed.
                heartbeat_timeout=(
                    timedelta(seconds=config.heartbeat_timeout_seconds) if is_command else None
                ),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    maximum_interval=timedelta(seconds=30),
                    maximum_attempts=config.tool_max_attempts,
                ),
                summary=f"step {self._memory.step} · {call.name} {target}",
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return ToolOutcome(
                call=call,
                observation=f"ERROR: {call.name} failed: {_failure_message(exc)}",
                success=False,
            )
        return ToolOutcome(
            call=call,
            observation=_cut(result.output, config.max_observation_chars),
            success=result.success,
            mutated_paths=result.mutated_paths,
            # Progress tracking tells a real change from the same content written again by
            # these hashes. Runs recorded before they were carried keep replaying without.
            content_hashes=result.content_hashes if workflow.patched(CARRY_CONTENT_HASHES) else {},
        )

    def _start_phase_call(self, call: ToolCall, args: StartPhaseArgs) -> ToolOutcome:
        """The start_phase tool changes only the run's own state: no activity needed."""
        current = self._tracker.summary(workflow.now(), self._started_at).current_phase or 0
        if self._pending_phase is not None:
            error = "ERROR: only one start_phase call per step"
        elif args.number is not None and args.number <= current:
            error = f"ERROR: phase {args.number} is not after the current phase {current}"
        else:
            self._pending_phase = args
            number = args.number or current + 1
            return ToolOutcome(call=call, observation=f"phase {number} started", success=True)
        return ToolOutcome(call=call, observation=error, success=False)

    async def _observe(self) -> Event:
        """Commit the results to history, then run Nexora's progress check on them."""
        m = self._memory
        by_id = {o.call.id: o for o in m.observations}
        outcomes = tuple(by_id[c.id] for c in m.current_tool_calls if c.id in by_id)
        for o in outcomes:
            self._record(
                State.OBSERVING,
                "ToolObserved",
                f"{o.call.name} {'ok' if o.success else 'failed'}: {_cut(o.observation, 200)}",
            )
            self._track(o)
        repeated = self._tracker.record_message(m.assistant_text or "")
        m.history = (
            *m.history,
            Turn(step=m.step, assistant_text=m.assistant_text, outcomes=outcomes),
        )
        m.current_tool_calls = ()
        m.observations = ()
        m.pending_approvals = ()
        m.assistant_text = None
        self._last_step_mutated = any(
            o.success and o.call.name in TOOLS and TOOLS[o.call.name].mutating for o in outcomes
        )

        stuck = self._tracker.check() or repeated
        if stuck:
            self._stuck_reason = stuck
            self._record(State.OBSERVING, "Stuck", stuck)
            workflow.logger.warning("agent.stuck", extra={"reason": stuck, "step": m.step})
            return Event.STUCK
        if self._tracker.should_report():
            self._report_progress()
        if self._pending_phase is not None:
            return Event.PHASE_COMPLETE
        if self._last_step_mutated:
            return Event.FILES_CHANGED
        return Event.NEEDS_REFLECTION if self._reflection_due() else Event.CONTINUE

    def _track(self, outcome: ToolOutcome) -> None:
        """Feed one observed call to the progress tracker."""
        call, spec = outcome.call, TOOLS.get(outcome.call.name)
        if spec is not None and spec.in_workflow:
            return  # phase bookkeeping is not work
        target = reflection.target(call)
        self._tracker.record_tool_call(
            call.name,
            target,
            success=outcome.success,
            error=None if outcome.success else outcome.observation,
            mutating=spec.mutating if spec else False,
            content_hash=_content_hash(outcome, target),
        )
        if call.name == "run_command" and any(t in target for t in self._config.test_commands):
            self._tracker.record_test(target, passed=outcome.success, output=outcome.observation)

    def _report_progress(self) -> None:
        progress = self._tracker.summary(workflow.now(), self._started_at)
        self._record(self._state, "Progress", progress.describe())
        workflow.logger.info("agent.progress", extra=progress.model_dump(mode="json"))

    async def _post_tools_hook(self) -> Event:
        """Loom's post-tools hook: infrastructure work after mutating tools (none built in yet)."""
        last = self._memory.history[-1] if self._memory.history else None
        changed = sorted({p for o in (last.outcomes if last else ()) for p in o.mutated_paths})
        self._record(
            State.POST_TOOLS_HOOK,
            "HookRun",
            f"changed: {', '.join(changed) if changed else '(by command)'}",
        )
        return Event.NEEDS_REFLECTION if self._reflection_due() else Event.HOOK_DONE

    async def _recover(self) -> Event:
        """Recovering (Nexora): hint the model, ask a human, or halt, per ``config.recovery``."""
        m, config, reason = self._memory, self._config, self._stuck_reason or "stuck"
        if config.recovery == "ask_human":
            m.pending_guidance = reason
            return Event.HUMAN_GUIDANCE_REQUIRED
        if config.recovery == "halt" or self._hints_given >= config.max_hints:
            m.error = f"halted: {reason}"
            if config.recovery == "hint":
                m.error += f" (still stuck after {config.max_hints} hint(s))"
            workflow.logger.warning("agent.halted", extra={"reason": m.error})
            return Event.HALT
        self._hints_given += 1
        note = (
            f"You appear to be stuck: {reason}. That approach is not working. Stop repeating it "
            "and try something different (read the file again, change the plan, or explain "
            f"what blocks you). Hint {self._hints_given} of {config.max_hints}."
        )
        m.history = (*m.history, Turn(step=m.step, note=note))
        self._tracker.reset_after_recovery()
        self._stuck_reason = None
        return Event.RECOVERED

    async def _phase_transition(self) -> Event:
        """PhaseTransition (Nexora): complete the current phase, start the next, reset tracking."""
        args, self._pending_phase = self._pending_phase, None
        if args is None:  # only a start_phase call leads here
            raise ApplicationError(
                "PhaseTransition without a phase to start", type="InvalidTransition"
            )
        current = self._tracker.summary(workflow.now(), self._started_at).current_phase
        number = args.number or (current or 0) + 1
        finished = self._tracker.start_phase(
            number, args.description, workflow.now(), total=args.total_phases
        )
        if finished is not None:
            self._record(
                State.PHASE_TRANSITION,
                "PhaseCompleted",
                f"phase {finished.number}: {len(finished.files_changed)} files, "
                f"{finished.tests_passed} tests passed, {len(finished.blockers)} blockers, "
                f"{finished.duration_seconds:.0f}s",
            )
            workflow.logger.info("agent.phase.completed", extra=finished.model_dump(mode="json"))
        self._record(State.PHASE_TRANSITION, "PhaseStarted", f"phase {number}: {args.description}")
        return Event.FILES_CHANGED if self._last_step_mutated else Event.PHASE_STARTED

    # ----------------------------------------------------------------------------------------
    # Human approval. Two doors to the same checks:
    # - signals `approve` / `reject` / `modify` take small plain JSON bodies, so the stock
    #   `temporal workflow signal` works. They are validated here, not by the data converter
    #   (which would drop a malformed signal with only a worker log line); a refused signal is
    #   recorded in the trace and in `state.last_event`, and the run keeps waiting.
    # - the update `decide` runs the same checks in its validator, so a client (starter.py)
    #   hears "refused, because ..." synchronously, and a refused update leaves no history.
    # ----------------------------------------------------------------------------------------

    @workflow.signal
    def approve(self, body: Any = None) -> None:
        """``{"call_id": "..."}``: run the pending call as the model asked."""
        self._signal("approve", body)

    @workflow.signal
    def reject(self, body: Any = None) -> None:
        """``{"call_id": "...", "reason": "..."}``: do not run it; the reason is the observation."""
        self._signal("reject", body)

    @workflow.signal
    def modify(self, body: Any = None) -> None:
        """``{"call_id": "...", "arguments": {...}}``: run it with these (checked) arguments."""
        self._signal("modify", body)

    @workflow.signal
    def guide(self, body: Any = None) -> None:
        """``{"guidance": "..."}`` or ``{"halt": true, "reason": "..."}`` for a stuck run."""
        try:
            signal = self._check_guide(body)
        except _Refused as exc:
            self._record(self._state, "SignalRefused", f"guide: {exc}")
            return
        self._apply_guide(signal)

    @workflow.update
    def decide(self, decision: Decision) -> PendingApproval | None:
        """Approve, reject or modify one pending call (returns it as decided), or guide a
        stuck run (returns nothing)."""
        if decision.action == "guide":
            self._apply_guide(self._guide_or_refuse(decision))
            return None
        return self._apply(decision.action, self._check_or_refuse(decision))

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        # Raised in the validator, the refusal rejects the update: nothing reaches the history.
        if decision.action == "guide":
            self._guide_or_refuse(decision)
        else:
            self._check_or_refuse(decision)

    def _guide_or_refuse(self, decision: Decision) -> GuideSignal:
        try:
            return self._check_guide(decision.body())
        except _Refused as exc:
            raise ApplicationError(str(exc), type="DecisionRefused", non_retryable=True) from None

    def _check_guide(self, body: Any) -> GuideSignal:
        try:
            signal = GuideSignal.model_validate({} if body is None else body)
        except ValidationError as exc:
            raise _Refused(_brief(exc)) from None
        if self._state is not State.WAITING_FOR_HUMAN or self._memory.pending_guidance is None:
            raise _Refused("the run is not waiting for guidance")
        return signal

    def _apply_guide(self, signal: GuideSignal) -> None:
        self._memory.human_guidance = signal
        self._record(self._state, "SignalReceived", "guide: halt" if signal.halt else "guide")

    def _check_or_refuse(self, decision: Decision) -> _Checked:
        try:
            return self._check(decision.action, decision.body())
        except _Refused as exc:
            raise ApplicationError(str(exc), type="DecisionRefused", non_retryable=True) from None

    def _signal(self, action: str, body: Any) -> None:
        try:
            checked = self._check(action, body)
        except _Refused as exc:
            self._record(self._state, "SignalRefused", f"{action}: {exc}")
            workflow.logger.warning(
                "agent.signal.refused", extra={"signal": action, "why": str(exc)}
            )
            return
        self._apply(action, checked)

    def _check(self, action: str, body: Any) -> _Checked:
        """Everything that could refuse a decision, without changing anything."""
        schema = _DECISION_BODIES[action]
        try:
            signal = schema.model_validate({} if body is None else body)
        except ValidationError as exc:
            raise _Refused(_brief(exc)) from None
        pending = self._find_pending(signal.call_id)
        if isinstance(signal, ApproveSignal):
            return _Checked(pending, {"decision": ApprovalDecision.APPROVED})
        if isinstance(signal, RejectSignal):
            return _Checked(
                pending, {"decision": ApprovalDecision.REJECTED, "reason": signal.reason}
            )
        try:
            args = parse_arguments(pending.tool, signal.arguments)
        except ToolArgumentsError as exc:
            raise _Refused(str(exc)) from None
        return _Checked(
            pending,
            {"decision": ApprovalDecision.MODIFIED, "arguments": args.model_dump()},
            new_arguments=args.model_dump_json(),
        )

    def _apply(self, action: str, checked: _Checked) -> PendingApproval:
        m, call_id = self._memory, checked.pending.call_id
        if checked.new_arguments is not None:
            m.current_tool_calls = tuple(
                c.model_copy(update={"arguments": checked.new_arguments}) if c.id == call_id else c
                for c in m.current_tool_calls
            )
        decided = checked.pending.model_copy(update=checked.update)
        m.pending_approvals = tuple(
            decided if p.call_id == call_id else p for p in m.pending_approvals
        )
        self._record(self._state, "SignalReceived", f"{action} {call_id}")
        workflow.set_current_details(self._details())
        return decided

    def _find_pending(self, call_id: str | None) -> PendingApproval:
        waiting = [p for p in self._memory.pending_approvals if p.decision is None]
        if self._state is not State.WAITING_FOR_HUMAN or not waiting:
            raise _Refused("no tool call is waiting for approval")
        if call_id is None:
            if len(waiting) > 1:
                ids = ", ".join(p.call_id for p in waiting)
                raise _Refused(f"several calls are waiting ({ids}); say which with call_id")
            return waiting[0]
        for p in waiting:
            if p.call_id == call_id:
                return p
        ids = ", ".join(p.call_id for p in waiting)
        raise _Refused(f"no pending call with id {call_id!r} (waiting: {ids})")

    # ----------------------------------------------------------------------------------------
    # Queries
    # ----------------------------------------------------------------------------------------

    @workflow.query
    def state(self) -> AgentStatus:
        """Where the run is: state, step, pending approvals, token usage, last event."""
        m = self._memory
        return AgentStatus(
            state=self._state.value,
            step=m.step,
            max_steps=self._config.max_steps,
            model=self._model,
            task=self._input.task,
            pending_approvals=tuple(p for p in m.pending_approvals if p.decision is None)
            if self._state is State.WAITING_FOR_HUMAN
            else (),
            usage=m.usage,
            cost_usd=self._cost(),
            token_budget=self._config.token_budget,
            confidence=m.confidence_score,
            last_event=self._last_event,
            final_answer=m.final_answer,
            error=m.error,
            progress=self._tracker.summary(workflow.now(), self._started_at),
            stuck=m.pending_guidance or self._stuck_reason,
        )

    @workflow.query
    def progress(self) -> ProgressSummary:
        """Nexora's totals: phases completed / total, files, tool calls, tests, elapsed."""
        return self._tracker.summary(workflow.now(), self._started_at)

    @workflow.query
    def trace(self) -> Trace:
        """The append-only log: step, state, event, data, timestamp."""
        return Trace(entries=tuple(self._trace))


def _content_hash(outcome: ToolOutcome, target: str) -> str | None:
    """The hash the tool activity computed for ``target``.

    The activity keys it by the path as resolved in the workspace (``./a.md`` is ``a.md``), so a
    call that touched exactly one path uses that path's hash whatever spelling the model chose.
    """
    hashes = outcome.content_hashes
    if target in hashes:
        return hashes[target]
    return next(iter(hashes.values())) if len(hashes) == 1 else None


class _NoSummary(Exception):
    """The summary model answered, but not with a summary."""


class _Refused(Exception):
    """A decision the run cannot take: malformed, or not fitting its current situation."""


@dataclass(frozen=True)
class _Checked:
    pending: PendingApproval
    update: dict[str, Any]
    new_arguments: str | None = None


_DECISION_BODIES: dict[str, type[ApproveSignal | RejectSignal | ModifySignal]] = {
    "approve": ApproveSignal,
    "reject": RejectSignal,
    "modify": ModifySignal,
}


def _brief(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors()
    )
