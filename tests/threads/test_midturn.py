"""A message that arrives while a thread's turn runs, under each policy (queue, steer,
interrupt, reject): twenty sent at once, none lost, none answered twice, and the trace and the
conversation say where each landed; an interrupt keeps a completed command's effect and
observation, and the partial reply of the model call it cuts."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

from tests.support.examples import run_example
from tests.support.harness import Harness
from tests.support.stream import stream_items
from tests.support.threads import answered, start_thread
from treadle.activities.errors import ThreadUnavailable
from treadle.activities.thread_turns import send_message, wait_for_answer
from treadle.workflows.agent.messages.events import TokenDelta
from treadle.workflows.agent.messages.models import MidTurn, SendReceipt, ThreadExport
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.memory import INTERRUPTED_MARK
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "a.md", "content": "a"}}
MESSAGES = [f"message {n:02d}" for n in range(20)]


async def close(handle: Any) -> None:
    """Close the thread and wait for its end: its history joins the replay checks."""
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()


async def send_all(handle: Any, mode: MidTurn | None) -> list[SendReceipt]:
    """The twenty messages, sent one after the other without waiting for anything else."""
    return [await send_message(handle, text, mode=mode) for text in MESSAGES]


async def said_something(handle: Any, step: int) -> str:
    """Wait until the model call of ``step`` is in flight and has said something (its first
    tokens are on the thread's stream); what it said."""
    while True:
        deltas = [v for _, v in await stream_items(handle) if isinstance(v, TokenDelta)]
        published = "".join(d.text for d in deltas if d.step == step)
        if published:
            return published
        await asyncio.sleep(0.1)


def user_messages(exported: ThreadExport) -> list[str]:
    return [m.content or "" for m in exported.conversation.messages if m.role == "user"]


async def trace_data(handle: Any, event: str) -> list[str]:
    trace = await handle.query(AgentWorkflow.trace)
    return [e.data for e in trace.entries if e.event == event]


async def test_queued_messages_are_each_answered_once_in_order(harness: Harness) -> None:
    """Queue: twenty messages sent during a turn wait in order; each is a turn of its own,
    answered once, and the trace says each was queued at its place."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "done"})
    handle = await start_thread(harness, model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    receipts = await send_all(handle, MidTurn.QUEUE)
    assert [(r.queued, r.position, r.mode) for r in receipts] == [
        (True, n + 1, MidTurn.QUEUE) for n in range(20)
    ]
    await handle.signal(AgentWorkflow.approve, {})
    await answered(harness, handle, 21)
    exported: ThreadExport = await handle.query(AgentWorkflow.export)
    assert user_messages(exported)[1:] == MESSAGES  # each once, in order, after the task
    received = await trace_data(handle, "UserMessageReceived")
    assert [d.partition(":")[0] for d in received] == [f"queued at {n + 1}" for n in range(20)]


@pytest.mark.replay_corpus
async def test_steered_messages_join_the_running_turn(harness: Harness) -> None:
    """Steer (the thread's policy, and one by the stock temporal CLI): twenty messages sent while
    a call waits for approval join that turn; the call runs, and the next model request reads
    its result and then all twenty, once each; the turn answers once."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "done"})
    handle = await start_thread(harness, model, require_approval=["write_file"], mid_turn="steer")
    await harness.wait_for_state(handle, "WaitingForHuman")
    receipts = [await send_message(handle, text) for text in MESSAGES[:19]]
    body = json.dumps({"text": MESSAGES[19], "mode": "steer"})
    done = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "send",
        "--input", body, "-o", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [(r.mode, r.position, r.step) for r in receipts] == [
        (MidTurn.STEER, n + 1, 1) for n in range(19)
    ]
    assert '"mode": "steer"' in done.stdout
    await handle.signal(AgentWorkflow.approve, {})
    status = await answered(harness, handle, 1)
    assert status.final_answer == "done"
    second = harness.requests(model)[1]["messages"]
    roles = [m["role"] for m in second]
    assert roles[-21:] == ["tool"] + ["user"] * 20  # the call's result, then the messages
    assert [m["content"] for m in second[-20:]] == MESSAGES
    assert (harness.workspace / "a.md").read_text() == "a"
    exported: ThreadExport = await handle.query(AgentWorkflow.export)
    assert Counter(user_messages(exported)[1:]) == Counter(MESSAGES)
    trace = await handle.query(AgentWorkflow.trace)
    assert len([e for e in trace.entries if e.event == "TurnAnswered"]) == 1
    assert await trace_data(handle, "MessagesJoined") == ["step 2 reads 20 message(s)"]
    await close(handle)


async def test_steered_messages_left_when_the_turn_answers_open_the_next(
    harness: Harness,
) -> None:
    """A message steered into a turn whose model call then answers is not lost: it opens the
    next turn, which answers it."""
    first = " ".join(f"w{n}" for n in range(200))
    model = harness.script({"content": first, "chunk_delay": 0.05}, {"content": "second answer"})
    handle = await start_thread(harness, model, stream_tokens=True)
    await said_something(handle, step=1)
    receipt = await send_message(handle, "also this", mode=MidTurn.STEER)
    assert receipt.mode is MidTurn.STEER
    status = await answered(harness, handle, 2)
    assert status.final_answer == "second answer"
    assert user_messages(await handle.query(AgentWorkflow.export))[1:] == ["also this"]
    assert await trace_data(handle, "MessagesCarried") == [
        "1 steered message(s) open the next turn"
    ]


@pytest.mark.replay_corpus
async def test_interrupts_cut_the_model_call_and_keep_its_partial_reply(
    harness: Harness,
) -> None:
    """Interrupt: the streaming model call in flight is cut; what it had said is kept in the
    conversation marked interrupted; twenty interrupting messages are each read once, and the
    thread answers once they are all read."""
    slow = " ".join(f"w{n}" for n in range(400))
    model = harness.script({"content": slow, "chunk_delay": 0.05}, {"content": "done"})
    handle = await start_thread(
        harness, model, stream_tokens=True, heartbeat_timeout_seconds=1, max_steps=100
    )
    published = await said_something(handle, step=1)
    receipts = await send_all(handle, MidTurn.INTERRUPT)
    assert receipts[0].mode is MidTurn.INTERRUPT
    status = await wait_for_answer(handle)  # every message read, nothing queued
    exported: ThreadExport = await handle.query(AgentWorkflow.export)
    users = user_messages(exported)[1:]
    assert Counter(users) == Counter(MESSAGES)  # each read once
    cut = [m for m in exported.conversation.messages if m.interrupted]
    assert cut, "no reply was kept as interrupted"
    first = cut[0].content or ""
    assert first.startswith(published) and first.endswith(INTERRUPTED_MARK)
    assert len(first) < len(slow)
    interrupted = await trace_data(handle, "ModelInterrupted")
    assert interrupted and interrupted[0].startswith("step 1: kept ")
    # OpenAI's stream reports its usage in its last chunk: a cut call's is unknown, and said so.
    assert "its tokens are unknown (the provider reported none before the cut)" in interrupted[0]
    assert (status.state, status.final_answer, status.queued_messages) == (
        State.WAITING_FOR_USER_INPUT,
        "done",
        0,
    )
    await close(handle)


@pytest.mark.replay_corpus
async def test_an_interrupted_calls_reported_tokens_count_toward_the_runs_usage(
    harness: Harness,
) -> None:
    """An Anthropic stream reports its input tokens as it starts: a call cut by an interrupt
    counts what it reported (the input, and the first output count) in the thread's usage,
    and the trace says how many; the call that follows adds its own."""
    slow = " ".join(f"w{n}" for n in range(400))
    model = harness.script(
        {"content": slow, "chunk_delay": 0.05,
         "usage": {"prompt_tokens": 1200, "completion_tokens": 900}},
        {"content": "done", "usage": {"prompt_tokens": 40, "completion_tokens": 2}},
        provider="anthropic",
    )  # fmt: skip
    handle = await start_thread(
        harness, model, stream_tokens=True, heartbeat_timeout_seconds=1, max_steps=10
    )
    await said_something(handle, step=1)
    await send_message(handle, "stop, wrong file", mode=MidTurn.INTERRUPT)
    status = await wait_for_answer(handle)
    assert status.final_answer == "done"
    interrupted = await trace_data(handle, "ModelInterrupted")
    assert len(interrupted) == 1 and interrupted[0].startswith("step 1: kept ")
    assert interrupted[0].endswith("; counted 1201 token(s) the provider reported before the cut")
    assert (status.usage.prompt_tokens, status.usage.completion_tokens) == (1240, 3)
    assert status.usage.estimated_tokens == 0
    await close(handle)


@pytest.mark.replay_corpus
async def test_an_interrupt_during_a_command_keeps_its_effect_and_observation(
    harness: Harness,
) -> None:
    """A command that runs when an interrupt arrives finishes: its file is written once, its
    output is the observation the next model call reads, then the message."""
    wait_then_write = (
        "sh -c 'while [ ! -f go ]; do sleep 0.05; done; echo made > made.txt; echo made'"
    )
    command = {"name": "run_command", "arguments": {"command": wait_then_write}}
    model = harness.script({"tool_calls": [command]}, {"content": "stopped"})
    handle = await start_thread(harness, model, allow_run_command=True, command_allowlist=["sh"])
    await harness.wait_for_state(handle, "Acting")
    receipt = await send_message(handle, "stop, wrong file", mode=MidTurn.INTERRUPT)
    assert (receipt.mode, receipt.state) == (MidTurn.INTERRUPT, State.ACTING)
    (harness.workspace / "go").write_text("")
    status = await answered(harness, handle, 1)
    assert status.final_answer == "stopped"
    assert (harness.workspace / "made.txt").read_text() == "made\n"
    second = harness.requests(model)[1]["messages"]
    assert second[-2]["role"] == "tool" and "made" in second[-2]["content"]
    assert second[-1] == {"role": "user", "content": "stop, wrong file"}
    [where] = await trace_data(handle, "UserMessageReceived")
    assert "the running tools finish" in where
    await close(handle)


async def test_an_interrupt_while_a_call_waits_for_approval_does_not_run_it(
    harness: Harness,
) -> None:
    """A call waiting for approval when an interrupt arrives is not run: its result says so,
    and the model reads it and the message."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "as you say"})
    handle = await start_thread(harness, model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await send_message(handle, "no, don't write", mode=MidTurn.INTERRUPT)
    status = await answered(harness, handle, 1)
    assert status.final_answer == "as you say"
    assert not (harness.workspace / "a.md").exists()
    second = harness.requests(model)[1]["messages"]
    assert "not run: the user's message interrupted the turn" in second[-2]["content"]
    assert second[-1]["content"] == "no, don't write"


async def test_rejected_messages_are_refused_while_a_turn_runs(harness: Harness) -> None:
    """Reject: twenty messages sent during a turn are each refused with the reason and leave
    nothing in the conversation; once the thread waits, a message is taken."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "done"}, {"content": "hi"})
    handle = await start_thread(harness, model, require_approval=["write_file"], mid_turn="reject")
    await harness.wait_for_state(handle, "WaitingForHuman")
    for text in MESSAGES:
        with pytest.raises(ThreadUnavailable, match="the thread is busy: a turn is running"):
            await send_message(handle, text)
    await handle.signal(AgentWorkflow.approve, {})
    await answered(harness, handle, 1)
    assert user_messages(await handle.query(AgentWorkflow.export))[1:] == []
    receipt = await send_message(handle, "now?")
    assert (receipt.queued, receipt.mode) == (False, None)
    await answered(harness, handle, 2)
    assert user_messages(await handle.query(AgentWorkflow.export))[1:] == ["now?"]


async def test_the_docs_example_runs_as_written(harness: Harness, tmp_path: Path) -> None:
    """docs/threads.md's mid-turn example, run as a script against the harness (its demo names
    swapped in): two messages steered into the waiting turn, one refused, both read by step 3."""
    page = (Path(__file__).parents[2] / "docs" / "threads.md").read_text()
    section = page[page.index("## A message while a turn runs") :]
    (code,) = re.findall(r"```python\n(.*?)```", section[: section.index("\n## ", 3)], re.DOTALL)
    lines = await run_example(harness, code, tmp_path)
    assert lines[:2] == [
        "'also mention the tests': steer, read before step 3",
        "'and keep it short': steer, read before step 3",
    ], lines
    assert lines[2].startswith("refused: the thread is busy: a turn is running (step 2"), lines
    assert lines[3].startswith("answer: I listed the workspace"), lines
    assert lines[-1] == "step 3: MessagesJoined: step 3 reads 2 message(s)", lines


async def test_a_thread_cancelled_during_an_interruptible_call_ends_cancelled(
    harness: Harness,
) -> None:
    """Cancelling a thread while its model call (one a message may interrupt) streams ends it
    Cancelled, as any run: the call's cut is not taken for a user's interrupt."""
    slow = " ".join(f"w{n}" for n in range(400))
    model = harness.script({"content": slow, "chunk_delay": 0.05})
    handle = await start_thread(harness, model, stream_tokens=True, heartbeat_timeout_seconds=1)
    await said_something(handle, step=1)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as ended:
        await handle.result()
    assert isinstance(ended.value.cause, CancelledError)
    trace = await handle.query(AgentWorkflow.trace)
    assert "ModelInterrupted" not in [e.event for e in trace.entries]
    assert trace.entries[-1].event == "Cancel"
