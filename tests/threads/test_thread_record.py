"""A thread keeps everything: its record in the store is whole whatever its length, what the
model is shown of a long conversation is a view, and a hand-over carries the conversation by
reference, at the same cost however long the chain (real dev server, scripted model server,
``starter.py`` processes)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payloads
from temporalio.client import WorkflowHistory

from tests.support.harness import TEST_STORE, Harness
from tests.support.processes import run_cli
from tests.support.threads import answered, send, start_thread
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.store.conversation import ConversationStore, whole_thread
from treadle.workflows.agent.messages.models import (
    AgentInput,
    AgentResult,
    AgentStatus,
    RunStatus,
    ThreadExport,
    ToolCall,
    ToolOutcome,
    TraceEntry,
    Turn,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import handover
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.threads import ImportRefused, rebuild
from treadle.workflows.agent.workflow import AgentWorkflow

VIEW_NOTE = "longer than this model's context"


def _in_arrival_order(harness: Harness, *turns: dict[str, Any]) -> str:
    """A scripted model that answers each request with its next turn: a view shows it fewer
    earlier answers than the conversation holds, so it cannot count them to find its turn."""
    name = f"scripted-{uuid.uuid4().hex[:10]}"
    harness.models.add_model(name, list(turns), order="arrival")
    return f"openai:{name}"


async def _chain_histories(harness: Harness, workflow_id: str) -> list[WorkflowHistory]:
    """The history of every run of the chain, first run to last."""
    histories = []
    run_id: str | None = None
    while True:
        history = await harness.client.get_workflow_handle(
            workflow_id, run_id=run_id
        ).fetch_history()
        if run_id is None:  # the latest run: walk the chain from its first
            run_id = history.events[
                0
            ].workflow_execution_started_event_attributes.first_execution_run_id
            continue
        histories.append(history)
        ended = history.events[-1]
        if not ended.HasField("workflow_execution_continued_as_new_event_attributes"):
            return histories
        run_id = ended.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


async def _hand_over_inputs(harness: Harness, workflow_id: str) -> list[Payloads]:
    """The input of every continue-as-new command of the chain, first run to last."""
    return [
        h.events[-1].workflow_execution_continued_as_new_event_attributes.input
        for h in (await _chain_histories(harness, workflow_id))[:-1]
    ]


async def test_a_thread_shown_as_a_view_still_exports_and_imports_every_message(
    harness: Harness, tmp_path: Path
) -> None:
    """A thread whose conversation outgrows its model's window (the model is shown a summary
    and the recent turns) and that hands over several times: ``export`` still holds every
    message, in order, and ``import`` continues it."""
    turns = 24
    model = _in_arrival_order(harness, *({"content": f"answer {i}"} for i in range(turns)))
    handle = await start_thread(
        harness,
        model,
        continue_as_new_after_events=20,
        context_window_tokens={"default": 3_000},
    )
    await answered(harness, handle, 1)
    for i in range(1, turns):
        await send(handle, f"message {i}: " + "words " * 200)
        status: AgentStatus = await answered(harness, handle, i + 1)
    assert status.run_in_chain > 3  # several hand-overs

    last = harness.requests(model)[-1]["messages"]
    assert any(VIEW_NOTE in (m.get("content") or "") for m in last)  # a view was shown
    assert len(last) < 2 * turns
    assert last[-1]["content"].startswith(f"message {turns - 1}:")  # the recent turn, whole

    exported = await run_cli(*harness.cli_args(), "export", handle.id)
    assert exported.returncode == 0, exported.stderr
    thread = ThreadExport.model_validate_json(exported.stdout)
    assert thread.record is None  # the file is the whole conversation on its own
    users = [m.content or "" for m in thread.conversation.messages if m.role == "user"]
    assert users[0] == "Hello, remember the word 'marmalade'."
    assert [u.split(":")[0] for u in users[1:]] == [f"message {i}" for i in range(1, turns)]
    assert [m.content for m in thread.conversation.messages if m.role == "assistant"] == [
        f"answer {i}" for i in range(turns)
    ]
    assert not any(VIEW_NOTE in u for u in users)  # the view's summary is not the record
    answer: ThreadExport = await handle.query(AgentWorkflow.export)
    assert answer.record is not None  # the query's answer names the record, and is no file
    with pytest.raises(ImportRefused, match=r"treadle export"):
        rebuild(answer, str(harness.workspace), datetime.now(UTC))

    path = tmp_path / "thread.json"
    path.write_text(exported.stdout)
    follow_up = harness.script({"content": "imported and answering"})
    new_id = f"imported-{handle.id}"
    harness.handles.append(harness.client.get_workflow_handle(new_id))
    imported = await run_cli(
        *harness.cli_args(), "import", str(path), "--id", new_id,
        "--workspace", str(harness.workspace), "--model", follow_up,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    answer = await run_cli(*harness.cli_args(), "send", new_id, "and now?", "--wait")
    assert (answer.returncode, answer.stdout.strip()) == (0, "imported and answering")
    (request,) = harness.requests(follow_up)
    assert request["messages"][-1]["content"] == "and now?"
    await run_cli(*harness.cli_args(), "close", new_id)
    await handle.execute_update(AgentWorkflow.close)


async def test_a_5_mb_conversation_takes_its_next_turn(harness: Harness) -> None:
    """Fifty messages of 100,000 characters: the conversation (5 MB) is far past Temporal's
    payload limits, yet the thread takes its next turn (its model is shown a view) and its
    record holds every message."""
    count, size = 50, 100_000
    model = _in_arrival_order(harness, *({"content": f"got {i}"} for i in range(count + 2)))
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    for i in range(1, count + 1):
        await send(handle, f"{i:03d} " + chr(ord("a") + i % 26) * (size - 4))
    await answered(harness, handle, count + 1)
    await send(handle, "Which was the first?")
    status: AgentStatus = await answered(harness, handle, count + 2)
    assert status.final_answer == f"got {count + 1}"

    last = harness.requests(model)[-1]["messages"]
    assert last[-1]["content"] == "Which was the first?"
    assert any(VIEW_NOTE in (m.get("content") or "") for m in last)

    exported: ThreadExport = await handle.query(AgentWorkflow.export)
    assert exported.record is not None
    whole = await whole_thread(ConversationStore(FileBlobStore(TEST_STORE)), exported)
    users = [m.content or "" for m in whole.conversation.messages if m.role == "user"]
    assert [u[:3] for u in users[1:-1]] == [f"{i:03d}" for i in range(1, count + 1)]
    assert sum(len(u) for u in users) >= count * size
    await handle.execute_update(AgentWorkflow.close)


async def test_every_hand_over_of_a_chain_costs_the_same(harness: Harness) -> None:
    """A run that hands over several times: the continue-as-new command's input is the same
    size at its first hand-over and its last (within the bounds of the tracker's own lists), and
    carries no copy of the conversation."""
    steps = 60
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": "notes.md", "content": f"step {i}: " + "n" * 300},
                }
            ]
        }
        for i in range(steps)
    ]
    model = harness.script(*script, {"content": "wrote the notes " * 4})
    handle = await harness.start(model, continue_as_new_after_events=150, max_steps=steps + 5)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    inputs = await _hand_over_inputs(harness, handle.id)
    assert len(inputs) >= 4
    sizes = [inputs_.ByteSize() for inputs_ in inputs]
    assert max(sizes) < 40_000
    # The first is a little smaller (the tracker's recent actions are not yet at their bound),
    # and the second may be (the stream's kept events: where in a step the first run's
    # threshold falls is its own, the runs after it all fall at the same place); from then
    # on every hand-over is the same size, whatever the step.
    assert sizes[-1] - sizes[0] <= 0.15 * sizes[0], sizes
    assert sizes[1] <= sizes[-1] + 64, sizes
    assert max(sizes[2:]) - min(sizes[2:]) <= 64, sizes
    carried = json.loads(inputs[-1].payloads[0].data)["resume"]
    assert "input" not in carried  # the run's input is the next run's input, not copied
    assert len(carried["memory"]["history"]) <= 2  # only what no model call has sent
    assert carried["memory"]["conversation_head"]
    assert len(carried["trace"]) == handover.TRACE_TAIL


async def test_a_wide_progress_window_crosses_hand_overs_in_a_few_bytes_an_action(
    harness: Harness,
) -> None:
    """A chain whose tracker keeps up to 1,000 recent actions: each carried action costs a
    hand-over under 40 bytes, the chain's history stays under 4 KiB a step, and the no-progress
    rule still sees every action across the hand-over: 48 new reads, then re-reads, halt at
    exactly the 30th re-read (a window that lost the run before would still be filling)."""
    reads, window = 48, 30
    for i in range(reads):
        (harness.workspace / f"r{i}.txt").write_text(f"{i:04d}" * 500)
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": f"r{i}.txt"}}]}
        for i in (*range(reads), *(reads - 4 + j % 4 for j in range(window)))
    ]
    model = harness.script(*script, {"content": "read them all"})
    progress = {"progress_window": window, "max_recent_actions": 1000}
    handle = await harness.start(
        model,
        max_steps=reads + window + 5,
        progress=progress,
        recovery="halt",
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED, result
    assert result.error == f"halted: No progress in the last {window} actions: {window} read-only"
    assert result.steps == reads + window
    histories = await _chain_histories(harness, handle.id)
    assert len(histories) >= 2, len(histories)  # 800 events a run, the default
    resumes = [
        json.loads(h.events[-1].workflow_execution_continued_as_new_event_attributes.input
                   .payloads[0].data)["resume"]
        for h in histories[:-1]
    ]  # fmt: skip
    actions = resumes[-1]["tracker"]["recent_actions"]
    assert len(actions) >= window, len(actions)
    assert len(json.dumps(actions)) / len(actions) < 40
    per_step = sum(e.ByteSize() for h in histories for e in h.events) / result.steps
    assert per_step < 4 * 1024, per_step


def _run_at(step: int) -> AgentRun:
    """A run as it might be at ``step``: one turn, one trace entry and one new file per step."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    run = AgentRun.begin(AgentInput(task="t", model="openai:m", workspace="/w"), now)
    turns = tuple(
        Turn(
            step=i,
            outcomes=(
                ToolOutcome.of(
                    ToolCall(id=f"c{i}", name="write_file", arguments="{}"), "ok", success=True
                ),
            ),
        )
        for i in range(step)
    )
    memory = run.memory.model_copy(
        update={"history": turns, "conversation_head": "0" * 64, "conversation_turns": step - 1}
    )
    tracker = run.tracker.model_copy(
        update={
            "files_modified": {f"src/f{i:06d}.py": "ab" * 8 for i in range(step)},
            "seen_reads": {f"src/r{i:06d}.py": "cd" * 8 for i in range(min(step, 500))},
        }
    )
    trace = [
        TraceEntry(step=i, state=State.OBSERVING, event="ToolObserved", data="x", timestamp=now)
        for i in range(step)
    ]
    return run.model_copy(update={"memory": memory, "tracker": tracker, "trace": trace})


def test_every_carried_list_is_bounded() -> None:
    """The state handed over at step 100 and at step 100,000 is the same size: the unsent
    turn, the trace's tail and the latest files, with counts of what the store or the earlier
    runs hold."""
    sizes = []
    for step in (100, 100_000):
        carried = _run_at(step).handed_over(handover.TRACE_TAIL, handover.FILES_CARRIED)
        assert len(carried.memory.history) == 1
        assert carried.memory.turns_stored == step - 1
        assert len(carried.trace) == handover.TRACE_TAIL
        assert carried.trace_earlier == step - handover.TRACE_TAIL
        assert len(carried.tracker.files_modified) == handover.FILES_CARRIED
        assert (
            carried.tracker.summary(carried.started_at, carried.started_at).files_modified == step
        )
        assert len(carried.tracker.seen_reads) <= handover.FILES_CARRIED
        sizes.append(len(carried.model_dump_json(exclude={"input"})))
    assert abs(sizes[1] - sizes[0]) <= 0.05 * sizes[0], sizes


def test_a_whole_and_a_lean_resume_both_resume() -> None:
    """A resume that carries the whole run (a hand-over without a store, ``treadle import``) and
    one that leaves out the input (a hand-over by reference) both resume."""
    run = _run_at(3)
    whole = run.input.model_copy(update={"resume": run.model_dump(mode="json")})
    assert handover.resumed(whole).memory.history == run.memory.history
    lean = run.input.model_copy(update={"resume": run.model_dump(mode="json", exclude={"input"})})
    assert handover.resumed(lean).input == run.input


async def test_reflection_summarises_beside_the_record(harness: Harness) -> None:
    """Reflecting adds its summary to the conversation and the model is shown it first, yet the
    record still holds every call the summary stands for."""
    summarizer = harness.script({"content": "Wrote a0-a3."})
    writes = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": f"a{i}.md", "content": "x"}}]}
        for i in range(6)
    ]
    model = _in_arrival_order(harness, *writes, {"content": "wrote them all"})
    handle = await harness.start(
        model, reflect_every_n_steps=4, reflection_keep_recent=1, reflection_model=summarizer
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    after = harness.requests(model)[4]["messages"]  # the first call after Reflecting
    assert after[2]["content"].startswith("Summary of steps 1-3")
    assert "a0.md" not in json.dumps(after[3:])  # what it summarised is not shown again
    exported: ThreadExport = await handle.query(AgentWorkflow.export)
    whole = await whole_thread(ConversationStore(FileBlobStore(TEST_STORE)), exported)
    written = [
        json.loads(c.arguments)["path"] for m in whole.conversation.messages for c in m.tool_calls
    ]
    assert written == [f"a{i}.md" for i in range(6)]
    assert any(
        (m.content or "").startswith("Summary of steps 1-3") for m in whole.conversation.messages
    )
