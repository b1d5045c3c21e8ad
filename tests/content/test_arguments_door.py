"""Tool-call arguments through the door: a large string value of a call's arguments (a file's
content) travels as a stored blob and a short marker, so a step that writes 50 KB costs the
history what a step that writes 2 KB costs; the tool still runs with every byte."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from tests.support.harness import Harness
from tests.support.processes import run_cli
from treadle.workflows.agent.messages import content_refs
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    ApproveSignal,
    ModifySignal,
    RunStatus,
    ToolCall,
)
from treadle.workflows.agent.parts.toolbox import Toolbox, call_target
from treadle.workflows.agent.workflow import AgentWorkflow

SMALL = 2_000
BIG = 50_000


def _writes(size: int, steps: int) -> list[dict[str, Any]]:
    return [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": f"w{i}.txt", "content": f"{i}" + "x" * (size - 1)},
                }
            ]
        }
        for i in range(steps)
    ]


async def _history_bytes(harness: Harness, size: int, steps: int) -> int:
    model = harness.script(*_writes(size, steps), {"content": "wrote them"})
    handle = await harness.start(model, max_steps=steps + 5)
    assert (await handle.result()).status is RunStatus.DONE
    return _step_bytes(await handle.fetch_history())


def _step_bytes(history: WorkflowHistory) -> int:
    """A run's history bytes but its result's: the result (with its trace's tail, for a closed
    run to be read) is written once a run, and grows with the run only up to its bound."""
    return sum(
        e.ByteSize()
        for e in history.events
        if e.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    )


async def test_a_write_step_costs_the_same_history_at_2_kb_and_50_kb(harness: Harness) -> None:
    """History per write step (the difference between 2 and 6 writes, over 4) is at most 4 KB,
    within 20% whether each step writes 2 KB or 50 KB; the 50 KB file lands whole."""
    per_step = {}
    for size in (SMALL, BIG):
        few, many = await _history_bytes(harness, size, 2), await _history_bytes(harness, size, 6)
        per_step[size] = (many - few) / 4
    assert per_step[BIG] <= 4_000, per_step
    assert per_step[SMALL] <= 4_000, per_step
    assert abs(per_step[BIG] - per_step[SMALL]) <= 0.2 * per_step[SMALL], per_step
    written = (harness.workspace / "w5.txt").read_text()
    assert written == "5" + "x" * (BIG - 1)


def _reads(steps: int) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": f"r{i}.txt"}}]}
        for i in range(steps)
    ]


async def test_a_read_step_costs_the_same_history_at_2_kb_and_50_kb(harness: Harness) -> None:
    """The same for reads: the output is stored, the history holds its preview and key."""
    per_step = {}
    for size in (SMALL, BIG):
        for i in range(6):
            (harness.workspace / f"r{i}.txt").write_text(f"{i}" * size)
        sizes = []
        for steps in (2, 6):
            model = harness.script(*_reads(steps), {"content": "read them"})
            handle = await harness.start(model, max_steps=10, max_observation_chars=60_000)
            assert (await handle.result()).status is RunStatus.DONE
            sizes.append(_step_bytes(await handle.fetch_history()))
        per_step[size] = (sizes[1] - sizes[0]) / 4
    assert max(per_step.values()) <= 4_000, per_step
    assert abs(per_step[BIG] - per_step[SMALL]) <= 0.2 * per_step[SMALL], per_step


def _marker(text: str) -> dict[str, Any]:
    return content_refs.marker("ab" * 32, text)


def test_the_toolbox_checks_a_marker_as_a_string_of_its_length() -> None:
    """A marker passes where a string is expected and keeps the length limits; the checked
    arguments show it (preview and size), the tool's request carries it without the preview."""
    box = Toolbox(AgentConfig())
    content = "y" * 5_000
    raw = json.dumps({"path": "big.txt", "content": _marker(content)})
    checked = box.check(ToolCall(id="c", name="write_file", arguments=raw))
    assert checked.problem is None and checked.target == "big.txt"
    assert checked.arguments == {"path": "big.txt", "content": _marker(content)}
    sent = json.loads(checked.request_arguments())
    assert sent == {"path": "big.txt", "content": {content_refs.REF: "ab" * 32, "chars": 5_000}}
    assert call_target("write_file", raw) == "big.txt"
    too_long = json.dumps({"description": _marker("z" * 600)})
    refused = box.check(ToolCall(id="c", name="start_phase", arguments=too_long))
    assert refused.problem is not None and "500" in refused.problem
    assert content_refs.full_chars(raw) > 5_000


