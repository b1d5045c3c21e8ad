"""Planning's decisions, as pure functions: what the next model request is (or why there is
none), how a response's tool calls are checked, and what each observed call tells the progress
tracker. The workflow runs the activity and moves the state; these say what to do."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError
from temporalio.exceptions import ActivityError, ApplicationError

from treadle.workflows.agent.messages import catalogue
from treadle.workflows.agent.messages.catalogue import TOOLS, estimate_prompt_tokens
from treadle.workflows.agent.messages.config import context_window
from treadle.workflows.agent.messages.models import (
    ModelRequest,
    ModelResponse,
    TokenUsage,
    ToolCall,
    ToolOutcome,
    Turn,
)
from treadle.workflows.agent.messages.state_machine import Event, State
from treadle.workflows.agent.parts import cost_cap, typed_answers
from treadle.workflows.agent.parts.memory import AgentMemory
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.toolbox import Toolbox
from treadle.workflows.agent.parts.toolbox import (
    call_target as call_target,  # the live CLI's import
)
from treadle.workflows.agent.parts.tracker import ProgressTracker
from treadle.workflows.base import WHOLE

MAX_MODEL_INPUT_BYTES = 1_500_000
"""Temporal fails a payload over 2 MB: a request this large stops the run with a clear error.
(The run's history as a whole is bounded by continue-as-new.)"""
MIN_COMPLETION_TOKENS = 64
"""Below this much room left in the token budget, another model call is not worth making."""


@dataclass(frozen=True)
class CannotCall:
    """Why the next model call must not be made, and the event that ends the run."""

    event: Event
    reason: str


@dataclass(frozen=True)
class Planned:
    """The next model request, and the budget check's prompt estimate for it (``None``: the
    run has no budget), which ``calibrate`` compares with what the provider counted."""

    request: ModelRequest
    prompt_estimate: int | None = None


def calibrate(m: AgentMemory, usage: TokenUsage) -> None:
    """Learn how far a provider's real prompt count runs above the estimate the budget check
    made for the same request (only from usage the provider reported, not estimated)."""
    if m.prompt_estimate and usage.prompt_tokens and not usage.estimated_tokens:
        seen = -(-100 * usage.prompt_tokens // m.prompt_estimate)
        m.prompt_scale = max(m.prompt_scale, min(seen, 1_000))


def model_request(run: AgentRun) -> Planned | CannotCall:
    """The next planning request, its completion capped by what is left of the token budget
    (its prompt estimate scaled by what the provider's tokenizer reported before:
    ``calibrate``)."""
    m, config = run.memory, run.input.config
    # Not listed yet (``AgentRun.lean_start``): the loaded tools go with this call, and its
    # reply names them back for the run to record (a replay reads the recorded reply).
    listing = catalogue.loaded_names() if run.loaded_tools is None else None
    box = Toolbox(config, run.mcp, run.loaded_tools if listing is None else listing)
    head, sent, turns = m.conversation_head, m.conversation_sent, m.conversation_turns
    if head is None or turns > len(m.history):
        head, sent = None, 0
        new = m.build_messages()
    else:
        new = m.messages_of(m.history[turns:])
    request = ModelRequest(
        model=run.model,
        # A stored content travels by its key alone: the preview is for the workflow's eyes.
        messages=tuple(
            msg.model_copy(update={"content": None}) if msg.content_ref else msg for msg in new
        ),
        conversation=head,
        conversation_messages=sent,
        tools=box.offered_names(),
        tool_schemas=tuple(tool.schema() for tool in box.offered_mcp()),
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        logprobs=config.confidence_threshold is not None,
        context_window_tokens=context_window(config, run.model),
        view_from=m.view_from,
        view_summary_at=m.view_summary_at,
        loaded_tools=listing,
    )
    request = typed_answers.ask(config, request)
    # Measured whole, as recorded runs measured it (the wire form is leaner, never larger).
    size = len(request.model_dump_json(context=WHOLE, exclude={"loaded_tools"}))
    if size > MAX_MODEL_INPUT_BYTES:
        return CannotCall(
            Event.FATAL_ERROR,
            f"the conversation ({size // 1024} KiB) no longer fits in one model call's input "
            f"(limit {MAX_MODEL_INPUT_BYTES // 1024} KiB); lower max_observation_chars or split "
            "the task",
        )
    if config.token_budget is None and config.max_cost_usd is None:
        return Planned(request)
    plain = estimate_prompt_tokens(m.build_messages(), request.tools) + sum(
        schema.prompt_chars() // 4 + 10 for schema in request.tool_schemas
    )
    estimate = -(-plain * m.prompt_scale // 100)
    max_tokens = config.max_tokens
    if config.token_budget is not None:
        cap = config.token_budget - m.usage.total_tokens - estimate
        if cap < MIN_COMPLETION_TOKENS:
            return CannotCall(
                Event.BUDGET_EXCEEDED,
                f"token budget exhausted: {m.usage.total_tokens} of {config.token_budget} "
                f"tokens used, and the next call needs about {estimate} prompt tokens",
            )
        max_tokens = min(cap, max_tokens or cap)
    room = cost_cap.completion_room(run, estimate)
    if isinstance(room, str):
        return CannotCall(Event.FATAL_ERROR, room)
    if room is not None:
        if room < MIN_COMPLETION_TOKENS:
            return CannotCall(Event.BUDGET_EXCEEDED, cost_cap.exhausted(run, estimate))
        max_tokens = min(room, max_tokens or room)
    # The cap keeps one call from overshooting what is left.
    return Planned(request.model_copy(update={"max_tokens": max_tokens}), plain)


OUTPUT_CUT = "ModelOutputCut"
"""The type of a model call's failure when its reply was cut at its output limit (its first
detail: the reply's usage)."""


def cut_reply(run: AgentRun, request: ModelRequest, exc: ActivityError) -> CannotCall | None:
    """A reply cut at its output limit: its tokens are spent all the same, so they count in the
    run's usage, cost and budget; the run ends "budget exhausted" when the budget (or the cost
    cap) set that limit, else with the cut. ``None`` for any other failure."""
    cause = exc.cause
    if not (isinstance(cause, ApplicationError) and cause.type == OUTPUT_CUT):
        return None
    usage = TokenUsage()
    if cause.details and isinstance(cause.details[0], dict):
        # A worker of another version may send other fields: the cut is still reported.
        with contextlib.suppress(ValidationError):
            usage = TokenUsage.model_validate(cause.details[0])
    run.spend(request.model, usage)
    m, config = run.memory, run.input.config
    limit = request.max_tokens
    capped = limit is not None and (config.max_tokens is None or limit < config.max_tokens)
    if capped and config.token_budget is not None:
        return CannotCall(
            Event.BUDGET_EXCEEDED,
            f"token budget exhausted: the reply was cut at the {limit} tokens the budget left "
            f"for it ({m.usage.total_tokens} of {config.token_budget} tokens used)",
        )
    if capped and config.max_cost_usd is not None:
        return CannotCall(
            Event.BUDGET_EXCEEDED,
            f"cost cap reached: the reply was cut at the {limit} tokens the cap left for it "
            f"(${cost_cap.spent(run):.6f} of ${config.max_cost_usd:.6f} spent)",
        )
    return CannotCall(Event.FATAL_ERROR, f"model call failed: {cause.message}")


def describe_response(response: ModelResponse, fallback: str | None = None) -> str:
    """One trace line for a model reply: calls, tokens, and what the provider said about it
    (why it stopped, which model served it, its confidence), which would otherwise be lost;
    ``fallback`` names the fallback model that took the call."""
    parts = [f"{len(response.tool_calls)} tool call(s)", f"{response.usage.total_tokens} tokens"]
    if fallback is not None:
        parts.insert(0, f"by fallback model {fallback}")
    if response.confidence is not None:
        parts.append(f"confidence {response.confidence:.2f}")
    if response.finish_reason:
        parts.append(f"finish {response.finish_reason}")
    if response.model:
        parts.append(f"served by {response.model}")
    return ", ".join(parts)


def answer_feedback(answer: str, min_length: int) -> str | None:
    """The note that sends an empty or too-short final answer back, else ``None``."""
    if not answer:
        return "Your last reply was empty. Call a tool, or reply with the final answer as text."
    if len(answer) < min_length:
        return (
            f"Your answer was {len(answer)} characters; the final answer must be at least "
            f"{min_length}. Give the complete answer."
        )
    return None


def unique_ids(
    calls: tuple[ToolCall, ...], history: tuple[Turn, ...], step: int
) -> tuple[ToolCall, ...]:
    """Call ids address approvals and tool results, so they must be unique in the run."""
    seen = {o.call.id for turn in history for o in turn.outcomes}
    unique = []
    for index, call in enumerate(calls):
        call_id = call.id
        if call_id in seen:
            call_id = f"{call.id}-s{step}-{index}"
        seen.add(call_id)
        unique.append(call if call_id == call.id else call.model_copy(update={"id": call_id}))
    return tuple(unique)


def too_many_calls_feedback(
    response: ModelResponse, calls: tuple[ToolCall, ...], limit: int, step: int
) -> Turn | None:
    """If a reply asks for more than ``limit`` calls, the turn that answers each of them with
    an error (so call/result pairing holds), else ``None``. Nothing of the reply runs."""
    if len(calls) <= limit:
        return None
    error = (
        f"ERROR: not run: the reply asked for {len(calls)} tool calls and at most {limit} run "
        "per step; ask for fewer at a time"
    )
    return Turn(
        step=step,
        assistant_text=response.content,
        assistant_ref=response.content_ref,
        assistant_chars=response.content_chars,
        outcomes=tuple(ToolOutcome.of(c, error, success=False) for c in calls),
    )


def blacklist_feedback(
    response: ModelResponse, calls: tuple[ToolCall, ...], blacklist: Collection[str], step: int
) -> Turn | None:
    """If any call uses a blacklisted tool, the turn that answers all of them, else ``None``.

    None of the response's calls run; each gets an answer so the protocol's call/result
    pairing holds, and the model is told which tools are off limits.
    """
    blacklisted = {c.name for c in calls if c.name in blacklist}
    if not blacklisted:
        return None
    return Turn(
        step=step,
        assistant_text=response.content,
        assistant_ref=response.content_ref,
        assistant_chars=response.content_chars,
        outcomes=tuple(
            ToolOutcome.of(
                c,
                f"ERROR: tool {c.name} is not available in this run"
                if c.name in blacklisted
                else "ERROR: not run, because another call in the same response used a tool "
                "that is not available",
                success=False,
            )
            for c in calls
        ),
    )


def track(
    tracker: ProgressTracker,
    outcome: ToolOutcome,
    test_commands: Collection[str],
    *,
    target: str,
    mutating: bool,
) -> None:
    """Feed one observed call to Nexora's progress tracker: ``target`` and ``mutating`` as the
    toolbox checked and knows them."""
    call, spec = outcome.call, TOOLS.get(outcome.call.name)
    if spec is not None and spec.in_workflow:
        # Phase bookkeeping is not work; what a sub-agent changed in the run's workspace is
        # (its ``delegate`` call names the paths its merged snapshot changed).
        for path in outcome.mutated_paths:
            tracker.record_tool_call(call.name, path, success=True, mutating=True)
        return
    digest = content_hash(outcome, target)
    if digest is None and not mutating and outcome.success:
        digest = observation_hash(outcome)
    tracker.record_tool_call(
        call.name,
        target,
        success=outcome.success,
        error=None if outcome.success else outcome.observation,
        mutating=mutating,
        content_hash=digest,
    )
    if call.name == "run_command" and any(t in target for t in test_commands):
        tracker.record_test(target, passed=outcome.success, output=outcome.observation)


def content_hash(outcome: ToolOutcome, target: str) -> str | None:
    """The hash the tool activity computed for ``target``.

    The activity keys it by the path as resolved in the workspace (``./a.md`` is ``a.md``), so a
    call that touched exactly one path uses that path's hash whatever spelling the model chose.
    """
    hashes = outcome.content_hashes
    if target in hashes:
        return hashes[target]
    return next(iter(hashes.values())) if len(hashes) == 1 else None


def observation_hash(outcome: ToolOutcome) -> str:
    """What a read saw, for telling a new read from a re-read: its stored blob's reference when
    the observation was too long to keep inline (the reference names the content), else the text."""
    seen = outcome.observation_ref or outcome.observation
    return hashlib.sha256(seen.encode()).hexdigest()[:16]


def confidence_is_low(run: AgentRun, response: ModelResponse, now: datetime) -> bool:
    """agentsm's confidence check, on the endpoint's own token log-probabilities: ``True``
    when the reply should be reconsidered (and the retry budget allows it)."""
    m, config = run.memory, run.input.config
    threshold = config.confidence_threshold
    if threshold is None:
        return False
    if response.confidence is None:
        if not run.flags.confidence_unavailable_noted:
            run.flags.confidence_unavailable_noted = True
            run.record(
                State.PLANNING,
                "ConfidenceUnavailable",
                "the endpoint returned no token log-probabilities: confidence check off",
                now,
            )
        return False
    m.confidence_score = response.confidence
    if response.confidence >= threshold:
        return False
    if m.retry_count >= config.max_retries:
        run.record(
            State.PLANNING,
            "LowConfidenceAccepted",
            f"confidence {response.confidence:.2f} < {threshold}; "
            f"all {config.max_retries} reconsiderations used",
            now,
        )
        return False
    m.retry_count += 1
    m.assistant_text = response.content or ""
    m.assistant_ref, m.assistant_chars = response.content_ref, response.content_chars
    run.flags.reflect_reason = "low confidence"
    return True
