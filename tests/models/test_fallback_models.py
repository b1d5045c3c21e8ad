"""Fallback models: when the run's model fails a call after all its attempts with retryable
errors, the next model of ``fallback_models`` takes it; status, trace, usage and cost name the
model that served. A refusal is no outage and falls back to nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.harness import Harness
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

DOWN: dict[str, Any] = {"content": "never seen", "errors": [{"status": 503}] * 4}


@pytest.mark.replay_corpus
async def test_a_model_whose_endpoint_is_down_hands_the_call_to_the_next(
    harness: Harness,
) -> None:
    """Every attempt of the first model gets a 503: the second model answers, and the run
    says so in its trace, status, usage and cost."""
    down = harness.script(DOWN)
    backup = harness.script({"content": "Answered by the backup."})
    handle = await harness.start(
        down,
        fallback_models=[backup],
        model_max_attempts=2,
        prices={backup: {"prompt": 1.0, "completion": 2.0}},
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.answer == "Answered by the backup."
    assert len(harness.requests(down)) == 2  # its attempts, then no more
    assert len(harness.requests(backup)) == 1
    assert set(result.usage_by_model) == {backup}
    assert result.usage_by_model[backup] == result.usage
    assert result.cost_usd is not None and result.cost_usd > 0
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.model == down
    assert status.served_by == backup
    assert set(status.usage_by_model) == {backup}
    trace = await handle.query(AgentWorkflow.trace)
    [fallback] = [e for e in trace.entries if e.event == "ModelFallback"]
    assert fallback.data.startswith(f"{down} failed after its attempts")
    assert fallback.data.endswith(f"{backup} takes the call")
    [reply] = [e for e in trace.entries if e.event == "ModelResponse"]
    assert reply.data.startswith(f"by fallback model {backup}")


async def test_every_step_begins_with_the_runs_own_model(harness: Harness) -> None:
    """A fallback takes one call: the next step asks the run's model first again."""
    flaky = harness.script(
        DOWN | {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "Back, and done."},
    )
    backup = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "the backup should not be asked twice"},
    )
    handle = await harness.start(flaky, fallback_models=[backup], model_max_attempts=2)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.answer == "Back, and done."
    assert len(harness.requests(backup)) == 1
    assert set(result.usage_by_model) == {flaky, backup}
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.served_by == flaky


async def test_a_refused_request_does_not_fall_back(harness: Harness) -> None:
    """A 400 is the request's fault, not an outage: the run ends as without a fallback."""
    refused = harness.script({"content": "no", "errors": [{"status": 400}]})
    backup = harness.script({"content": "should not be asked"})
    handle = await harness.start(refused, fallback_models=[backup])
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert harness.requests(backup) == []


async def test_the_last_models_failure_ends_the_run(harness: Harness) -> None:
    """When every model of the list is down, the run ends with the last one's failure."""
    first, second = harness.script(DOWN), harness.script(DOWN)
    handle = await harness.start(first, fallback_models=[second], model_max_attempts=2)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert "model call failed" in (result.error or "")
    assert len(harness.requests(first)) == len(harness.requests(second)) == 2
