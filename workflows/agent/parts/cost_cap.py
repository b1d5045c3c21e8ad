"""The cost cap (``config.max_cost_usd``): what a run (its family included) has spent in US
dollars, what is left, and how many completion tokens the next call may ask for so that it
cannot overshoot. Pure functions of ``AgentRun``; ``planning`` stops the run, ``delegation``
shares what is left with children, as the token budget does."""

from __future__ import annotations

from collections.abc import Iterable

from treadle.workflows.agent.messages.config import AgentConfig, Price
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import run_cost

MILLION = 1_000_000


def spent(run: AgentRun) -> float:
    """Dollars spent: the run's own calls, its ended children's, and the whole shares of
    children that ended without saying what they spent."""
    return run_cost(run) or 0.0


def left(run: AgentRun) -> float | None:
    """Dollars the run may still spend or give out: its cap, less what it spent, less what its
    running children hold. ``None``: no cap."""
    cap = run.input.config.max_cost_usd
    if cap is None:
        return None
    return max(0.0, cap - spent(run) - run.family.reserved_cost())


def worst_price(config: AgentConfig, models: Iterable[str]) -> Price | str:
    """The highest prompt and completion prices among ``models`` (a call may fall back to any
    of them), or why the cap cannot be kept: a model without a price."""
    prices = []
    for model in models:
        price = config.prices.get(model)
        if price is None:
            return (
                f"max_cost_usd is set but model {model} has no price in prices: its calls "
                "cannot be kept under the cost cap"
            )
        prices.append(price)
    return Price(
        prompt=max((p.prompt for p in prices), default=0.0),
        completion=max((p.completion for p in prices), default=0.0),
    )


def completion_room(run: AgentRun, prompt_tokens: int) -> int | str | None:
    """How many completion tokens the next model call may ask for under the cost cap, after
    ``prompt_tokens`` (the estimate of its prompt; 0 or less: none at all); ``None`` when the
    cap limits nothing (no cap, or completions cost nothing and some money is left); or why
    the call must not be made (a model without a price)."""
    remaining = left(run)
    if remaining is None:
        return None
    config = run.input.config
    price = worst_price(config, (run.model, *config.fallback_models))
    if isinstance(price, str):
        return price
    room = remaining - prompt_tokens * price.prompt / MILLION
    if room <= 0:
        return 0
    if price.completion == 0:
        return None
    return int(room * MILLION / price.completion)


def exhausted(run: AgentRun, prompt_tokens: int) -> str:
    """Why the run stops at its cost cap."""
    cap = run.input.config.max_cost_usd or 0.0
    return (
        f"cost cap reached: ${spent(run):.6f} of ${cap:.6f} spent, and the next call needs "
        f"about {prompt_tokens} prompt tokens"
    )
