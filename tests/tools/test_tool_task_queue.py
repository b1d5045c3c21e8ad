"""``tool_task_queue``: the workspace's tools and hooks run on a queue of their own, served by a
tools-only worker (on the machine that holds the workspace), while model calls run on the
run's queue. Two real workers on two queues against the dev server."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType

from tests.support.harness import Harness
from tests.support.processes import clean_env, start_worker
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.cli.worker import build_worker
from treadle.workflows.agent.messages.models import AgentConfig, AgentResult, RunStatus


@pytest.mark.replay_corpus
async def test_tools_run_on_their_own_queue_and_wait_for_its_worker(harness: Harness) -> None:
    tool_queue = f"tools-{uuid.uuid4().hex[:10]}"
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "hi"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.md"}}]},
        {"content": "written and read"},
    )
    handle = await harness.start(model, tool_task_queue=tool_queue)
    # No worker serves the tool queue yet: the run waits in Acting, durably.
    await harness.wait_for_state(handle, "Acting")
    assert not (harness.workspace / "a.md").exists()
    async with (
        http_client() as http,
        build_worker(
            harness.client,
            task_queue=tool_queue,
            settings=ProviderSettings.from_env({}),  # a tools worker holds no model key
            http=http,
            tools_only=True,
        ),
    ):
        result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "written and read")
    assert (harness.workspace / "a.md").read_text() == "hi"
    history = await handle.fetch_history()
    queues = {
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            e.activity_task_scheduled_event_attributes.task_queue.name,
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert queues == {("call_model", harness.task_queue), ("run_tool", tool_queue)}


async def test_worker_py_tools_only_serves_a_tool_queue(harness: Harness) -> None:
    """The same, with the tools worker started as an operator would: worker.py --tools-only."""
    tool_queue = f"tools-{uuid.uuid4().hex[:10]}"
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.md", "content": "ok"}}]},
        {"content": "done"},
    )
    address = harness.client.service_client.config.target_host
    worker = await start_worker(address, tool_queue, clean_env(), "--tools-only")
    try:
        handle = await harness.start(model, tool_task_queue=tool_queue)
        result: AgentResult = await handle.result()
    finally:
        assert await worker.terminate() == 0
    assert result.status is RunStatus.DONE
    assert (harness.workspace / "b.md").read_text() == "ok"
    assert any(line.startswith("Tools-only worker polling") for line in worker.output)


def test_a_tool_task_queue_name_is_checked_when_the_run_is_started() -> None:
    assert AgentConfig(tool_task_queue="ws-1").tool_task_queue == "ws-1"
    with pytest.raises(ValidationError):
        AgentConfig(tool_task_queue="two words")
    with pytest.raises(ValidationError):
        AgentConfig(tool_task_queue="")
