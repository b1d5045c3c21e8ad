"""Token budgets, prices, per-task-type models and the confidence check, in real runs."""

from __future__ import annotations

import pytest

from tests.support.harness import Harness
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentResult,
    AgentStatus,
    RunStatus,
)
from treadle.workflows.agent.workflow import AgentWorkflow

LIST = {"name": "list_dir", "arguments": {}}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}


@pytest.mark.replay_corpus
async def test_budget_stops_the_run_before_a_call_that_would_exceed_it(harness: Harness) -> None:
    """With 2,500 tokens and 1,100 per step the third call is never made; the error says why."""
    model = harness.script({"tool_calls": [LIST], "usage": USAGE})
    handle = await harness.start(model, token_budget=2500)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert result.error.startswith("token budget exhausted: 2200 of 2500 tokens used")
    assert len(harness.requests(model)) == 2
    trace = await handle.query(AgentWorkflow.trace)
    assert (trace.entries[-1].state, trace.entries[-1].event) == ("Planning", "BudgetExceeded")


async def test_a_tokenizer_that_counts_above_the_estimate_never_overshoots_the_budget(
    harness: Harness,
) -> None:
    """A provider whose tokenizer counts a prompt at several times the ~4-characters-a-token
    estimate (a small vocabulary, JSON-heavy tools): the check learns the ratio from the first
    reply's real count and stops before the call that would overshoot; the plain estimate let
    the third call through and ended at 9,030 of 8,000."""
    heavy = {"prompt_tokens": 3000, "completion_tokens": 10}
    model = harness.script({"tool_calls": [LIST], "usage": heavy})
    handle = await harness.start(model, token_budget=8000)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None and result.error.startswith("token budget exhausted")
    assert result.usage.total_tokens <= 8000
    assert len(harness.requests(model)) == 2


async def test_each_call_is_capped_by_what_is_left(harness: Harness) -> None:
    """max_tokens sent to the model shrinks as the budget is spent, and respects max_tokens."""
    model = harness.script({"tool_calls": [LIST], "usage": USAGE}, {"content": "done"})
    handle = await harness.start(model, token_budget=50_000, max_tokens=30_000)
    await handle.result()
    first, second = (r["max_tokens"] for r in harness.requests(model))
    assert first == 30_000  # the config's cap is lower than what the budget leaves
    unlimited = harness.script({"tool_calls": [LIST], "usage": USAGE}, {"content": "done"})
    handle = await harness.start(unlimited, token_budget=10_000)
    await handle.result()
    first, second = (r["max_tokens"] for r in harness.requests(unlimited))
    assert first < 10_000
    assert second <= first - 1100  # the first call's 1,100 tokens are no longer available
    assert second > 0


async def test_a_reply_cut_at_its_output_limit_keeps_its_usage(harness: Harness) -> None:
    """A reply cut at its output limit is no answer, but its tokens count: in the result, in
    status and in cost (a real server reported 1,422 that status showed as 0)."""
    cut = {"prompt_tokens": 1_000_000, "completion_tokens": 422}
    model = harness.script({"content": "The first half", "finish_reason": "length", "usage": cut})
    prices = {model: {"prompt": 1.0, "completion": 1.0}}
    handle = await harness.start(model, max_tokens=422, prices=prices, tools=[])
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None and "cut at its output limit of 422 tokens" in result.error
    assert result.usage.total_tokens == 1_000_422
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.usage.total_tokens == 1_000_422
    assert result.cost_usd == status.cost_usd == 1.000422


async def test_a_reply_cut_at_the_budgets_room_ends_budget_exhausted(harness: Harness) -> None:
    """The budget set the call's output limit and the reply used it all: the run ends "token
    budget exhausted" with the cut reply's tokens counted, not "the reply was cut"."""
    model = harness.script(
        {
            "content": "A long answer that goes on",
            "finish_reason": "length",
            "usage": {"prompt_tokens": 500, "completion_tokens": 1_422},
        }
    )
    handle = await harness.start(model, token_budget=2_500, tools=[])
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert result.error.startswith("token budget exhausted: the reply was cut at the"), result.error
    assert "(1922 of 2500 tokens used)" in result.error
    assert result.usage.total_tokens == 1_922
    trace = await handle.query(AgentWorkflow.trace)
    assert (trace.entries[-1].state, trace.entries[-1].event) == ("Planning", "BudgetExceeded")


