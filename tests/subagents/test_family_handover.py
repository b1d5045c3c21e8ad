"""A parent continues as new while its children run: they run on (not restarted), their ends
reach the parent's newest run as their calls' observations, the family budget stays whole, a
cancelled parent still ends them, and a child whose parent was terminated ends itself."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from tests.support.family import LIST, child, delegate, observations, pending_in, reaches, usage
from tests.support.harness import Harness, tool_messages
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "kid.txt", "content": "hi"}}


def write(path: str) -> dict[str, Any]:
    """A write of its own: two children writing one path would each be merged with a note."""
    return {"name": "write_file", "arguments": {"path": path, "content": "hi"}}


async def handed_over(harness: Harness, handle: WorkflowHandle[Any, Any]) -> str:
    """Wait until the run continued as new; return its first run's id. That run, which handed
    over while its children ran, is replay-checked with the test's other runs."""
    first = handle.first_execution_run_id
    assert first is not None
    for _ in range(600):
        if (await handle.describe()).run_id != first:
            harness.handles.append(harness.client.get_workflow_handle(handle.id, run_id=first))
            return first
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never continued as new")


async def first_run_events(harness: Harness, handle: WorkflowHandle[Any, Any]) -> list[Any]:
    first = harness.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
    return [e.event_type for e in (await first.fetch_history()).events]


def two_waiting_children(harness: Harness) -> tuple[str, str, str]:
    """Two children whose first call waits for approval, then answer; and their parent."""
    one = harness.script(
        {"tool_calls": [write("one.txt")], "usage": usage(100, 10)},
        {"content": "one wrote", "usage": usage(200, 20)},
    )
    two = harness.script(
        {"tool_calls": [write("two.txt")], "usage": usage(300, 30)},
        {"content": "two wrote", "usage": usage(400, 40)},
    )
    parent = harness.script(
        {
            "tool_calls": [delegate("one", one, "call_1"), delegate("two", two, "call_2")],
            "usage": usage(1000, 100),
        },
        {"content": "both wrote", "usage": usage(2000, 200)},
    )
    return one, two, parent


async def waiting_under_a_parent(
    harness: Harness, **config: Any
) -> tuple[str, str, str, WorkflowHandle[Any, Any], list[WorkflowHandle[Any, Any]]]:
    """``two_waiting_children`` started under a parent whose history asks for a hand-over at
    20 events, once both children wait for their approval: the three models, the parent's
    handle and the children's."""
    one, two, parent = two_waiting_children(harness)
    handle = await harness.start(
        parent,
        require_approval=["write_file"],
        subagents={"models": [one, two]},
        continue_as_new_after_events=20,
        **config,
    )
    kids = [child(harness, handle, "call_1"), child(harness, handle, "call_2")]
    for kid in kids:
        await reaches(kid, "WaitingForHuman")
    return one, two, parent, handle, kids


@pytest.mark.replay_corpus
async def test_children_run_on_across_their_parents_hand_over(harness: Harness) -> None:
    """A parent whose history asks for a hand-over while its two children wait continues as new
    without them: they are not restarted (same runs, each child's tool ran once), each child's
    answer is its call's observation in the parent's newer run, and the family's tokens are
    counted once."""
    one, two, parent, handle, kids = await waiting_under_a_parent(harness)
    started = {kid.id: (await kid.describe()).run_id for kid in kids}
    await handed_over(harness, handle)
    # After the run that started them: one approved through the parent (its newer run knows
    # what the children wait for), one by its own id.
    await pending_in(handle, 2)
    await handle.signal("approve", {"call_id": "call_1/call_t0_0"})
    await kids[1].signal("approve", {"call_id": "call_t0_0"})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    seen = observations(harness, parent, 1)
    assert seen == {
        "call_1": f"Sub-agent {handle.id}.call_1 answered:\none wrote",
        "call_2": f"Sub-agent {handle.id}.call_2 answered:\ntwo wrote",
    }
    for kid, model in zip(kids, (one, two), strict=True):
        done: AgentResult = await kid.result()
        assert done.status is RunStatus.DONE
        # Its chain is the one its parent started (it may continue as new itself), and its
        # model was asked twice: its step and its answer, never again from the start.
        first = (await kid.fetch_history()).events[0].workflow_execution_started_event_attributes
        assert first.first_execution_run_id == started[kid.id]
        assert len(harness.requests(model)) == 2
    # The run that started them handed over before either ended.
    kinds = await first_run_events(harness, handle)
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert kinds.count(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED) == 2
    assert EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED not in kinds
    assert result.usage.total_tokens == 1100 + 2200 + 110 + 220 + 330 + 440
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert [(c.call_id, c.status, c.tokens, c.run_id) for c in status.children] == [
        ("call_1", "done", 330, started[kids[0].id]),
        ("call_2", "done", 770, started[kids[1].id]),
    ]


