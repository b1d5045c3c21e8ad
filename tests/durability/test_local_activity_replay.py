"""A run's first workflow task can end just after its local activity's marker, the code after
the result running in the next task (a query arriving meanwhile does it). A replay hands the
result over in the first task and learns of a patch marker only in the task that recorded it,
so a run must ask no ``workflow.patched`` between a local activity's result and its next
command: it would replay asked before its marker was known, and fail."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowHistory

from tests.support.harness import Harness, replayer
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


def first_task_markers(history: WorkflowHistory) -> list[str]:
    """The markers a run recorded before its first activity: patch ids, and ``local activity``."""
    found: list[str] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            break
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        marker = event.marker_recorded_event_attributes
        if marker.marker_name == "core_local_activity":
            found.append("local activity")
        elif marker.marker_name == "core_patch":
            data = marker.details["patch-data"].payloads[0].data
            found.append(json.loads(data)["id"])
    return found


async def run_watched(harness: Harness, model: str, **config: Any) -> WorkflowHandle[Any, Any]:
    """A run asked for its state as soon as it starts, as ``starter.py run --wait`` does: the
    query reaches the worker while its first task (and local activity) may still run. Started
    without its attributes: a run started with them lists no tools by a local activity."""
    handle = await harness.start(model, shown=False, **config)
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.model == model
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    return handle


async def test_a_run_queried_as_it_starts_replays_however_its_first_task_was_cut(
    harness: Harness,
) -> None:
    """Runs with a budget or a cost cap (whose checks come right after the local activity
    listing the worker's tools), queried as they start, replay; no patch marker follows the
    local activity's in their first task."""
    models = [harness.script({"content": f"Answer {n}."}) for n in range(3)]
    config: list[dict[str, Any]] = [
        {"token_budget": 100_000},
        {"max_cost_usd": 1.0, "prices": {models[1]: {"prompt": 1.0, "completion": 1.0}}},
        {"token_budget": 100_000},
    ]
    handles = await asyncio.gather(
        *(run_watched(harness, model, **c) for model, c in zip(models, config, strict=True))
    )
    for handle in handles:
        history = await handle.fetch_history()
        markers = first_task_markers(history)
        assert "local activity" in markers
        assert markers[-1] == "local activity", markers  # no patch after the result
        # The harness replays every run at teardown; here the check is the test's own.
        await replayer().replay_workflow(history)
