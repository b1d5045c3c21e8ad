"""A finished run is read from its history and the store after the workers that ran it are gone:
``status``, ``trace``, ``export`` and ``workspace`` need no worker to replay it (issue 39)."""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from tests.support.harness import TEST_STORE, scripted_worker, start_agent
from treadle.activities.model.activity import http_client
from treadle.client import AgentClient
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, RunStatus
from treadle.workflows.agent.messages.state_machine import State


async def test_a_completed_run_reads_with_no_worker_left(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A run writes a file and answers; its worker stops; then its status (Done, its answer,
    its usage), its trace's end, its export and its workspace's last snapshot all read, though
    no worker polls its task queue (a query would wait out its timeout and fail)."""
    model = f"closed-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "a"}}]},
            {"content": "wrote a.md"},
        ],
    )
    task_queue = f"test-closed-{uuid.uuid4().hex[:12]}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with http_client() as http, scripted_worker(client, task_queue, model_server, http):
        handle = await start_agent(
            client, task_queue, f"openai:{model}", workspace, "write", config=AgentConfig()
        )
        assert (await handle.result()).status is RunStatus.DONE
    # No worker polls task_queue from here on.
    agents = AgentClient(client, task_queue=task_queue, store=str(TEST_STORE))
    status = await agents.status(handle.id)
    assert status.state is State.DONE
    assert status.final_answer == "wrote a.md"
    assert status.step == 2 and status.usage.total_tokens > 0
    trace = await agents.trace(handle.id)
    assert trace.entries[-1].event == "LlmFinalAnswer"
    exported = await agents.export(handle.id)
    assert exported.conversation.messages[-1].content == "wrote a.md"
    snapshot = (await agents.result(handle.id)).workspace_snapshot
    assert snapshot is not None and await agents.workspace.head(handle.id) == snapshot
    overview = await agents.overview(handle.id)
    assert overview.status == status and overview.export is not None
