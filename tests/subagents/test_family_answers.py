"""One place to answer a family: a stuck sub-agent is guided (or halted) through its parent
(``treadle guide PARENT_ID --child CALL``, or the stock CLI's ``guide`` signal to the parent
naming the child's call; a grandchild by its path, ``call_1/call_2``), and a sub-agent's client
queries are answered through it (``treadle answer PARENT_ID call_1/q1``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle

from tests.support.family import child, delegate, shows, starter
from tests.support.harness import Harness
from tests.support.stream import wait_for_event
from treadle.workflows.agent.messages.models import AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    """The run's Web UI Current Details."""
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


def failing_edit(harness: Harness) -> dict[str, Any]:
    """A call that fails the same way each time: three make a run stuck."""
    (harness.workspace / "main.go").write_text("package main\n")
    return {
        "name": "edit_file",
        "arguments": {"path": "main.go", "old_text": "func missing()", "new_text": "x"},
    }


@pytest.mark.replay_corpus
async def test_a_stuck_child_is_guided_through_its_parent(harness: Harness) -> None:
    """A stuck child's ``guidance_needed`` reaches its parent's stream naming the child's call,
    with commands that work on the parent; ``treadle guide PARENT_ID --child call_1`` sends
    the guidance on, the child's model reads it, and both runs finish."""
    bad = failing_edit(harness)
    sub = harness.script(
        {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"content": "ok"}
    )
    parent = harness.script(
        {"tool_calls": [delegate("fix main.go", sub, "call_1")]}, {"content": "fixed"}
    )
    handle = await harness.start(parent, recovery="ask_human", subagents={"models": [sub]})
    kid = child(harness, handle, "call_1")
    needed = await wait_for_event(handle, lambda e: e.kind == "guidance_needed")
    assert (needed.subagent, needed.call_id) == (kid.id, "call_1")
    assert f'treadle guide {handle.id} --child call_1 --guidance "..."' in (needed.commands)
    await shows(handle, "a stuck child", lambda s: bool(s.children and s.children[0].stuck))
    assert "(guide it: `guide --child call_1`)" in await current_details(handle)
    shown = await starter(harness, "status", handle.id)
    assert "; guide --child call_1)" in shown.stdout
    guided = await starter(
        harness, "guide", handle.id, "--child", "call_1", "--guidance", "there is no such function"
    )
    assert guided.returncode == 0, guided.stderr
    assert f"sent guidance to sub-agent call_1 of run {handle.id}" in guided.stdout
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "fixed")
    assert (await kid.result()).answer == "ok"
    assert "there is no such function" in json.dumps(harness.requests(sub)[-1])
    trace = await handle.query(AgentWorkflow.trace)
    assert "SignalForwarded" in [e.event for e in trace.entries]


async def test_a_guide_naming_no_stuck_child_is_refused(harness: Harness) -> None:
    """Guidance for a child that is not stuck, or a call that started no child, is refused by
    the parent (``starter.py`` says why) and changes nothing."""
    sub = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}, {"content": "listed"}
    )
    parent = harness.script({"tool_calls": [delegate("list", sub, "call_1")]}, {"content": "done"})
    handle = await harness.start(parent, require_approval=["list_dir"], subagents={"models": [sub]})
    child(harness, handle, "call_1")
    await shows(handle, "a waiting child", lambda s: bool(s.pending_approvals))
    not_stuck = await starter(harness, "guide", handle.id, "--child", "call_1", "--guidance", "x")
    assert not_stuck.returncode == 2
    assert "is not waiting for guidance" in not_stuck.stderr
    unknown = await starter(harness, "guide", handle.id, "--child", "call_9", "--halt")
    assert unknown.returncode == 2
    assert "no running sub-agent was started by call 'call_9'" in unknown.stderr
    approved = await starter(harness, "approve", handle.id)
    assert approved.returncode == 0, approved.stderr
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "done")


