"""Every new run gets the default continue-as-new bound (``continue_as_new_after_events``, 800),
whichever client started it: a plain-JSON ``temporal workflow start`` leaves the field out."""

from __future__ import annotations

import json
import uuid

from temporalio.api.enums.v1 import EventType

from tests.support.harness import Harness, replayer
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

STEPS = 70
"""More steps than 800 events hold (about 55): one hand-over, then the answer."""


async def test_a_run_started_with_plain_json_continues_as_new_at_the_default_bound(
    harness: Harness,
) -> None:
    """Started by the stock CLI with a config that does not name the bound, a long run hands
    over once its history reaches 800 events (not Temporal's 4,096), and ends with its answer;
    both runs of its chain replay."""
    writes = [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": f"f{i}.txt", "content": f"{i}"}}
            ]
        }
        for i in range(STEPS)
    ]
    model = harness.script(*writes, {"content": "all written"})
    workflow_id = f"plain-json-{uuid.uuid4().hex[:12]}"
    started = await harness.temporal(
        "workflow", "start", "--type", "AgentWorkflow", "--task-queue", harness.task_queue,
        "--workflow-id", workflow_id, "--execution-timeout", "5m",
        "--input", json.dumps({
            "task": "Write the files.",
            "model": model,
            "workspace": str(harness.workspace),
            "config": {"max_steps": STEPS + 5},
        }),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    harness.handles.append(handle)

    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "all written")
    assert len(list(harness.workspace.glob("f*.txt"))) == STEPS
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.run_in_chain == 2, status

    # The last run's start names the run it continues: the first, which handed over.
    last = await handle.fetch_history()
    started_by = last.events[0].workflow_execution_started_event_attributes
    first_run_id = started_by.continued_execution_run_id
    assert first_run_id
    history = await harness.client.get_workflow_handle(
        workflow_id, run_id=first_run_id
    ).fetch_history()
    events = history.events
    assert events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert 800 <= len(events) < 900, len(events)
    await replayer().replay_workflow(history)
