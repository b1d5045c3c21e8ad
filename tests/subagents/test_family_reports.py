"""A sub-agent reports to its parent while it runs: its running spend in the parent's status,
its events in the parent's stream (tagged with it), and a grandchild's approval decided through
the top run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.support.family import LIST, child, delegate, pending_in, shows, starter, usage
from tests.support.harness import Harness
from tests.support.stream import events, wait_for_event
from treadle.cli.live.lines import event_text
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

DOLLAR_A_MILLION = {"prompt": 1.0, "completion": 1.0}


@pytest.mark.replay_corpus
async def test_a_childs_running_spend_shows_in_its_parents_status(harness: Harness) -> None:
    """While a child waits for an approval, its parent's status already shows what the child
    spent (tokens, cost, state): each child's and the family's totals, before the child ends."""
    sub = harness.script(
        {"tool_calls": [LIST], "usage": usage(700, 50)},
        {"content": "listed", "usage": usage(800, 10)},
    )
    parent = harness.script(
        {"tool_calls": [delegate("list it", sub, "call_1")], "usage": usage(400, 100)},
        {"content": "the child listed", "usage": usage(900, 20)},
    )
    handle = await harness.start(
        parent,
        require_approval=["list_dir"],
        prices={model: DOLLAR_A_MILLION for model in (parent, sub)},
        subagents={"models": [sub]},
    )
    status = await shows(
        handle,
        "its child's running spend",
        lambda s: bool(s.children) and s.children[0].state == "WaitingForHuman",
    )
    [running] = status.children
    assert (running.status, running.tokens, running.steps) == ("running", 750, 1)
    assert running.cost_usd == pytest.approx(0.00075)
    assert status.usage.total_tokens == 500  # the child's is counted once it ends
    shown = await starter(harness, "status", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert "family:   1250 tokens, $0.0013 (this run and its ended sub-agents, and 1 running)" in (
        shown.stdout
    )
    assert f"child:    {handle.id}.call_1  running (WaitingForHuman, step 1)  750 tokens" in (
        shown.stdout
    )
    approved = await starter(harness, "approve", handle.id)
    assert approved.returncode == 0, approved.stderr
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert result.usage.total_tokens == 500 + 1560 + 920
    done: AgentResult = await child(harness, handle, "call_1").result()
    assert done.answer == "listed"
    final: AgentStatus = await handle.query(AgentWorkflow.state)
    assert (final.children[0].status, final.children[0].tokens) == ("done", 1560)


@pytest.mark.replay_corpus
async def test_a_childs_events_appear_in_its_parents_stream_tagged(harness: Harness) -> None:
    """The parent's stream carries its child's events (model replies, tool calls), each tagged
    with the child's workflow id, and none of the child's own end."""
    sub = harness.script({"tool_calls": [LIST]}, {"tool_calls": [LIST]}, {"content": "listed"})
    parent = harness.script(
        {"tool_calls": [delegate("list it", sub, "call_1")]}, {"content": "the child listed"}
    )
    handle = await harness.start(parent, subagents={"models": [sub]})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    await child(harness, handle, "call_1").result()
    kid = f"{handle.id}.call_1"
    await wait_for_event(handle, lambda e: e.subagent == kid and e.kind == "tool_finished")
    tagged = [e for e in await events(handle) if e.subagent is not None]
    assert {e.subagent for e in tagged} == {kid}
    kinds = [e.kind for e in tagged]
    assert "model" in kinds and "tool_started" in kinds
    finished = [e for e in tagged if e.kind == "tool_finished"]
    assert finished and all(e.tool == "list_dir" and e.ok for e in finished)
    assert not {"ended", "answer", "approval_needed"} & set(kinds)
    # The parent's own events are untagged, and its stream still ends with its own end.
    last = (await events(handle))[-1]
    assert (last.kind, last.subagent) == ("ended", None)


@pytest.mark.replay_corpus
async def test_a_childs_routine_reports_keep_their_pace_and_its_last_events_still_arrive(
    harness: Harness,
) -> None:
    """A child of many quick steps does not signal its parent once a step (the parent cannot
    hand over while it waits, so each signal would stay in its history): it reports when it
    begins and passes the rest on when it ends, and the parent's stream misses none of them."""
    steps = 6
    sub = harness.script(*[{"tool_calls": [LIST]}] * steps, {"content": "listed"})
    parent = harness.script(
        {"tool_calls": [delegate("list it", sub, "call_1")]}, {"content": "the child listed"}
    )
    handle = await harness.start(parent, subagents={"models": [sub]})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    history = await handle.fetch_history()
    signals = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    # Quick steps, one scripted reply each: well inside one REPORT_EVERY, so the first report
    # and the last; a slow machine may add one more, never one a step.
    assert 2 <= len(signals) < steps, len(signals)
    await child(harness, handle, "call_1").result()  # its history is replayed (and recorded)
    kid = f"{handle.id}.call_1"
    passed = [e for e in await events(handle) if e.subagent == kid]
    finished = [e.step for e in passed if e.kind == "tool_finished"]
    # Its last step's events arrive with its last report; what a report could not carry is
    # counted in the parent's stream (and all of it is in the child's own).
    assert finished and finished[-1] == steps
    left_out = [e for e in passed if "not passed on" in e.text]
    assert len(finished) == steps or left_out
    assert not [e for e in passed if e.kind == "state"]


