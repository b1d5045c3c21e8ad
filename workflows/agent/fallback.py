"""Fallback models: a step's model call taken by the next model of the run's list when the one
before failed it after all its attempts with retryable errors (an outage, overload, timeouts).

The list is the run's model, then ``config.fallback_models`` in order; every step begins with
the run's model, so a provider that comes back serves again at once. A failure that is no
outage (a non-retryable one: a refused request, a missing key) is the run's, as without a
fallback. Each hand-over is a ``ModelFallback`` trace line; the model that answered is
``AgentRun.served_by``, spends the call's usage (its own prices) and labels its metrics.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState, is_cancelled_exception

from treadle.workflows.agent import calls
from treadle.workflows.agent.messages.models import ModelRequest, ModelResponse
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import typed_answers
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.base import failure_message

__all__ = ["call_model", "models"]

EXHAUSTED = frozenset({RetryState.MAXIMUM_ATTEMPTS_REACHED, RetryState.TIMEOUT})
"""How an activity ends when its retryable failures used up its retry policy."""


def models(run: AgentRun) -> tuple[str, ...]:
    """The models that may take a step's call, in order (each once)."""
    return tuple(dict.fromkeys((run.model, *run.input.config.fallback_models)))


async def call_model(
    run: AgentRun, request: ModelRequest, pub: Publisher
) -> tuple[str, ModelResponse]:
    """The step's model call by the first model that answers it: that model and its reply.
    Raises the last model's ``ActivityError`` when none does."""
    config, step = run.input.config, run.memory.step
    candidates = models(run)
    for index, model in enumerate(candidates):
        asked = (
            request
            if model == request.model
            else typed_answers.ask(config, request.model_copy(update={"model": model}))
        )
        try:
            response = await calls.call_model(
                config, asked, f"step {step} · model {model.partition(':')[2]}"
            )
        except ActivityError as exc:
            last = index == len(candidates) - 1
            if (
                is_cancelled_exception(exc)
                or calls.interruption(exc) is not None
                or last
                or exc.retry_state not in EXHAUSTED
            ):
                raise
            following = candidates[index + 1]
            why = f"{model} failed after its attempts: {failure_message(exc)}"
            pub.record(State.PLANNING, "ModelFallback", f"{why}; {following} takes the call")
            workflow.logger.warning(
                "agent.model.fallback", extra={"failed": model, "next": following, "step": step}
            )
            continue
        return model, response
    raise AssertionError("unreachable: the run's model is always a candidate")
