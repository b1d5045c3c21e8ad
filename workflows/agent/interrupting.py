"""A thread's planning call that a user's message may cut short (``MidTurn.INTERRUPT``).

The call runs as a task beside a condition on the thread's ``interrupt`` flag. When an
``interrupt`` message comes before the call answers, the task is cancelled: the model activity
(asked with ``interruptible``, and waited for: ``WAIT_CANCELLATION_COMPLETED``) stops reading
the reply and answers with what the model had said so far (``calls.interruption``). A call that
answered before the cancellation reached it keeps its answer: the message then joins the turn
as a steered one does, so nothing is lost and nothing is done twice.

What the cut call spent counts toward the run's usage, cost and budget as far as its stream
reported it before the cut (``spend``): an Anthropic stream reports its input tokens as it
starts, an OpenAI-compatible one its usage only in its last chunk, so a cut OpenAI call's
tokens are usually unknown. The trace says which; an unknown count is never estimated.

Deterministic: the task and the condition are the workflow's own (``workflow.wait_condition``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from treadle.workflows import telemetry
from treadle.workflows.agent import calls, fallback
from treadle.workflows.agent.messages.models import ModelRequest, ModelResponse, TokenUsage
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun

__all__ = ["INTERRUPTED_USAGE_PATCH", "Interrupted", "call_model", "spend"]


INTERRUPTED_USAGE_PATCH = "interrupted-call-usage"
"""Runs from before it did not count a cut call's reported tokens: they replay without."""


@dataclass(frozen=True)
class Interrupted:
    """The call was cut by a user's message; ``said`` is its reply so far (may be empty)."""

    said: str
    usage: TokenUsage | None = None
    """The tokens its stream reported before the cut; ``None``: it reported none."""


async def call_model(
    run: AgentRun, request: ModelRequest, pub: Publisher
) -> tuple[str, ModelResponse] | Interrupted:
    """The step's model call (``fallback.call_model``); in a thread, cut short by an
    ``interrupt`` message that arrives before it answers."""
    if not run.input.thread:
        return await fallback.call_model(run, request, pub)
    asked = request.model_copy(update={"interruptible": True})
    call = asyncio.create_task(fallback.call_model(run, asked, pub))
    try:
        await workflow.wait_condition(lambda: call.done() or run.thread.interrupt)
    except asyncio.CancelledError:
        call.cancel()  # the run itself is cancelled: so is its call
        raise
    if call.done():
        return call.result()
    call.cancel()
    try:
        return await call
    except ActivityError as exc:
        said = calls.interruption(exc)
        if said is not None:
            return Interrupted(said, calls.interrupted_usage(exc))
        if is_cancelled_exception(exc):  # cut before the activity started: nothing was said
            return Interrupted("")
        raise
    except asyncio.CancelledError:
        if call.cancelled():  # cut while it waited to try again (a provider's backoff)
            return Interrupted("")
        raise


def spend(run: AgentRun, request: ModelRequest, cut: Interrupted) -> str:
    """Count the cut call's reported tokens in the run's usage, cost and budget; the trace's
    words for what was counted."""
    if cut.usage is None:
        return "its tokens are unknown (the provider reported none before the cut), not counted"
    if not workflow.patched(INTERRUPTED_USAGE_PATCH):
        return "its tokens were not counted"
    run.spend(request.model, cut.usage)
    telemetry.model_spent(request.model, cut.usage, run.input.config.prices)
    return f"counted {cut.usage.total_tokens} token(s) the provider reported before the cut"
