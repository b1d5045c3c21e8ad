"""A thread from Python through ``AgentClient``: started, sent a message and its answer awaited,
closed; exported as Loom's JSON and imported again as a new thread that goes on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.harness import Harness
from treadle.client import AgentClient, InvalidRequest, ThreadUnavailable
from treadle.workflows.agent.messages.config import AgentInput
from treadle.workflows.agent.messages.models import RunStatus, ThreadSettings
from treadle.workflows.agent.messages.state_machine import State


async def test_a_thread_answers_the_message_sent_to_it(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """A thread's first turn is awaited, the next message sent and its answer awaited in one
    call (``ask``), then close ends it once its messages are answered."""
    model = harness.script({"content": "Hello."}, {"content": "You said marmalade."})
    started = await agents.start(
        AgentInput(
            task="Remember the word 'marmalade'.",
            model=model,
            workspace=str(harness.workspace),
            thread=True,
        )
    )
    track(started.id)
    assert started.thread and started.id.startswith("thread-")
    first = await agents.wait_for_answer(started.id)
    assert (first.state, first.final_answer) == (State.WAITING_FOR_USER_INPUT, "Hello.")

    answered = await agents.ask(started.id, "Which word?")
    assert answered.state is State.WAITING_FOR_USER_INPUT
    assert answered.final_answer == "You said marmalade."
    assert answered.queued_messages == 0

    with pytest.raises(InvalidRequest, match="invalid message"):
        await agents.send(started.id, "")
    closing = await agents.close(started.id)
    assert closing.queued_messages == 0
    result = await agents.result(started.id)
    assert (result.status, result.answer) == (RunStatus.DONE, "You said marmalade.")
    with pytest.raises(ThreadUnavailable, match=f"the thread {started.id} has ended"):
        await agents.send(started.id, "too late")
    with pytest.raises(ThreadUnavailable, match="no thread with id 'no-such-thread'"):
        await agents.send("no-such-thread", "anyone?")


async def test_an_exported_thread_is_imported_as_a_new_one_that_goes_on(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """Export gives the whole conversation as Loom's JSON; importing it starts a new thread
    that waits for its user and answers with the conversation behind it."""
    model = harness.script({"content": "Noted: blue."}, {"content": "Your colour was blue."})
    started = await agents.start(
        AgentInput(
            task="My colour is blue.", model=model, workspace=str(harness.workspace), thread=True
        )
    )
    track(started.id)
    await agents.wait_for_answer(started.id)
    exported = await agents.export(started.id)
    said = [(m.role, m.content) for m in exported.conversation.messages if m.role != "system"]
    assert said == [("user", "My colour is blue."), ("assistant", "Noted: blue.")]
    await agents.close(started.id)
    await agents.result(started.id)

    imported = await agents.import_thread(
        exported, settings=ThreadSettings(model=model), workspace=str(harness.workspace)
    )
    track(imported.id)
    assert imported.id != started.id and not imported.ignored
    status = await agents.wait_for_answer(imported.id)
    assert status.state is State.WAITING_FOR_USER_INPUT
    answered = await agents.ask(imported.id, "What was my colour?")
    assert answered.final_answer == "Your colour was blue."
    request = harness.requests(model)[-1]
    assert "My colour is blue." in str(request["messages"])
    await agents.close(imported.id)
    assert (await agents.result(imported.id)).status is RunStatus.DONE
