"""Approvals wait durably for days: on the time-skipping test server, three days pass in seconds."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.cli.worker import build_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentResult,
    ApproveSignal,
    RunStatus,
)
from treadle.workflows.agent.workflow import AgentWorkflow


async def test_an_approval_waits_three_days_and_the_run_resumes(
    time_skipping: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The wait for a human survives days of server time; the approval still completes the run."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    with ScriptedModelServer() as models:
        models.add_model(
            "m",
            [
                {
                    "tool_calls": [
                        {"name": "write_file", "arguments": {"path": "a", "content": "x"}}
                    ]
                },
                {"content": "approved after the weekend"},
            ],
        )
        settings = ProviderSettings.from_env({"OPENAI_BASE_URL": models.base_url})
        async with (
            http_client() as http,
            build_worker(time_skipping.client, task_queue=task_queue, settings=settings, http=http),
        ):
            handle = await time_skipping.client.start_workflow(
                AgentWorkflow.run,
                AgentInput(
                    task="write a",
                    model="openai:m",
                    workspace=str(tmp_path),
                    # The test server cannot register search attributes.
                    config=AgentConfig(require_approval=("write_file",), search_attributes=False),
                ),
                id=f"weekend-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            while (await handle.query(AgentWorkflow.state)).state != "WaitingForHuman":
                await time_skipping.sleep(timedelta(milliseconds=100))
            await time_skipping.sleep(timedelta(days=3))
            assert (await handle.query(AgentWorkflow.state)).state == "WaitingForHuman"
            assert not (tmp_path / "a").exists()
            await handle.signal(AgentWorkflow.approve, ApproveSignal())
            result: AgentResult = await handle.result()
            trace = await handle.query(AgentWorkflow.trace)

    assert result.status is RunStatus.DONE
    assert (tmp_path / "a").read_text() == "x"
    waited = next(e for e in trace.entries if e.event == "SignalReceived")
    asked = next(e for e in trace.entries if e.event == "AwaitingApproval")
    assert waited.timestamp - asked.timestamp >= timedelta(days=3)
