"""An A2A client reads Treadle's agent card, sends a task, sees it wait as input-required for
a person's approval, answers through A2A, and gets the turn's answer as the task's artifact;
streaming gives the same states as they happen. A context is one thread: a later task in it is
the conversation's next message, and no other context sees it."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from tests.support.harness import TEST_STORE, Harness
from tests.support.processes import start_service
from treadle.cli.defaults import DEFAULT_MODEL, DEMO_MODEL, DEMO_TASK_QUEUE
from treadle.client import AgentClient
from treadle.web import serve
from treadle.web.api import MAX_BODY_BYTES

a2a = pytest.importorskip("a2a", reason="the a2a extra is not installed (pip install treadle[a2a])")

from a2a.client import ClientConfig, create_client  # noqa: E402
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message  # noqa: E402
from a2a.types import (  # noqa: E402
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    TaskState,
)

from treadle.web.a2a import a2a_app  # noqa: E402

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from a2a"}}


async def final_task(client: Any, message: Any) -> Any:
    """The task as the responses of ``send_message`` leave it: the task itself (without
    streaming), or the task and the updates that follow it (with)."""
    task = None
    async for response in client.send_message(SendMessageRequest(message=message)):
        if response.HasField("task"):
            task = response.task
            continue
        if task is None:  # a reply's stream starts with updates: the task as it is now
            task = await client.get_task(GetTaskRequest(id=message.task_id))
        if response.HasField("status_update"):  # the states as they happen
            task.status.CopyFrom(response.status_update.status)
        elif response.HasField("artifact_update"):
            task.artifacts.append(response.artifact_update.artifact)
    assert task is not None
    return task


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_task_waits_as_input_required_and_is_approved_through_a2a(
    harness: Harness, streaming: bool
) -> None:
    """The card names the agent; a task starts a run that waits for approval (input-required,
    saying which call); 'approve' sent on the task runs it, and the task completes with the
    run's answer as its artifact."""
    agents = AgentClient(harness.client, task_queue=harness.task_queue, store=str(TEST_STORE))
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Written over A2A."})
    app, card = a2a_app(agents, url="http://127.0.0.1/", task_queue=harness.task_queue,
                        model=model, workspace=str(harness.workspace))  # fmt: skip
    served = await serve.start(app)
    card.supported_interfaces[0].url = served.url + "/"
    try:
        client = await create_client(served.url, client_config=ClientConfig(streaming=streaming))
        first = new_text_message("Write the notes.")
        task = await final_task(client, first)
        harness.handles.append(harness.client.get_workflow_handle(f"a2a-{task.context_id}"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        asking = "".join(p.text for p in task.status.message.parts)
        assert "write_file" in asking and "approve" in asking

        reply = new_text_message("approve", task_id=task.id, context_id=task.context_id)
        done = await final_task(client, reply)
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_artifact_text(done.artifacts[0]) == "Written over A2A."
        assert (harness.workspace / "notes.md").read_text() == "from a2a"
        await client.close()
        await agents.close(f"a2a-{task.context_id}")
        await harness.client.get_workflow_handle(f"a2a-{task.context_id}").result()
    finally:
        await served.stop()


def said(body: dict[str, Any]) -> str:
    """Everything a model request's messages say, as one text."""
    return "\n".join(str(m.get("content") or "") for m in body["messages"])


async def test_a_context_is_one_conversation_and_no_other_context_sees_it(
    harness: Harness,
) -> None:
    """Two tasks in one context are two turns of one thread: the second task's model request
    holds the first task's message and answer, and its answer is the second task's artifact. A
    task of another context starts a thread of its own whose model sees nothing of the first;
    a second task there while the first still waits is rejected naming it; cancelling a task
    ends its context's thread."""
    agents = AgentClient(harness.client, task_queue=harness.task_queue, store=str(TEST_STORE))
    model = harness.script(
        {"tool_calls": [WRITE]},
        {"content": "Written over A2A."},
        {"content": "You asked me to write the notes."},
    )
    app, card = a2a_app(agents, url="http://127.0.0.1/", task_queue=harness.task_queue,
                        model=model, workspace=str(harness.workspace))  # fmt: skip
    served = await serve.start(app)
    card.supported_interfaces[0].url = served.url + "/"
    try:
        client = await create_client(served.url, client_config=ClientConfig(streaming=True))
        assert "context" in card.description and card.skills[0].id == "converse"
        first = await final_task(client, new_text_message("Write the notes."))
        thread = harness.client.get_workflow_handle(f"a2a-{first.context_id}")
        harness.handles.append(thread)
        assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        approve = new_text_message("approve", task_id=first.id, context_id=first.context_id)
        assert (await final_task(client, approve)).status.state == TaskState.TASK_STATE_COMPLETED

        asked = new_text_message("What did I ask you?", context_id=first.context_id)
        second = await final_task(client, asked)
        assert second.id != first.id and second.context_id == first.context_id
        assert second.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_artifact_text(second.artifacts[0]) == "You asked me to write the notes."
        last = said(harness.requests(model)[-1])
        assert "Write the notes." in last and "Written over A2A." in last
        assert "What did I ask you?" in last

        other = await final_task(client, new_text_message("Another matter."))
        assert other.context_id != first.context_id
        harness.handles.append(harness.client.get_workflow_handle(f"a2a-{other.context_id}"))
        assert other.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        theirs = [said(b) for b in harness.requests(model) if "Another matter." in said(b)]
        assert len(theirs) == 1
        assert "Write the notes." not in theirs[0] and "Written over A2A." not in theirs[0]

        busy = new_text_message("And this?", context_id=other.context_id)
        refused = await final_task(client, busy)
        assert refused.status.state == TaskState.TASK_STATE_REJECTED
        why = "".join(p.text for p in refused.status.message.parts)
        assert "busy" in why and other.id in why

        cancelled = await client.cancel_task(CancelTaskRequest(id=other.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        other_thread = harness.client.get_workflow_handle(f"a2a-{other.context_id}")
        with pytest.raises(WorkflowFailureError):
            await other_thread.result()
        assert (await other_thread.describe()).status is WorkflowExecutionStatus.CANCELED
        await agents.close(f"a2a-{first.context_id}")
        await thread.result()
        await client.close()
    finally:
        await served.stop()


async def test_the_agent_keeps_the_apis_access_rules_and_limits(client: Client) -> None:
    """Behind the API's guard: off loopback it will not start without a token and refuses a
    request without it; a body over the limit is a 413 with a reason, before the SDK reads it;
    the card is served to whoever may ask."""
    agents = AgentClient(client)
    with pytest.raises(ValueError, match="token"):
        a2a_app(agents, url="http://192.0.2.1/", task_queue="q", model="openai:x", loopback=False)
    guarded, _ = a2a_app(agents, url="http://192.0.2.1/", task_queue="q", model="openai:x",
                         loopback=False, token="t" * 24)  # fmt: skip
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=guarded), base_url="http://192.0.2.1:8768"
    ) as http:
        refused = await http.get("/.well-known/agent-card.json")
        assert refused.status_code == 401 and refused.json()["error"]
        bearer = {"Authorization": "Bearer " + "t" * 24}
        card = await http.get("/.well-known/agent-card.json", headers=bearer)
        assert card.status_code == 200 and card.json()["name"] == "Treadle"
        big = await http.post("/", json={"x": "y" * (MAX_BODY_BYTES + 1)}, headers=bearer)
        assert big.status_code == 413 and "larger" in big.json()["error"]


async def test_serve_a2a_gives_its_threads_the_queues_model_unless_told(client: Client) -> None:
    """Issue 40: ``serve a2a`` without ``--model`` gives its threads the model a run on its
    queue gets: the demo's scripted model on the demo's queue (the only one its worker
    answers), as ``ui``, ``api`` and ``run`` do; openai:gpt-4o elsewhere; ``--model`` wins."""
    address = client.service_client.config.target_host
    for options, expected in (
        (("--task-queue", DEMO_TASK_QUEUE), DEMO_MODEL),
        (("--task-queue", "a2a-elsewhere"), DEFAULT_MODEL),
        (("--task-queue", DEMO_TASK_QUEUE, "serve", "a2a", "--model", "ollama:x"), "ollama:x"),
    ):
        command = options if "serve" in options else (*options, "serve", "a2a")
        process, line = await start_service("--address", address, *command, "--port", "0")
        try:
            assert line.startswith("Treadle's A2A agent on http://127.0.0.1:"), line
            assert f"model {expected})" in line, line
        finally:
            process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0
