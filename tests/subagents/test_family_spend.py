"""What a family spends: one cost cap shared like the token budget, and each child's running
spend shown by its parent while the child still runs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.family import LIST, child, observations, quick_and_hungry, starter, usage
from tests.support.harness import Harness
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

DOLLAR_A_MILLION = {"prompt": 1.0, "completion": 1.0}
"""A price that makes a million tokens cost a dollar: $0.03 is 30,000 tokens."""


@pytest.mark.replay_corpus
async def test_one_cost_cap_stops_a_child_midway_and_the_parent_at_its_limit(
    harness: Harness,
) -> None:
    """Each child gets a share of the dollars the parent has left; a child that spends its
    share stops before the call that would overshoot it, what it spent counts against the
    parent, and the family never spends more than the top run's cost cap."""
    quick, hungry, parent = quick_and_hungry(harness)
    handle = await harness.start(
        parent,
        max_cost_usd=0.03,
        prices={model: DOLLAR_A_MILLION for model in (parent, quick, hungry)},
        subagents={"models": [quick, hungry]},
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None and result.error.startswith("cost cap reached")
    assert len(harness.requests(parent)) == 2
    # $0.001 of the parent's, $0.002 of the quick child's, $0.0095 of the hungry one's, $0.017.
    assert result.cost_usd == pytest.approx(0.0295)
    assert result.cost_usd is not None and result.cost_usd <= 0.03
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.max_cost_usd == 0.03
    q, h = status.children
    # What was left ($0.029) is split between the two calls and the parent itself.
    assert q.cost_budget_usd == pytest.approx(0.029 / 3)
    assert h.cost_budget_usd == pytest.approx((0.029 - 0.029 / 3) / 2)
    assert (q.status, q.cost_usd) == ("done", pytest.approx(0.002))
    assert (h.status, h.cost_usd) == ("error", pytest.approx(0.0095))
    assert h.cost_usd is not None and h.cost_usd <= h.cost_budget_usd
    stopped: AgentResult = await child(harness, handle, "call_h").result()
    assert stopped.error is not None and stopped.error.startswith("cost cap reached")
    assert len(harness.requests(hungry)) == 1
    seen = observations(harness, parent, 1)
    assert seen["call_h"].startswith(f"ERROR: sub-agent {handle.id}.call_h ended error")
    await child(harness, handle, "call_q").result()


async def test_a_run_stops_at_its_cost_cap_and_status_shows_it(
    harness: Harness, tmp_path: Path
) -> None:
    """``run --max-cost-usd`` with prices: the run stops before the call that would pass the
    cap, and ``status`` shows the cost against it."""
    model = harness.script(
        {"tool_calls": [LIST], "usage": usage(400_000)},
        {"content": "never reached"},
    )
    config = tmp_path / "agent.yaml"
    config.write_text(f"prices:\n  {model}: {{prompt: 1.5, completion: 6}}\n")
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, f"cost-{uuid.uuid4().hex}")
    harness.handles.append(handle)
    done = await starter(
        harness, "run", "Spend", "--model", model, "--workspace", str(harness.workspace),
        "--max-cost-usd", "0.6003", "--config", str(config), "--id", handle.id, "--wait",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    result: AgentResult = await handle.result()
    assert result.error is not None
    assert result.error.startswith("cost cap reached: $0.600000 of $0.600300 spent")
    assert len(harness.requests(model)) == 1
    shown = await starter(harness, "status", handle.id)
    assert "cost:     $0.6000 of a $0.6003 cap" in shown.stdout


async def test_a_cost_cap_without_a_price_stops_before_the_first_call(harness: Harness) -> None:
    """A model without a price cannot be kept under the cap: the run says so and calls nothing."""
    model = harness.script({"content": "never reached"})
    handle = await harness.start(model, max_cost_usd=1.0)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error == (
        f"max_cost_usd is set but model {model} has no price in prices: its calls cannot be "
        "kept under the cost cap"
    )
    assert harness.requests(model) == []
