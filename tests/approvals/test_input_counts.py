"""The wrong number of inputs, from the stock ``temporal`` CLI: every update is refused in one
line that names the one JSON object it takes; every signal is a refusal in the trace and status.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.client import WorkflowHandle

from tests.support.harness import Harness
from tests.support.threads import answered, start_thread
from treadle.workflows.agent.messages.models import ApproveSignal, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from the model"}}


async def update(
    harness: Harness, handle: WorkflowHandle[Any, Any], name: str, *inputs: Any
) -> str:
    """``temporal workflow update execute`` with these inputs; returns its stderr (it fails)."""
    arguments = [a for body in inputs for a in ("--input", json.dumps(body))]
    done = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id, "--name", name, *arguments
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


async def test_updates_with_two_inputs_or_none_are_refused_with_what_they_take(
    harness: Harness,
) -> None:
    """``send`` and ``decide`` given two inputs (or none), ``close`` given one: refused with the
    shape they take, never a ``TypeError`` about positional arguments; the thread goes on."""
    model = harness.script({"content": "first"}, {"content": "second"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    before = len((await handle.fetch_history()).events)

    refused = await update(harness, handle, "send", {"text": "a"}, {"text": "b"})
    assert 'send takes one JSON object, {"text": "..."}; got 2 inputs' in refused, refused
    refused = await update(harness, handle, "send")
    assert "send takes one JSON object" in refused and "got 0 inputs" in refused, refused
    refused = await update(harness, handle, "decide", {"action": "approve"}, {"action": "reject"})
    assert "decide takes one JSON object" in refused and "got 2 inputs" in refused, refused
    refused = await update(harness, handle, "close", {"now": True})
    assert "close takes no input; got 1" in refused, refused
    refused = await update(harness, handle, "answer_query", {"query_id": "q"}, {"kind": "x"})
    assert "answer_query takes one JSON object" in refused, refused
    assert "TypeError" not in refused and "positional" not in refused

    # Refused in the validators: nothing reached the history, and the thread still answers.
    assert len((await handle.fetch_history()).events) == before
    sent = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id,
        "--name", "send", "--input", json.dumps({"text": "again"}),
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    status = await answered(harness, handle, 2)
    assert status.final_answer == "second"
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()


async def test_a_signal_with_two_inputs_is_refused_in_the_trace_and_status(
    harness: Harness,
) -> None:
    """``temporal workflow signal --name approve`` with two inputs: a refusal the trace and
    ``status`` show, and the call still waits for a decision."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    done = await harness.temporal(
        "workflow", "signal", "--workflow-id", handle.id, "--name", "approve",
        "--input", "{}", "--input", "{}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [refusal] = await harness.trace_events(handle, "SignalRefused", 1)
    assert refusal.data == "approve: approve takes one JSON body; got 2"
    status = await handle.query(AgentWorkflow.state)
    assert status.state == "WaitingForHuman"
    assert status.last_event == "SignalRefused: approve: approve takes one JSON body; got 2"
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    assert (await handle.result()).status is RunStatus.DONE
