"""The ``delegate`` tool: child runs started in parallel, bounded in depth and fan-out, sharing
one token budget, ending with their parent, and failing as observations, never as the parent."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError

from tests.support.family import (
    LIST,
    child,
    delegate,
    observations,
    pending_in,
    quick_and_hungry,
    reaches,
    usage,
)
from tests.support.harness import Harness, tool_messages
from tests.support.processes import ROOT
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


@pytest.mark.replay_corpus
async def test_parallel_children_each_answer_their_own_call(harness: Harness) -> None:
    """Three delegate calls in one reply start three children at once; whichever finishes first,
    each child's answer is the observation of the call that started it, and the parent's usage
    counts theirs."""
    a = harness.script({"content": "answer from A", "delay": 1.0, "usage": usage(100, 10)})
    b = harness.script({"content": "answer from B", "usage": usage(200, 20)})
    c = harness.script({"content": "answer from C", "delay": 0.5, "usage": usage(300, 30)})
    parent = harness.script(
        {
            "tool_calls": [
                delegate("task A", a, "call_a"),
                delegate("task B", b, "call_b"),
                delegate("task C", c, "call_c"),
            ],
            "usage": usage(1000, 100),
        },
        {"content": "all three answered", "usage": usage(2000, 200)},
    )
    handle = await harness.start(parent, subagents={"models": [a, b, c]})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    seen = observations(harness, parent, 1)
    for call_id, answer in (("call_a", "A"), ("call_b", "B"), ("call_c", "C")):
        assert seen[call_id].startswith(f"Sub-agent {handle.id}.{call_id} answered:")
        assert seen[call_id].endswith(f"answer from {answer}")
        done: AgentResult = await child(harness, handle, call_id).result()
        assert done.answer == f"answer from {answer}"
    # All three were started before any ended: they ran in parallel.
    trace = await handle.query(AgentWorkflow.trace)
    events = [e.event for e in trace.entries if e.event.startswith("Subagent")]
    assert events[:3] == ["SubagentStarted"] * 3
    assert events.count("SubagentEnded") == 3
    assert result.usage.total_tokens == 1100 + 2200 + 110 + 220 + 330
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert [(ch.call_id, ch.status, ch.tokens) for ch in status.children] == [
        ("call_a", "done", 110),
        ("call_b", "done", 220),
        ("call_c", "done", 330),
    ]
    offered = [t["function"]["name"] for t in harness.requests(parent)[0]["tools"]]
    assert "delegate" in offered


async def test_a_long_task_reaches_the_child_whole(harness: Harness) -> None:
    """The content door stores long argument values by reference, but ``delegate`` runs in the
    workflow, which cannot read the store: its task reaches the child whole, never a preview."""
    task = "Summarise these notes. " + "note " * 300
    a = harness.script({"content": "summarised"})
    parent = harness.script(
        {"tool_calls": [delegate(task, a, "call_a")]}, {"content": "the child answered"}
    )
    handle = await harness.start(parent, subagents={"models": [a]})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    [first] = harness.requests(a)
    assert task in json.dumps(first["messages"])


async def test_depth_and_fan_out_are_bounded(harness: Harness) -> None:
    """A run starts at most max_children children, gives no tool it lacks, and a child at
    max_depth starts none: each refusal is that call's ERROR: observation."""
    sub = harness.script(
        {"tool_calls": [delegate("deeper still", None, "call_deep")]},
        {"content": "did it myself"},
    )
    parent = harness.script(
        {
            "tool_calls": [
                delegate("one", sub, "call_1"),
                delegate("with commands", sub, "call_2", tools=["run_command"]),
                delegate("three", sub, "call_3"),
                delegate("four", sub, "call_4"),
            ]
        },
        {"content": "done"},
    )
    handle = await harness.start(
        parent, subagents={"max_depth": 1, "max_children": 2, "models": [sub]}
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    seen = observations(harness, parent, 1)
    assert seen["call_1"].endswith("did it myself")
    assert seen["call_2"].startswith(
        "ERROR: delegate refused: this run does not have the tool(s) run_command"
    )
    assert seen["call_3"].endswith("did it myself")
    assert seen["call_4"].startswith(
        "ERROR: delegate refused: this run has started 2 sub-agent(s), all "
        "subagents.max_children allows"
    )
    for call_id in ("call_1", "call_3"):
        await child(harness, handle, call_id).result()
    # The children, at depth 1 of 1, are not offered delegate, and refused when they call it.
    offered = [t["function"]["name"] for t in harness.requests(sub)[0]["tools"]]
    assert "delegate" not in offered
    deep = [m["content"] for r in harness.requests(sub) for m in tool_messages(r)]
    assert len(deep) == 2  # one refusal in each child's second request
    for refused in deep:
        assert refused.startswith("ERROR: delegate refused: this run is a sub-agent at depth 1")
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert [ch.call_id for ch in status.children] == ["call_1", "call_3"]


@pytest.mark.replay_corpus
async def test_one_budget_stops_a_child_midway_and_the_parent_at_its_limit(
    harness: Harness,
) -> None:
    """Each child gets a share of what the parent has left; a child that spends its share stops
    mid-task, what it spent counts against the parent, and the family never exceeds the top
    run's budget."""
    quick, hungry, parent = quick_and_hungry(harness)
    handle = await harness.start(parent, token_budget=30_000, subagents={"models": [quick, hungry]})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None and result.error.startswith("token budget exhausted")
    assert len(harness.requests(parent)) == 2
    # 1,000 of the parent's, 2,000 of the quick child's, 9,500 of the hungry one's, 17,000 more.
    assert result.usage.total_tokens == 29_500 <= 30_000
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    q, h = status.children
    # What was left (29,000) is split between the two calls and the parent itself.
    assert (q.token_budget, h.token_budget) == (29_000 // 3, (29_000 - 29_000 // 3) // 2)
    assert (q.status, q.tokens) == ("done", 2000)
    assert (h.status, h.tokens) == ("error", 9500)
    assert h.token_budget is not None and h.tokens <= h.token_budget
    stopped: AgentResult = await child(harness, handle, "call_h").result()
    assert stopped.error is not None and stopped.error.startswith("token budget exhausted")
    assert len(harness.requests(hungry)) == 1
    seen = observations(harness, parent, 1)
    assert seen["call_h"].startswith(f"ERROR: sub-agent {handle.id}.call_h ended error")
    await child(harness, handle, "call_q").result()


@pytest.mark.replay_corpus
async def test_cancelling_the_parent_ends_its_children(harness: Harness) -> None:
    """A parent cancelled while its children run ends cancelled, and so does every child, a
    grandchild too: one child waits for an approval, the other for its own child (so its
    cancellation takes one round more). Before the parent closes, both children's
    cancellations are in its history: none is left to the parent close policy after it."""
    sub = harness.script({"tool_calls": [LIST]}, {"content": "never"})
    mid = harness.script({"tool_calls": [delegate("deeper", sub, "call_g")]}, {"content": "never"})
    parent = harness.script(
        {"tool_calls": [delegate("one", sub, "call_1"), delegate("two", mid, "call_2")]},
        {"content": "never"},
    )
    handle = await harness.start(
        parent, require_approval=["list_dir"], subagents={"models": [sub, mid]}
    )
    one, two = child(harness, handle, "call_1"), child(harness, handle, "call_2")
    grandchild = child(harness, two, "call_g")
    for waiting in (one, grandchild):
        await reaches(waiting, "WaitingForHuman")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    for c in (one, two, grandchild):
        assert (await c.describe()).status is WorkflowExecutionStatus.CANCELED
    kinds = [e.event_type for e in (await handle.fetch_history()).events]
    closed = kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED)
    assert kinds[:closed].count(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED) == 2
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.state == "Cancelled"


@pytest.mark.replay_corpus
async def test_a_child_that_fails_is_an_error_observation(harness: Harness) -> None:
    """A child terminated mid-run and a child whose model call fails are each their call's
    ERROR: observation; the parent goes on and answers."""
    stopped = harness.script({"tool_calls": [LIST]}, {"content": "never"})
    broken = harness.script({"content": "never", "errors": [{"status": 400}]})
    parent = harness.script(
        {"tool_calls": [delegate("stop me", stopped, "call_s"), delegate("x", broken, "call_b")]},
        {"content": "went on without them"},
    )
    handle = await harness.start(
        parent, require_approval=["list_dir"], subagents={"models": [stopped, broken]}
    )
    terminated = child(harness, handle, "call_s")
    await reaches(terminated, "WaitingForHuman")
    await terminated.terminate(reason="an operator stopped it")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert result.answer == "went on without them"
    seen = observations(harness, parent, 1)
    assert seen["call_s"] == f"ERROR: sub-agent {handle.id}.call_s was terminated"
    assert seen["call_b"].startswith(f"ERROR: sub-agent {handle.id}.call_b ended error")
    await child(harness, handle, "call_b").result()
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert [(ch.call_id, ch.status) for ch in status.children] == [
        ("call_s", "failed"),
        ("call_b", "error"),
    ]


@pytest.mark.replay_corpus
async def test_a_childs_approval_is_decided_through_the_parent(harness: Harness) -> None:
    """A child's call waiting for approval shows in its parent's status, named by the parent's
    call and the child's; the stock CLI's signal to the parent, and ``starter.py approve
    PARENT_ID``, decide it in the child."""
    sub = harness.script({"tool_calls": [LIST]}, {"content": "listed"})
    parent = harness.script(
        {"tool_calls": [delegate("one", sub, "call_1"), delegate("two", sub, "call_2")]},
        {"content": "both listed"},
    )
    handle = await harness.start(parent, require_approval=["list_dir"], subagents={"models": [sub]})
    children = [child(harness, handle, "call_1"), child(harness, handle, "call_2")]
    pending = await pending_in(handle, 2)
    assert sorted(p.call_id for p in pending) == ["call_1/call_t0_0", "call_2/call_t0_0"]
    assert {p.tool for p in pending} == {"list_dir"}
    signalled = await harness.temporal(
        "workflow", "signal", "--workflow-id", handle.id, "--name", "approve",
        "--input", json.dumps({"call_id": "call_1/call_t0_0"}),
    )  # fmt: skip
    assert signalled.returncode == 0, signalled.stderr
    [left] = await pending_in(handle, 1)
    assert left.call_id == "call_2/call_t0_0"
    approved = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), "approve", handle.id],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stderr
    assert "approved call_2/call_t0_0 (list_dir)" in approved.stdout
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    for c in children:
        done: AgentResult = await c.result()
        assert done.answer == "listed"
    seen = observations(harness, parent, 1)
    assert all(o.endswith("listed") for o in seen.values())
    trace = await handle.query(AgentWorkflow.trace)
    assert [e.event for e in trace.entries].count("SignalForwarded") == 2
