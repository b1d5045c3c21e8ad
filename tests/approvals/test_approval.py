"""Human approval by signals: approve, reject, modify, refused bodies, parallel calls, the CLI."""

from __future__ import annotations

import json

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tests.support.harness import Harness, tool_messages
from treadle.workflows.agent.messages.models import (
    AgentResult,
    AgentStatus,
    ApprovalDecision,
    ApproveSignal,
    Decision,
    ModifySignal,
    RejectSignal,
    RunStatus,
)
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from the model"}}


@pytest.mark.replay_corpus
async def test_approve_runs_the_call_as_asked(harness: Harness) -> None:
    """A call that needs approval waits in WaitingForHuman and runs once approved."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "written"})
    handle = await harness.start(model, require_approval=["write_file"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    (pending,) = status.pending_approvals
    assert pending.tool == "write_file"
    assert pending.arguments == {"path": "notes.md", "content": "from the model"}
    assert not (harness.workspace / "notes.md").exists()

    await handle.signal(AgentWorkflow.approve, ApproveSignal(call_id=pending.call_id))
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert (harness.workspace / "notes.md").read_text() == "from the model"
    events = [e.event for e in (await handle.query(AgentWorkflow.trace)).entries]
    assert "HumanApproved" in events


@pytest.mark.replay_corpus
async def test_reject_feeds_the_reason_back_as_the_observation(harness: Harness) -> None:
    """A rejected call does not run; the model sees the reason as that call's result."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "understood"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.signal(AgentWorkflow.reject, RejectSignal(reason="notes belong in the wiki"))
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert not (harness.workspace / "notes.md").exists()
    (message,) = tool_messages(harness.requests(model)[1])
    assert message["content"] == "ERROR: a human rejected this call: notes belong in the wiki"


@pytest.mark.replay_corpus
async def test_modify_runs_the_call_with_new_arguments(harness: Harness) -> None:
    """Modified arguments replace the model's; the model sees the call as it actually ran."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.signal(
        AgentWorkflow.modify,
        ModifySignal(arguments={"path": "notes.md", "content": "from the human"}),
    )
    await handle.result()
    assert (harness.workspace / "notes.md").read_text() == "from the human"
    assistant = harness.requests(model)[1]["messages"][2]
    arguments = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"path": "notes.md", "content": "from the human"}


@pytest.mark.replay_corpus
async def test_invalid_modify_is_refused_and_the_run_keeps_waiting(harness: Harness) -> None:
    """Arguments that fail the schema are refused, recorded, and the call still waits."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.signal(AgentWorkflow.modify, ModifySignal(arguments={"path": "notes.md"}))
    await harness.trace_events(handle, "SignalRefused", 1)
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.state == "WaitingForHuman"
    assert len(status.pending_approvals) == 1
    assert status.last_event is not None
    assert "SignalRefused" in status.last_event
    assert "content: Field required" in status.last_event

    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert (harness.workspace / "notes.md").read_text() == "from the model"


