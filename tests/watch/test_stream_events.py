"""The live stream a run publishes: what a run with tools, an approval and an answer says, in
order; offsets that go on across continue-as-new; a watch that resumes from an offset; and that
watching (by the stream's query) adds nothing to the run's history."""

from __future__ import annotations

import pytest

from tests.support.harness import Harness, keep_history, replayer
from tests.support.stream import events, stream_items, wait_for_event
from tests.support.threads import answered, send, start_thread
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import (
    AgentResult,
    AgentStatus,
    ApproveSignal,
    RunStatus,
)
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hello"}}
READ = {"name": "read_file", "arguments": {"path": "notes.md"}}


def kinds(stream: list[AgentEvent]) -> list[str]:
    return [e.kind for e in stream if e.kind != "state"]


async def test_a_run_with_tools_an_approval_and_an_answer(harness: Harness) -> None:
    """Every step shows up in order: the model's reply and its calls, the approval with the
    commands that answer it, the decision, each tool starting and ending, the answer."""
    model = harness.script(
        {"content": "Writing first.", "tool_calls": [WRITE]},
        {"tool_calls": [READ]},
        {"content": "notes.md says hello."},
    )
    handle = await harness.start(model, require_approval=["write_file"])
    needed = await wait_for_event(handle, lambda e: e.kind == "approval_needed")
    assert (needed.tool, needed.arguments) == ("write_file", WRITE["arguments"])
    assert needed.text == "write_file notes.md"
    assert f"treadle approve {handle.id} --call {needed.call_id}" in needed.commands
    assert any(c.startswith("temporal workflow signal") for c in needed.commands)
    await handle.signal(AgentWorkflow.approve, ApproveSignal(call_id=needed.call_id or ""))
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE

    stream = await events(handle)
    assert kinds(stream) == [
        "started",
        "model",
        "approval_needed",
        "decided",
        "tool_started",
        "tool_finished",
        "model",
        "tool_started",
        "tool_finished",
        "model",
        "answer",
        "ended",
    ]
    by_kind = {e.kind: e for e in stream}
    first_model = next(e for e in stream if e.kind == "model")
    assert first_model.text == "Writing first."
    assert first_model.tool_calls == ("write_file notes.md",)
    assert first_model.total_tokens and first_model.total_tokens > 0
    finished = [e for e in stream if e.kind == "tool_finished"]
    assert [(e.tool, e.target, e.ok) for e in finished] == [
        ("write_file", "notes.md", True),
        ("read_file", "notes.md", True),
    ]
    assert "hello" in finished[1].text
    assert by_kind["answer"].text == "notes.md says hello."
    assert by_kind["ended"].state == "Done"
    transitions = [e.text.split(" · ")[0] for e in stream if e.kind == "state"]
    assert transitions[0] == "Idle -> Planning"
    assert "Planning -> WaitingForHuman" in transitions
    assert transitions[-1] == "Planning -> Done"
    # Offsets are the stream's own, and every event carries the step it belongs to.
    assert [e.step for e in stream if e.kind == "model"] == [1, 2, 3]