@pytest.mark.replay_corpus
async def test_a_stuck_grandchild_is_halted_through_the_top_run_with_the_stock_cli(
    harness: Harness,
) -> None:
    """A stuck grandchild's guidance request reaches the top run named by its path
    (``call_1/call_2``); the stock CLI's ``guide`` signal to the top run halts it, level by
    level; the child reads the halt as its call's ``ERROR:`` and answers."""
    bad = failing_edit(harness)
    grand = harness.script({"tool_calls": [bad]}, {"tool_calls": [bad]}, {"tool_calls": [bad]})
    sub = harness.script(
        {"tool_calls": [delegate("fix main.go", grand, "call_2")]}, {"content": "gave up"}
    )
    top = harness.script({"tool_calls": [delegate("fix it", sub, "call_1")]}, {"content": "done"})
    handle = await harness.start(top, recovery="ask_human", subagents={"models": [sub, grand]})
    kid = child(harness, handle, "call_1")
    grandkid = child(harness, kid, "call_2")
    needed = await wait_for_event(
        handle, lambda e: e.kind == "guidance_needed" and e.call_id == "call_1/call_2"
    )
    assert needed.subagent == grandkid.id
    # The top run's status names the stuck grandchild under its child, by the path that
    # guides it, and so does ``treadle status``.
    status = await shows(
        handle,
        "a stuck grandchild",
        lambda s: bool(s.children) and s.children[0].stuck_at is not None,
    )
    assert (status.children[0].stuck_at, status.children[0].state) == ("call_2", "Acting")
    assert status.children[0].stuck
    shown = await starter(harness, "status", handle.id)
    assert "stuck at call_2: " in shown.stdout and "guide --child call_1/call_2" in shown.stdout
    body = {"call_id": "call_1/call_2", "halt": True, "reason": "not worth it"}
    stock = (
        f"temporal workflow signal --workflow-id {handle.id} --name guide --input "
        f"""'{json.dumps({"call_id": "call_1/call_2", "guidance": "..."})}'"""
    )
    assert stock in needed.commands
    signalled = await harness.temporal(
        "workflow", "signal", "--workflow-id", handle.id, "--name", "guide",
        "--input", json.dumps(body),
    )  # fmt: skip
    assert signalled.returncode == 0, signalled.stderr
    halted: AgentResult = await grandkid.result()
    assert halted.status is RunStatus.HALTED and "not worth it" in (halted.error or "")
    assert (await kid.result()).answer == "gave up"
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "done")


def ask(what: str, call_id: str) -> dict[str, Any]:
    return {"name": "ask_client", "arguments": {"kind": "question", "what": what}, "id": call_id}


@pytest.mark.replay_corpus
async def test_a_childs_client_queries_are_answered_through_its_parent(harness: Harness) -> None:
    """Two children ask their client: the parent's status and stream show both queries named by
    the parent's call (``call_1/q1``) with commands that work on the parent; ``starter.py
    answer PARENT_ID call_1/q1`` and the stock CLI's ``answer_query`` update to the parent answer
    them, and each child's model reads its answer."""
    first = harness.script({"tool_calls": [ask("which port?", "ask_1")]}, {"content": "port ok"})
    second = harness.script({"tool_calls": [ask("which host?", "ask_2")]}, {"content": "host ok"})
    parent = harness.script(
        {"tool_calls": [delegate("port", first, "call_1"), delegate("host", second, "call_2")]},
        {"content": "both known"},
    )
    handle = await harness.start(parent, subagents={"models": [first, second]})
    kids = [child(harness, handle, "call_1"), child(harness, handle, "call_2")]
    status = await shows(handle, "two child queries", lambda s: len(s.child_queries) == 2)
    assert sorted((q.id, q.what) for q in status.child_queries) == [
        ("call_1/q1", "which port?"),
        ("call_2/q1", "which host?"),
    ]
    asked = await wait_for_event(
        handle, lambda e: e.kind == "client_query" and e.call_id == "call_1/q1"
    )
    assert asked.subagent is None and asked.target == kids[0].id
    assert f'treadle answer {handle.id} call_1/q1 "..."' in asked.commands
    shown = await starter(harness, "status", handle.id)
    assert "client:   call_2/q1  question  which host?" in shown.stdout
    assert "**Waiting for the client:** `call_2/q1` question which host?" in (
        await current_details(handle)
    )
    answered = await starter(harness, "answer", handle.id, "call_1/q1", "8080")
    assert answered.returncode == 0, answered.stderr
    assert f"answered call_1/q1 (question: which port?) in run {handle.id}" in answered.stdout
    body = {"query_id": "call_2/q1", "kind": "question", "content": "example.org"}
    updated = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "answer_query",
        "--input", json.dumps(body),
    )  # fmt: skip
    assert updated.returncode == 0, updated.stderr
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "both known")
    assert [(await k.result()).answer for k in kids] == ["port ok", "host ok"]
    assert "The client answered: 8080" in json.dumps(harness.requests(first)[-1])
    assert "The client answered: example.org" in json.dumps(harness.requests(second)[-1])
