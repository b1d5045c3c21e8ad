"""Threads (Loom's conversation that waits for its user): every message a turn with all that
was said before in context, messages queued behind a running turn, an idle timeout on a durable
timer, closing, refusals of bad messages, and continue-as-new carrying the whole run."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.support.harness import Harness, keep_history, replayer, run_to_end_on_time_skipping
from tests.support.threads import answered, send, start_thread
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentResult,
    AgentStatus,
    RunStatus,
    ThreadExport,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.threads import ImportRefused, rebuild
from treadle.workflows.agent.workflow import AgentWorkflow


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


@pytest.mark.replay_corpus
async def test_every_message_is_a_turn_with_everything_said_before(harness: Harness) -> None:
    """Three turns: the third request carries the first message and both earlier answers."""
    model = harness.script(
        {"content": "Noted: marmalade."},
        {"content": "You asked me to remember something."},
        {"content": "The word was marmalade."},
    )
    handle = await start_thread(harness, model)
    status = await answered(harness, handle, 1)
    assert status.final_answer == "Noted: marmalade."
    assert status.thread
    await send(handle, "What did I ask?")
    await answered(harness, handle, 2)
    await send(handle, "Which word?")
    status = await answered(harness, handle, 3)
    assert status.final_answer == "The word was marmalade."
    third = harness.requests(model)[2]
    assert user_texts(third) == [
        "Hello, remember the word 'marmalade'.",
        "What did I ask?",
        "Which word?",
    ]
    assistant = [m["content"] for m in third["messages"] if m["role"] == "assistant"]
    assert assistant == ["Noted: marmalade.", "You asked me to remember something."]
    await handle.execute_update(AgentWorkflow.close)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    assert result.answer == "The word was marmalade."


async def test_messages_sent_during_a_turn_are_queued_in_order(harness: Harness) -> None:
    """While a turn waits for approval, two messages queue (1, 2) and are answered in order."""
    write = {"name": "write_file", "arguments": {"path": "a.md", "content": "a"}}
    model = harness.script(
        {"tool_calls": [write]}, {"content": "wrote a.md"}, {"content": "one"}, {"content": "two"}
    )
    handle = await start_thread(harness, model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    first = await send(handle, "first question")
    second = await send(handle, "second question")
    assert (first.queued, first.position) == (True, 1)
    assert (second.queued, second.position) == (True, 2)
    assert first.state is State.WAITING_FOR_HUMAN
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.queued_messages == 2
    await handle.signal(AgentWorkflow.approve, {})
    status = await answered(harness, handle, 3)
    assert status.final_answer == "two"
    requests = harness.requests(model)
    assert user_texts(requests[2])[-1] == "first question"
    assert user_texts(requests[3])[-2:] == ["first question", "second question"]


async def test_close_ends_the_thread_and_refuses_later_messages(harness: Harness) -> None:
    """``close`` ends a waiting thread Done; a message after it is refused with the reason."""
    model = harness.script({"content": "hi"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    await handle.execute_update(AgentWorkflow.close)
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "hi")
    trace = await handle.query(AgentWorkflow.trace)
    assert ("WaitingForUserInput", "ThreadClosed") in [(e.state, e.event) for e in trace.entries]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"text": "   "}, "the message is empty"),
        ({"text": ""}, "at least 1 character"),
        ({"text": "x" * 100_001}, "at most 100000 characters"),
        ({"txt": "hello"}, "text"),
    ],
)
async def test_bad_messages_are_refused_and_leave_no_history(
    harness: Harness, body: dict[str, Any], reason: str
) -> None:
    """Empty, oversized or malformed messages are refused with a reason; history is unchanged."""
    model = harness.script({"content": "hi"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    before = len((await handle.fetch_history()).events)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("send", body)
    assert reason in str(refused.value.cause)
    assert len((await handle.fetch_history()).events) == before
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()


async def test_a_run_that_is_not_a_thread_refuses_messages(harness: Harness) -> None:
    """``send`` to a single-task run is refused: it ends at its answer."""
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "a"}}]},
        {"content": "done"},
    )
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await send(handle, "hello")
    assert "not a thread" in str(refused.value.cause)
    await handle.signal(AgentWorkflow.approve, {})
    assert (await handle.result()).status is RunStatus.DONE


async def test_the_stock_cli_sends_a_message(harness: Harness) -> None:
    """`temporal workflow update execute --name send --input '{"text": ...}'` works."""
    model = harness.script({"content": "first"}, {"content": "second"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    done = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id,
        "--name", "send", "--input", json.dumps({"text": "again"}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "queued" in done.stdout, done.stdout
    status = await answered(harness, handle, 2)
    assert status.final_answer == "second"
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()


@pytest.mark.replay_corpus
async def test_a_thread_continues_as_new_and_keeps_its_conversation(harness: Harness) -> None:
    """With a low bound, the thread hands itself to new runs mid-conversation; the same id
    keeps answering with everything said before, and status and trace say which run it is."""
    turns = [{"content": f"answer {i}"} for i in range(6)]
    model = harness.script(*turns)
    handle = await start_thread(harness, model, continue_as_new_after_events=20)
    await answered(harness, handle, 1)
    for i in range(1, 6):
        await send(handle, f"message {i}")
        status = await answered(harness, handle, i + 1)
    assert status.final_answer == "answer 5"
    assert status.run_in_chain > 1, status
    last = harness.requests(model)[-1]
    assert user_texts(last)[0] == "Hello, remember the word 'marmalade'."
    assert user_texts(last)[-1] == "message 5"
    trace = await handle.query(AgentWorkflow.trace)
    assert any(e.event == "Resumed" for e in trace.entries)
    first_run = await harness.client.get_workflow_handle(handle.id).describe()
    assert first_run.run_id != handle.first_execution_run_id
    await handle.execute_update(AgentWorkflow.close)
    result: AgentResult = await handle.result()
    assert result.answer == "answer 5"
    # The first run of the chain ends in the hand-over; it replays, and joins the corpus.
    first = harness.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
    history = await first.fetch_history()
    assert history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    await replayer().replay_workflow(history)
    keep_history("thread-first-run-continued-as-new", history)


async def test_an_idle_thread_ends_after_its_timeout(
    time_skipping: WorkflowEnvironment, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """No message for the idle timeout (a durable timer, skipped here): the thread ends Done."""
    _, result, trace = await run_to_end_on_time_skipping(
        time_skipping,
        model_server,
        tmp_path,
        [{"content": "hi"}],
        task="hello",
        thread=True,
        thread_idle_timeout_seconds=3600,
    )
    assert (result.status, result.answer) == (RunStatus.DONE, "hi")
    assert [e.data for e in trace.entries if e.event == "IdleTimeout"] == [
        "no message for 3600s",
        "WaitingForUserInput -> Done",
    ]


async def test_export_then_import_continues_the_conversation(harness: Harness) -> None:
    """A thread exported in Loom's shape and imported as a new thread waits for its user, and
    its next request carries everything the first thread said and did."""
    write = {"name": "write_file", "arguments": {"path": "a.md", "content": "A"}}
    model = harness.script({"tool_calls": [write]}, {"content": "wrote a.md"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    exported: ThreadExport = await handle.query(AgentWorkflow.export)
    assert exported.agent_state.kind == "waiting_for_user_input"
    roles = [m.role for m in exported.conversation.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert exported.record is not None  # where the whole conversation is kept
    # The thread's latest workspace snapshot (snapshots are on by default).
    assert exported.workspace == (await handle.query(AgentWorkflow.workspace)).manifest
    assert exported.workspace is not None
    as_file = json.loads(exported.model_dump_json(exclude={"record", "workspace", "memory"}))
    assert set(as_file) == {"agent_state", "conversation", "treadle"}

    follow_up = harness.script({"content": "a.md holds A"})
    reloaded = ThreadExport.model_validate(as_file)
    reloaded = reloaded.model_copy(
        update={"treadle": reloaded.treadle.model_copy(update={"model": follow_up})}
    )
    agent_input, run = rebuild(reloaded, str(harness.workspace), datetime.now(UTC))
    imported = await harness.client.start_workflow(
        AgentWorkflow.run,
        agent_input.model_copy(update={"resume": run.model_dump(mode="json")}),
        id=f"imported-{uuid.uuid4().hex[:8]}",
        task_queue=harness.task_queue,
    )
    harness.handles.append(imported)
    status: AgentStatus = await imported.query(AgentWorkflow.state)
    assert status.state is State.WAITING_FOR_USER_INPUT
    assert status.final_answer == "wrote a.md"
    await send(imported, "What is in a.md?")
    status = await answered(harness, imported, 1)
    assert status.final_answer == "a.md holds A"
    request = harness.requests(follow_up)[0]
    assert [m["role"] for m in request["messages"]] == [*roles, "user"]
    assert request["messages"][3]["content"].startswith("wrote 1 bytes")
    await imported.execute_update(AgentWorkflow.close)
    await imported.result()
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()


def test_an_import_that_cannot_continue_is_refused_with_a_reason() -> None:
    """A conversation that does not start with the user, or answers a call nobody made."""
    base = {
        "agent_state": {"kind": "waiting_for_user_input"},
        "conversation": {
            "messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]
        },
    }
    with pytest.raises(ImportRefused, match="must start with the user's first message"):
        rebuild(ThreadExport.model_validate(base), "/tmp/w", datetime.now(UTC))
    orphan = {
        "agent_state": {"kind": "executing_tools"},
        "conversation": {
            "messages": [
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": None},
                {"role": "tool", "tool_call_id": "nobody", "content": "r"},
            ]
        },
    }
    with pytest.raises(ImportRefused, match="answers 'nobody', which no call asked for"):
        rebuild(ThreadExport.model_validate(orphan), "/tmp/w", datetime.now(UTC))


def test_a_call_without_its_result_is_answered_as_not_run() -> None:
    """Loom's pending tool calls are not run blindly on import: the model is told instead."""
    thread = ThreadExport.model_validate(
        {
            "agent_state": {"kind": "executing_tools"},
            "conversation": {
                "messages": [
                    {"role": "user", "content": "task"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c1", "name": "list_dir", "arguments": "{}"}],
                    },
                ]
            },
        }
    )
    _, run = rebuild(thread, "/tmp/w", datetime.now(UTC))
    assert run.state is State.PLANNING
    [turn] = run.memory.history
    assert turn.outcomes[0].observation.startswith("ERROR: not run: the thread was imported")