def _tool_calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for m in body["messages"] for c in m.get("tool_calls") or []]


async def test_the_model_sees_every_byte_it_wrote_and_export_holds_it(harness: Harness) -> None:
    """The history holds a marker; the model's next request and ``export`` the whole
    arguments, as the model wrote them."""
    content = "line\n" * (BIG // 5)
    model = harness.script(
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "a.txt", "content": content}}
            ]
        },
        {"content": "wrote it"},
    )
    handle = await harness.start(model)
    assert (await handle.result()).status is RunStatus.DONE
    assert (harness.workspace / "a.txt").read_text() == content
    sent = _tool_calls(harness.requests(model)[-1])
    assert json.loads(sent[0]["function"]["arguments"]) == {"path": "a.txt", "content": content}
    history = await handle.fetch_history()
    assert sum(e.ByteSize() for e in history.events) < BIG  # not one copy of it
    cli = await run_cli(*harness.cli_args(), "export", handle.id)
    assert cli.returncode == 0, cli.stderr
    exported = json.loads(cli.stdout)
    calls = [c for m in exported["conversation"]["messages"] for c in m.get("tool_calls") or []]
    assert json.loads(calls[0]["arguments"])["content"] == content


async def test_approving_a_large_write_shows_a_preview_and_runs_it_whole(
    harness: Harness,
) -> None:
    """The pending call shows the content's preview and length; approved, it runs whole."""
    content = "approved " * 6_000
    model = harness.script(
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "b.txt", "content": content}}
            ]
        },
        {"content": "done"},
    )
    handle = await harness.start(model, require_approval=["write_file"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    (pending,) = status.pending_approvals
    shown = pending.arguments["content"]
    assert content_refs.is_ref(shown), shown
    assert shown["chars"] == len(content) and content.startswith(shown["preview"])
    assert pending.arguments["path"] == "b.txt"
    await handle.signal(AgentWorkflow.approve, ApproveSignal(call_id=pending.call_id))
    assert (await handle.result()).status is RunStatus.DONE
    assert (harness.workspace / "b.txt").read_text() == content


async def test_modify_with_new_large_arguments_or_the_same_marker_runs(harness: Harness) -> None:
    """A human's new 60 KB content runs as sent; a modify that keeps the marker and changes the
    path writes the model's stored content at the new path."""
    content = "model " * 2_000
    write = {"name": "write_file", "arguments": {"path": "c.txt", "content": content}}
    model = harness.script(
        {"tool_calls": [write]},
        {"tool_calls": [{**write, "arguments": {"path": "d.txt", "content": content + "!"}}]},
        {"content": "done"},
    )
    handle = await harness.start(model, require_approval=["write_file"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    human = "human " * 10_000
    await handle.signal(
        AgentWorkflow.modify, ModifySignal(arguments={"path": "c.txt", "content": human})
    )
    while True:  # the second call waits once the first has run
        status = await handle.query(AgentWorkflow.state)
        if status.pending_approvals and status.pending_approvals[0].arguments["path"] == "d.txt":
            break
        await asyncio.sleep(0.05)
    (pending,) = status.pending_approvals
    kept = {**pending.arguments, "path": "e.txt"}
    await handle.signal(AgentWorkflow.modify, ModifySignal(arguments=kept))
    assert (await handle.result()).status is RunStatus.DONE
    assert (harness.workspace / "c.txt").read_text() == human
    assert (harness.workspace / "e.txt").read_text() == content + "!"
    assert not (harness.workspace / "d.txt").exists()


async def test_a_long_reply_that_calls_tools_is_stored_and_the_model_sees_it(
    harness: Harness,
) -> None:
    """A 50 KB reply beside a tool call travels as a preview and a reference; the model's next
    request holds every word of it. An answer (no tool calls) stays whole: it is the result."""
    said = "thinking " * (BIG // 9)
    answer = "answer " * 1_000
    model = harness.script(
        {"content": said, "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": answer},
    )
    handle = await harness.start(model)
    result = await handle.result()
    assert result.status is RunStatus.DONE and result.answer == answer.strip()
    sent = [m for m in harness.requests(model)[-1]["messages"] if m["role"] == "assistant"]
    assert sent[0]["content"] == said
    history = await handle.fetch_history()
    assert sum(e.ByteSize() for e in history.events) < BIG
