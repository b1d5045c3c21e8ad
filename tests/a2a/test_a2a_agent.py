"""An A2A client reads Treadle's agent card, sends a task, sees it wait as input-required for
a person's approval, answers through A2A, and gets the run's answer as the task's artifact;
streaming gives the same states as they happen."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.harness import TEST_STORE, Harness
from treadle.client import AgentClient
from treadle.web import serve

a2a = pytest.importorskip("a2a", reason="the a2a extra is not installed (pip install treadle[a2a])")

from a2a.client import ClientConfig, create_client  # noqa: E402
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message  # noqa: E402
from a2a.types import GetTaskRequest, SendMessageRequest, TaskState  # noqa: E402

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
        harness.handles.append(harness.client.get_workflow_handle(f"a2a-{task.id}"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        asking = "".join(p.text for p in task.status.message.parts)
        assert "write_file" in asking and "approve" in asking

        reply = new_text_message("approve", task_id=task.id, context_id=task.context_id)
        done = await final_task(client, reply)
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_artifact_text(done.artifacts[0]) == "Written over A2A."
        assert (harness.workspace / "notes.md").read_text() == "from a2a"
        await client.close()
    finally:
        await served.stop()
