"""A signal whose payload cannot be decoded (an encoding nobody knows) is a refusal the trace and
``status`` show, never a signal that vanishes with only a worker log line."""

from __future__ import annotations

import json

import pytest

from tests.support.harness import Harness
from tests.support.threads import answered, start_thread
from treadle.workflows.agent.messages.models import ApproveSignal, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from the model"}}


@pytest.mark.parametrize("name", ["approve", "reject", "aprove"])
async def test_an_undecodable_signal_is_refused_in_the_trace_and_status(
    harness: Harness, name: str
) -> None:
    """``temporal workflow signal --input-meta encoding=foo/bar``: refused, saying the body
    cannot be decoded and its encoding (or that the name is unknown); the call still waits."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    done = await harness.temporal(
        "workflow", "signal", "--workflow-id", handle.id, "--name", name,
        "--input", json.dumps({"reason": "no"}), "--input-meta", "encoding=foo/bar",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [refusal] = await harness.trace_events(handle, "SignalRefused", 1)
    if name == "aprove":
        assert refusal.data.startswith("aprove: unknown signal"), refusal.data
    else:
        assert refusal.data == f"{name}: the body cannot be decoded (encoding 'foo/bar')"
    status = await handle.query(AgentWorkflow.state)
    assert status.state == "WaitingForHuman"
    assert status.last_event == f"SignalRefused: {refusal.data}"
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    assert (await handle.result()).status is RunStatus.DONE
    assert (harness.workspace / "notes.md").exists()


async def test_an_undecodable_message_is_refused_to_its_sender(harness: Harness) -> None:
    """``send`` with an undecodable input: the update is refused in one line naming the
    encoding, and the thread still takes the next message."""
    model = harness.script({"content": "first"}, {"content": "second"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    refused = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "send",
        "--input", json.dumps({"text": "a"}), "--input-meta", "encoding=foo/bar",
    )  # fmt: skip
    assert refused.returncode != 0
    assert "send: the input cannot be decoded (encoding 'foo/bar')" in refused.stderr
    sent = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id,
        "--name", "send", "--input", json.dumps({"text": "again"}),
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert (await answered(harness, handle, 2)).final_answer == "second"
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()