@pytest.mark.replay_corpus
async def test_malformed_signal_bodies_are_refused_without_losing_the_run(
    harness: Harness,
) -> None:
    """Bodies of the wrong shape, unknown keys or unknown call ids are refused and recorded."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.signal("approve", "not an object")
    await handle.signal("approve", {"callid": "typo"})
    await handle.signal("approve", {"call_id": "no-such-call"})
    await handle.signal("reject", {})
    refused = [e.data for e in await harness.trace_events(handle, "SignalRefused", 4)]
    assert len(refused) == 4
    assert "Input should be a valid dictionary" in refused[0]
    assert "callid: Extra inputs are not permitted" in refused[1]
    assert "no pending call with id 'no-such-call'" in refused[2]
    assert "reason: Field required" in refused[3]
    assert (await handle.query(AgentWorkflow.state)).state == "WaitingForHuman"
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    assert (await handle.result()).status is RunStatus.DONE


async def test_signal_outside_waiting_is_refused(harness: Harness) -> None:
    """An approval sent while nothing waits changes nothing and says why in the trace."""
    model = harness.script({"content": "no tools needed", "delay": 1.0})
    handle = await harness.start(model)
    await harness.wait_for_state(handle, "Planning")
    await handle.signal(AgentWorkflow.approve, ApproveSignal(call_id="x"))
    await harness.trace_events(handle, "SignalRefused", 1)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    trace = await handle.query(AgentWorkflow.trace)
    refused = [e for e in trace.entries if e.event == "SignalRefused"]
    assert [(e.state, e.data) for e in refused] == [
        ("Planning", "approve: no tool call is waiting for approval")
    ]


@pytest.mark.replay_corpus
async def test_parallel_calls_are_addressed_by_call_id(harness: Harness) -> None:
    """With several pending calls each decision names its call; the rest of the batch waits."""
    model = harness.script(
        {
            "tool_calls": [
                {"id": "w1", **WRITE},
                {
                    "id": "w2",
                    "name": "write_file",
                    "arguments": {"path": "other.md", "content": "2"},
                },
                {"id": "l1", "name": "list_dir", "arguments": {}},
            ]
        },
        {"content": "done"},
    )
    handle = await harness.start(model, require_approval=["write_file"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    assert [p.call_id for p in status.pending_approvals] == ["w1", "w2"]

    await handle.signal(AgentWorkflow.approve, ApproveSignal())  # ambiguous: refused
    await handle.signal(AgentWorkflow.reject, RejectSignal(call_id="w2", reason="not that one"))
    await harness.trace_events(handle, "SignalReceived", 1)
    status = await handle.query(AgentWorkflow.state)
    assert [p.call_id for p in status.pending_approvals] == ["w1"]
    await handle.signal(AgentWorkflow.approve, ApproveSignal(call_id="w1"))
    await handle.result()

    assert (harness.workspace / "notes.md").exists()
    assert not (harness.workspace / "other.md").exists()
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(harness.requests(model)[1])}
    assert list(results) == ["w1", "w2", "l1"]
    assert results["w2"] == "ERROR: a human rejected this call: not that one"
    trace = await handle.query(AgentWorkflow.trace)
    refused = [e.data for e in trace.entries if e.event == "SignalRefused"]
    assert refused == ["approve: several calls are waiting (w1, w2); say which with call_id"]
    assert ("WaitingForHuman", "HumanApprovedParallel") in [
        (e.state, e.event) for e in trace.entries
    ]


async def test_stock_temporal_cli_signal_approves(harness: Harness) -> None:
    """`temporal workflow signal --name approve --input '{"call_id": ...}'` works as documented."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    body = json.dumps({"call_id": status.pending_approvals[0].call_id})
    completed = await harness.temporal(
        "workflow", "signal", "--workflow-id", handle.id, "--name", "approve", "--input", body
    )
    assert completed.returncode == 0, completed.stderr
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert (harness.workspace / "notes.md").read_text() == "from the model"


async def test_waiting_runs_are_found_by_search_attribute(harness: Harness) -> None:
    """`AgentState='WaitingForHuman'` finds a run awaiting approval (list and CLI)."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    query = f"AgentState='WaitingForHuman' AND WorkflowId='{handle.id}'"
    assert await harness.found_by(query) == [handle.id]
    listed = await harness.temporal("workflow", "list", "--query", query, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert handle.id in listed.stdout
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    await handle.result()


@pytest.mark.replay_corpus
async def test_decide_update_answers_the_caller(harness: Harness) -> None:
    """The `decide` update refuses bad decisions to the caller, leaving no history; good ones
    return the decided call."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    before = len((await handle.fetch_history()).events)

    refusals = [
        (Decision(action="approve", call_id="nope"), "no pending call with id 'nope'"),
        (Decision(action="reject"), "reason: Field required"),
        (Decision(action="modify", arguments={"path": 1}), "do not match its schema"),
    ]
    for decision, message in refusals:
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update(AgentWorkflow.decide, decision)
        assert isinstance(caught.value.cause, ApplicationError)
        assert caught.value.cause.type == "DecisionRefused"
        assert message in caught.value.cause.message
    assert len((await handle.fetch_history()).events) == before  # refusals left no trace

    decided = await handle.execute_update(
        AgentWorkflow.decide,
        Decision(action="modify", arguments={"path": "notes.md", "content": "via update"}),
    )
    assert decided.call_id == status.pending_approvals[0].call_id
    assert decided.decision is ApprovalDecision.MODIFIED
    assert (await handle.result()).status is RunStatus.DONE
    assert (harness.workspace / "notes.md").read_text() == "via update"
