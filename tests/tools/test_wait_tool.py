"""The ``wait`` tool: a run parked on a durable timer, shown as ``Waiting`` with when it wakes,
that continues on time, or early on a ``wake`` signal, guidance or a thread's user message."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.testing import WorkflowEnvironment

from tests.support.harness import Harness, run_to_end_on_time_skipping, tool_messages
from tests.support.threads import start_thread
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentResult,
    AgentStatus,
    Decision,
    RunStatus,
    UserMessage,
)
from treadle.workflows.agent.workflow import AgentWorkflow


def _wait(**arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "wait", "arguments": arguments}]}


def _ended(trace_data: list[str]) -> str:
    return next(d for d in trace_data if d.startswith("waited"))


async def test_a_long_wait_sleeps_on_a_timer_and_wakes_on_time(
    time_skipping: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A day-long wait on the time-skipping server: the run sleeps a day of server time on one
    timer, then continues, and the model reads that it woke on time."""
    with ScriptedModelServer() as models:
        name, result, trace = await run_to_end_on_time_skipping(
            time_skipping,
            models,
            tmp_path,
            [_wait(seconds=86_400, reason="check the CI tomorrow"), {"content": "CI checked"}],
        )
        second = models.requests_for(name)[1].body
    assert result.status is RunStatus.DONE, result
    assert tool_messages(second)[0]["content"] == "waited 86400s: woke on time"
    started = next(e for e in trace.entries if e.event == "WaitStarted")
    ended = next(e for e in trace.entries if e.event == "WaitEnded")
    assert "check the CI tomorrow" in started.data
    assert ended.timestamp - started.timestamp >= timedelta(days=1)
    moves = [e.data for e in trace.entries if "->" in e.data]
    assert "Acting -> Waiting" in moves and "Waiting -> Acting" in moves


async def test_a_wait_is_bounded_by_max_wait_seconds(
    time_skipping: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A wait longer than ``max_wait_seconds`` is shortened to it, and the model is told."""
    with ScriptedModelServer() as models:
        name, result, _ = await run_to_end_on_time_skipping(
            time_skipping,
            models,
            tmp_path,
            [_wait(until="2999-01-01T00:00:00Z", reason="a long time"), {"content": "ok"}],
            max_wait_seconds=600,
        )
        second = models.requests_for(name)[1].body
    assert result.status is RunStatus.DONE, result
    assert tool_messages(second)[0]["content"] == (
        "waited 600s: woke on time (the wait was shortened to the run's maximum of 600s)"
    )


async def test_a_wake_signal_ends_the_wait_early(harness: Harness) -> None:
    """``Waiting`` in status with when it wakes; a ``wake`` signal ends it, and says why."""
    model = harness.script(_wait(seconds=3_600, reason="CI"), {"content": "done"})
    handle = await harness.start(model)
    status: AgentStatus = await harness.wait_for_state(handle, "Waiting")
    assert status.wakes_at is not None
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**State:** Waiting" in metadata.current_details
    assert f"**Waiting until {status.wakes_at.isoformat()}: CI**" in metadata.current_details
    await handle.signal(AgentWorkflow.wake, {"reason": "the build finished"})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    observed = tool_messages(harness.requests(model)[1])[0]["content"]
    assert observed.endswith("woke early: woken by a wake signal: the build finished"), observed


async def test_guidance_ends_the_wait_and_the_model_reads_it(harness: Harness) -> None:
    """A ``guide`` signal to a waiting run wakes it; its guidance is the call's result."""
    model = harness.script(_wait(seconds=3_600, reason="CI"), {"content": "done"})
    handle = await harness.start(model)
    await harness.wait_for_state(handle, "Waiting")
    await handle.signal(AgentWorkflow.guide, {"guidance": "stop waiting, CI is green"})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    observed = tool_messages(harness.requests(model)[1])[0]["content"]
    assert observed.endswith("woke early: guidance from a human: stop waiting, CI is green")


async def test_a_user_message_ends_a_threads_wait(harness: Harness) -> None:
    """In a thread, the user's next message wakes the wait (and is answered next)."""
    model = harness.script(
        _wait(seconds=3_600, reason="CI"), {"content": "first"}, {"content": "second"}
    )
    handle = await start_thread(harness, model, task="Check the CI.")
    await harness.wait_for_state(handle, "Waiting")
    await handle.execute_update(AgentWorkflow.send, UserMessage(text="any news?"))
    await harness.wait_for_state(handle, "WaitingForUserInput")
    observed = tool_messages(harness.requests(model)[1])[0]["content"]
    assert "woke early: a user message arrived (queued): any news?" in observed


async def test_wake_without_a_wait_is_refused_in_the_trace(harness: Harness) -> None:
    """A ``wake`` signal to a run that is not waiting is a trace line, not a failure."""
    model = harness.script({"content": "hello"})
    handle = await start_thread(harness, model, task="Check the CI.")
    await harness.wait_for_state(handle, "WaitingForUserInput")
    await handle.signal(AgentWorkflow.wake)
    refused = await harness.trace_events(handle, "SignalRefused", 1)
    assert refused[0].data == "wake: the run is not waiting (no wait tool call)"
    await handle.execute_update(AgentWorkflow.close)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE


async def test_bad_wait_arguments_are_the_calls_error(harness: Harness) -> None:
    """Both seconds and until (or neither) is an error observation; nothing waits."""
    model = harness.script(
        _wait(seconds=5, until="2030-01-01T00:00:00Z", reason="x"), {"content": "ok"}
    )
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    observed = tool_messages(harness.requests(model)[1])[0]["content"]
    assert observed.startswith("ERROR:") and "exactly one of seconds and until" in observed


async def test_max_wait_seconds_zero_does_not_offer_the_tool(harness: Harness) -> None:
    """``max_wait_seconds = 0``: the tool is not offered, and a call of it is refused."""
    model = harness.script(_wait(seconds=5, reason="x"), {"content": "ok"})
    handle = await harness.start(model, max_wait_seconds=0)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    first = harness.requests(model)[0]
    offered = [t["function"]["name"] for t in first.get("tools", [])]
    assert "wait" not in offered and "read_file" in offered
    observed = tool_messages(harness.requests(model)[1])[0]["content"]
    assert observed.startswith("ERROR:") and "wait" in observed, json.dumps(observed)


async def test_guidance_through_decide_ends_the_wait(harness: Harness) -> None:
    """``starter.py guide`` (the ``decide`` update) wakes a waiting run like the signal does."""
    model = harness.script(_wait(seconds=3_600, reason="CI"), {"content": "done"})
    handle = await harness.start(model)
    await harness.wait_for_state(handle, "Waiting")
    await handle.execute_update(
        AgentWorkflow.decide, Decision(action="guide", guidance="CI is green now")
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    observed = tool_messages(harness.requests(model)[1])[0]["content"]
    assert observed.endswith("woke early: guidance from a human: CI is green now")