@pytest.mark.replay_corpus
async def test_a_grandchilds_approval_is_decided_through_the_top_run(harness: Harness) -> None:
    """A grandchild's call waiting for approval bubbles up to the top run, named by each
    level's call (``call_c/call_g/call_t0_0``); ``treadle approve TOP_ID --call`` decides it
    in the grandchild, through its parent."""
    grand = harness.script({"tool_calls": [LIST]}, {"content": "grand listed"})
    mid = harness.script(
        {"tool_calls": [delegate("deeper", grand, "call_g")]}, {"content": "mid done"}
    )
    top = harness.script(
        {"tool_calls": [delegate("sub-task", mid, "call_c")]}, {"content": "top done"}
    )
    handle = await harness.start(
        top, require_approval=["list_dir"], subagents={"models": [mid, grand]}
    )
    middle = child(harness, handle, "call_c")
    grandchild = child(harness, middle, "call_g")
    [pending] = await pending_in(handle, 1)
    assert (pending.call_id, pending.tool) == ("call_c/call_g/call_t0_0", "list_dir")
    needed = await wait_for_event(handle, lambda e: e.kind == "approval_needed")
    assert needed.call_id == "call_c/call_g/call_t0_0"
    assert f"treadle approve {handle.id} --call call_c/call_g/call_t0_0" in (needed.commands)
    approved = await starter(harness, "approve", handle.id, "--call", pending.call_id)
    assert approved.returncode == 0, approved.stderr
    assert "approved call_c/call_g/call_t0_0 (list_dir)" in approved.stdout
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "top done")
    assert (await grandchild.result()).answer == "grand listed"
    assert (await middle.result()).answer == "mid done"
    # The grandchild's events reached the top's stream, tagged with the grandchild.
    tagged = {e.subagent for e in await events(handle) if e.subagent is not None}
    assert grandchild.id in tagged


def test_watch_shows_a_childs_event_as_one_line_tagged_with_it() -> None:
    """``watch`` of the parent shows a child's event as the line it would have, tagged with the
    child; a child's model reply (which the parent's own would print as its text) is one short
    line."""
    at = datetime.now(UTC)
    tool = AgentEvent(kind="tool_started", step=2, state="Acting", at=at, tool="list_dir",
                      target=".", subagent="run-1.call_1")  # fmt: skip
    line = event_text(tool)
    assert line is not None and line.plain == "[run-1.call_1] → list_dir ."
    model = AgentEvent(kind="model", step=2, state="Planning", at=at, text="",
                       tool_calls=("list_dir .",), subagent="run-1.call_1")  # fmt: skip
    line = event_text(model)
    assert line is not None and line.plain == "[run-1.call_1] model: list_dir ."


@pytest.mark.replay_corpus
async def test_a_stuck_child_shows_in_its_parents_status(harness: Harness) -> None:
    """A child stuck on the same failing call and asking for guidance (recovery ask_human)
    shows as stuck in its parent's status; guided by its own id, it goes on and answers."""
    (harness.workspace / "main.go").write_text("package main\n")
    bad = {
        "name": "edit_file",
        "arguments": {"path": "main.go", "old_text": "func missing()", "new_text": "x"},
    }
    sub = harness.script(
        {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"content": "ok"}
    )
    parent = harness.script(
        {"tool_calls": [delegate("fix main.go", sub, "call_1")]}, {"content": "fixed"}
    )
    handle = await harness.start(parent, recovery="ask_human", subagents={"models": [sub]})
    status = await shows(
        handle, "a stuck child", lambda s: bool(s.children and s.children[0].stuck)
    )
    [stuck] = status.children
    assert (stuck.status, stuck.state) == ("running", "WaitingForHuman")
    shown = await starter(harness, "status", handle.id)
    assert "(stuck: " in shown.stdout
    kid = child(harness, handle, "call_1")
    guided = await starter(harness, "guide", kid.id, "--guidance", "there is no such function")
    assert guided.returncode == 0, guided.stderr
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "fixed")
    assert (await kid.result()).answer == "ok"


def test_a_childs_routine_reports_slow_down_as_they_add_up() -> None:
    """Eight children of a day add about 10,000 events to their parent, not 50,000 (Temporal
    ends a run at 51,200 events, and a parent cannot continue as new while its children run)."""
    from treadle.workflows.agent.subagents.reports import SLOWEST, pace

    seconds, reports = 0.0, 0
    while seconds < 86_400:
        seconds += pace(reports).total_seconds()
        reports += 1
    assert reports * 4 * 8 < 12_000
    assert pace(0) < pace(40) < pace(80) and pace(10_000) == SLOWEST