@pytest.mark.replay_corpus
async def test_children_ending_around_the_hand_over_are_each_observed_once(
    harness: Harness,
) -> None:
    """Children ending while their parent's history asks for hand-overs, before, during or
    after one (whichever it is on this machine), are each observed once: one observation per
    call in the parent's next request, each child started once and asked once."""
    kids = [
        harness.script({"content": f"answer {n}", "delay": delay, "usage": usage(100, 10)})
        for n, delay in ((1, 0.2), (2, 0.8), (3, 1.4))
    ]
    parent = harness.script(
        {
            "tool_calls": [delegate(f"task {n}", m, f"call_{n}") for n, m in enumerate(kids, 1)],
            "usage": usage(1000, 100),
        },
        {"content": "all answered", "usage": usage(2000, 200)},
    )
    handle = await harness.start(
        parent, subagents={"models": kids}, continue_as_new_after_events=20
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    sent = tool_messages(harness.requests(parent)[1])
    assert [m["tool_call_id"] for m in sent] == ["call_1", "call_2", "call_3"]
    for n, (message, model) in enumerate(zip(sent, kids, strict=True), 1):
        assert message["content"].endswith(f"answer {n}")
        assert len(harness.requests(model)) == 1
        await child(harness, handle, f"call_{n}").result()
    assert (await handle.describe()).run_id != handle.first_execution_run_id  # it handed over
    harness.handles.append(
        harness.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
    )
    assert result.usage.total_tokens == 1100 + 2200 + 3 * 110
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert [(c.call_id, c.status) for c in status.children] == [
        ("call_1", "done"),
        ("call_2", "done"),
        ("call_3", "done"),
    ]


@pytest.mark.replay_corpus
async def test_a_lone_childs_call_is_carried_too(harness: Harness) -> None:
    """One ``delegate`` call (Acting, not ParallelActing) is carried the same way: the parent
    hands over while its child waits, and the child's answer is the call's observation."""
    one = harness.script({"tool_calls": [WRITE]}, {"content": "one wrote"})
    parent = harness.script(
        {"tool_calls": [delegate("one", one, "call_1")]}, {"content": "it wrote"}
    )
    handle = await harness.start(
        parent,
        require_approval=["write_file"],
        subagents={"models": [one]},
        continue_as_new_after_events=20,
    )
    kid = child(harness, handle, "call_1")
    await reaches(kid, "WaitingForHuman")
    await handed_over(harness, handle)
    await kid.signal("approve", {"call_id": "call_t0_0"})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert observations(harness, parent, 1) == {
        "call_1": f"Sub-agent {handle.id}.call_1 answered:\none wrote"
    }
    assert len(harness.requests(one)) == 2
    kinds = await first_run_events(harness, handle)
    assert EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED not in kinds


@pytest.mark.replay_corpus
async def test_a_parent_cancelled_after_its_hand_over_still_ends_its_children(
    harness: Harness,
) -> None:
    """Cancelled after a hand-over its children ran on across, the parent cancels them itself
    (no parent close policy does) and ends Cancelled once they have."""
    *_, handle, kids = await waiting_under_a_parent(harness)
    await handed_over(harness, handle)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    for kid in kids:  # each said it was cancelled before its parent closed, then closed
        with pytest.raises(WorkflowFailureError) as ended:
            await kid.result()
        assert isinstance(ended.value.cause, CancelledError)
        assert (await kid.describe()).status is WorkflowExecutionStatus.CANCELED
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.state == "Cancelled"
    assert [(c.call_id, c.status) for c in status.children] == [
        ("call_1", "cancelled"),
        ("call_2", "cancelled"),
    ]


@pytest.mark.replay_corpus
async def test_a_child_terminated_after_its_parents_hand_over_is_an_error_observation(
    harness: Harness,
) -> None:
    """A child terminated while a later run of its parent waits for it signals nothing: the
    parent finds it closed, and its call is an ERROR: observation counting its whole share;
    its sibling's answer still comes."""
    _, _, parent, handle, kids = await waiting_under_a_parent(harness, token_budget=30_000)
    await handed_over(harness, handle)
    await kids[0].terminate(reason="an operator stopped it")
    await kids[1].signal("approve", {"call_id": "call_t0_0"})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    seen = observations(harness, parent, 1)
    assert seen == {
        "call_1": f"ERROR: sub-agent {handle.id}.call_1 closed without telling its parent how "
        "it ended (terminated or timed out)",
        "call_2": f"Sub-agent {handle.id}.call_2 answered:\ntwo wrote",
    }
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    lost, answered = status.children
    assert (lost.status, answered.status) == ("failed", "done")
    assert lost.token_budget is not None
    assert lost.tokens == lost.token_budget  # unknown what it spent: its whole share
    assert result.usage.total_tokens == 1100 + 2200 + lost.token_budget + 770


@pytest.mark.replay_corpus
async def test_a_child_whose_parent_was_terminated_ends_itself(harness: Harness) -> None:
    """No server cancels a child that may outlive its parent's runs: a child that finds its
    parent terminated when it reports ends itself at its next step, saying why."""
    steps = [{"tool_calls": [LIST]} for _ in range(6)]
    kid_model = harness.script({"tool_calls": [WRITE]}, *steps, {"content": "never"})
    parent = harness.script(
        {"tool_calls": [delegate("one", kid_model, "call_1")]}, {"content": "never"}
    )
    handle = await harness.start(
        parent, require_approval=["write_file"], subagents={"models": [kid_model]}
    )
    kid = child(harness, handle, "call_1")
    await reaches(kid, "WaitingForHuman")
    await handle.terminate(reason="an operator stopped it")
    await kid.signal("approve", {"call_id": "call_t0_0"})  # it reports the decision: no parent
    result: AgentResult = await kid.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert f"its parent {handle.id} is gone" in result.error
    assert len(harness.requests(kid_model)) < 8  # it stopped before its script's end