async def test_errors_and_refusals_are_published(harness: Harness) -> None:
    """A signal the run does not understand, a failed tool and the run's error are events."""
    missing = {"name": "read_file", "arguments": {"path": "nope.md"}}
    model = harness.script({"tool_calls": [missing]}, {"tool_calls": [missing]})
    # Each call waits for a human, so the misspelt signal reaches a run that is certain to be
    # alive (a run left to itself could end before the signal arrives).
    handle = await harness.start(model, max_steps=2, require_approval=["read_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.signal("aprove", {"call_id": "x"})
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    await harness.trace_events(handle, "AwaitingApproval", 2)
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    stream = await events(handle)
    refused = [e for e in stream if e.kind == "refused"]
    assert refused and refused[0].text.startswith("aprove: unknown signal")
    failed = [e for e in stream if e.kind == "tool_finished"]
    assert failed and all(e.ok is False for e in failed)
    assert failed[0].text.startswith("ERROR:")
    error = next(e for e in stream if e.kind == "error")
    assert "max steps" in error.text
    assert stream[-1].kind == "ended" and stream[-1].state == "Error"


async def test_offsets_go_on_across_continue_as_new_and_a_watch_resumes(
    harness: Harness,
) -> None:
    """A thread that hands itself over keeps one stream: offsets keep counting, the tail
    comes along, and a reader that resumes after each turn from the last offset it saw, across
    the hand-overs, misses nothing."""
    model = harness.script(*({"content": f"answer {i}"} for i in range(5)))
    handle = await start_thread(harness, model, continue_as_new_after_events=20)
    await answered(harness, handle, 1)
    read = await stream_items(handle)
    assert read
    resume_at = 0
    for i in range(1, 5):
        await send(handle, f"message {i}")
        status: AgentStatus = await answered(harness, handle, i + 1)
        resume_at = read[-1][0] + 1
        read += await stream_items(handle, resume_at)
    assert status.run_in_chain > 1
    assert status.stream_offset > resume_at
    offsets = [offset for offset, _ in read]
    assert offsets == list(range(len(offsets)))  # from the first item on, no gap
    events = [e for _, e in read if isinstance(e, AgentEvent)]
    assert [e.text for e in events if e.kind == "answer"] == [f"answer {i}" for i in range(5)]
    assert [e.text for e in events if e.kind == "message"] == [f"message {i}" for i in range(1, 5)]
    assert any(e.kind == "continued" for e in events)
    # The events reach the run that answered last, or a later one: a thread may hand over
    # again while it waits, after its status was read.
    assert max(e.run for e in events) >= status.run_in_chain
    # What the stream keeps after the hand-overs is one unbroken tail up to now, reaching back
    # at least to where the reader last resumed (the tail is carried, bounded by STREAM_EVENTS).
    kept = [o for o, _ in await stream_items(handle)]
    assert kept == list(range(kept[0], kept[0] + len(kept)))
    assert kept[0] <= resume_at
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()


@pytest.mark.replay_corpus
async def test_watching_adds_nothing_to_history(harness: Harness) -> None:
    """Reading the stream is a query: a run read a hundred times has the same history length."""
    model = harness.script({"content": "done"})
    handle = await harness.start(model)
    await handle.result()
    before = len((await handle.fetch_history()).events)
    for _ in range(100):
        await stream_items(handle)
    history = await handle.fetch_history()
    assert len(history.events) == before
    await replayer().replay_workflow(history)
    keep_history("stream-events-answered", history)


def test_events_are_bounded() -> None:
    """A long answer or a big write's arguments are cut in the event, with a note of how much."""
    from datetime import UTC, datetime

    from treadle.workflows.agent.messages.events import MAX_ARGUMENT_CHARS, MAX_EVENT_TEXT, bounded

    big = AgentEvent(
        kind="approval_needed",
        step=1,
        state="WaitingForHuman",
        at=datetime.now(UTC),
        text="x" * (MAX_EVENT_TEXT + 10),
        arguments={"path": "a.md", "content": "y" * 50_000, "nested": ["z" * 2_000, 3]},
    )
    cut = bounded(big)
    assert cut.text == "x" * MAX_EVENT_TEXT + "… (10 more characters)"
    assert cut.arguments is not None
    assert cut.arguments["path"] == "a.md"
    assert cut.arguments["content"].startswith("y" * MAX_ARGUMENT_CHARS + "… (49000 more")
    assert cut.arguments["nested"][1] == 3
    assert len(cut.model_dump_json()) < 8_000
    small = big.model_copy(update={"text": "ok", "arguments": {"path": "a.md"}})
    assert bounded(small) is small


async def test_the_tail_carried_across_continue_as_new_is_bounded_in_bytes(
    harness: Harness,
) -> None:
    """Long answers in a thread that continues as new often: what the next run's input carries
    of the stream stays within its byte bound, so the hand-over never nears the 2 MB limit; the
    offsets still run on without a hole in what is kept."""
    from treadle.workflows.agent.messages.events import CARRIED_BYTES, EVENTS_CARRIED

    long = "word " * 1_000  # 5,000 characters: events carry 4,000 of them
    model = harness.script(*({"content": f"{i} {long}"} for i in range(40)))
    handle = await start_thread(harness, model, continue_as_new_after_events=20)
    await answered(harness, handle, 1)
    for i in range(1, 40):
        await send(handle, f"message {i}")
        status: AgentStatus = await answered(harness, handle, i + 1)
    kept = await stream_items(handle)
    offsets = [offset for offset, _ in kept]
    # The run may hand over between the status and this read: the next run's ``resumed``
    # then follows, at the next offset.
    assert offsets == list(range(offsets[0], offsets[-1] + 1))
    assert offsets[-1] + 1 >= status.stream_offset
    assert offsets[0] > 0  # the oldest were left behind
    # What came over from earlier runs is within the byte bound (wire size ~4/3 of JSON).
    current = status.run_in_chain
    carried = [e for _, e in kept if isinstance(e, AgentEvent) and e.run < current]
    assert len(carried) < EVENTS_CARRIED
    assert sum(len(e.model_dump_json()) for e in carried) * 4 / 3 <= CARRIED_BYTES
    first = await harness.client.get_workflow_handle(handle.id).describe()
    assert first.run_id != handle.first_execution_run_id
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()