async def test_status_shows_usage_budget_and_cost(harness: Harness) -> None:
    """A price table turns usage into dollars in status; cached prompt tokens get their price."""
    model = harness.script(
        {
            "content": "done",
            "usage": {
                "prompt_tokens": 1_000_000,
                "completion_tokens": 100_000,
                "cached_tokens": 500_000,
            },
        },
    )
    prices = {model: {"prompt": 2.0, "completion": 10.0, "cached_prompt": 0.5}}
    handle = await harness.start(model, prices=prices, token_budget=10_000_000)
    result: AgentResult = await handle.result()
    # 500k fresh * $2/M + 500k cached * $0.5/M + 100k completion * $10/M = 1 + 0.25 + 1
    assert result.cost_usd == 2.25
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.cost_usd == 2.25
    assert status.token_budget == 10_000_000
    assert status.usage.total_tokens == 1_100_000


async def test_no_price_for_the_model_means_no_cost(harness: Harness) -> None:
    """Cost is None rather than a wrong number when the price table lacks the model."""
    model = harness.script({"content": "done"})
    handle = await harness.start(model, prices={"openai:other": {"prompt": 1, "completion": 1}})
    result: AgentResult = await handle.result()
    assert result.cost_usd is None


async def test_model_is_chosen_per_task_type(harness: Harness) -> None:
    """models[task_type] wins over models['default'] and the run's own model."""
    chosen = harness.script({"content": "from the calculation model"})
    other = harness.script({"content": "wrong model"})
    handle = await harness.client.start_workflow(
        AgentWorkflow.run,
        AgentInput(
            task="2+2",
            model=other,
            workspace=str(harness.workspace),
            task_type="calculation",
            config=AgentConfig(models={"calculation": chosen, "default": other}),
        ),
        id=f"task-type-{harness.task_queue}",
        task_queue=harness.task_queue,
    )
    harness.handles.append(handle)
    result: AgentResult = await handle.result()
    assert result.answer == "from the calculation model"
    assert harness.requests(other) == []
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.model == chosen


@pytest.mark.replay_corpus
async def test_low_confidence_is_reconsidered_within_the_retry_budget(harness: Harness) -> None:
    """Below the threshold the reply is sent back for reflection; a confident one is accepted."""
    model = harness.script(
        {"content": "maybe 5?", "confidence": 0.3},
        {"content": "It is 4.", "confidence": 0.95},
    )
    handle = await harness.start(model, confidence_threshold=0.7, max_retries=2)
    result: AgentResult = await handle.result()
    assert result.answer == "It is 4."
    first, second = harness.requests(model)
    assert first["logprobs"] is True
    assert second["messages"][-2] == {"role": "assistant", "content": "maybe 5?"}
    assert "low confidence (0.30" in second["messages"][-1]["content"]
    trace = await handle.query(AgentWorkflow.trace)
    moves = [(e.state, e.event) for e in trace.entries if "->" in e.data]
    assert ("Planning", "LowConfidence") in moves
    assert ("Reflecting", "ReflectDone") in moves
    assert (await handle.query(AgentWorkflow.state)).confidence == 0.95


async def test_low_confidence_is_accepted_once_the_retry_budget_is_spent(
    harness: Harness,
) -> None:
    """With max_retries=1 the second unsure reply is the answer, and the trace says so."""
    model = harness.script({"content": "unsure", "confidence": 0.2})
    handle = await harness.start(model, confidence_threshold=0.7, max_retries=1)
    result: AgentResult = await handle.result()
    assert result.answer == "unsure"
    assert len(harness.requests(model)) == 2
    events = [e.event for e in (await handle.query(AgentWorkflow.trace)).entries]
    assert "LowConfidenceAccepted" in events


async def test_confidence_check_is_off_where_the_endpoint_has_no_logprobs(
    harness: Harness,
) -> None:
    """Anthropic returns no log-probabilities: the check is off, once, and the trace says so."""
    model = harness.script({"tool_calls": [LIST]}, {"content": "done"}, provider="anthropic")
    handle = await harness.start(model, confidence_threshold=0.9)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    trace = await handle.query(AgentWorkflow.trace)
    unavailable = [e for e in trace.entries if e.event == "ConfidenceUnavailable"]
    assert len(unavailable) == 1
    assert "confidence check off" in unavailable[0].data
