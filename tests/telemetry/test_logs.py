"""Worker logs: every line from workflow and activity code carries the run's workflow id, run
id and step, and its fields (``agent.transition``: the old and the new state), as text or as
JSON lines; replays log nothing again."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from tests.support.harness import Harness
from tests.support.metrics_probe import PROBE_STEPS, MetricsProbeWorkflow
from tests.support.telemetry import uncached_worker, worker_log
from treadle.logs import JsonFormatter, TextFormatter
from treadle.sandbox import workflow_runner


def json_lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


async def test_run_lines_carry_the_runs_ids_the_step_and_the_transition(harness: Harness) -> None:
    """JSON lines: agent.transition names the old and the new state, the model activity's line
    its step, and every line of the run its workflow id and run id."""
    model = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "nothing here"},
    )
    with worker_log(JsonFormatter()) as out:
        handle = await harness.start(model)
        await handle.result()
    run_id = (await handle.describe()).run_id
    lines = [line for line in json_lines(out) if line.get("workflow_id") == handle.id]

    transitions = [line for line in lines if line["event"] == "agent.transition"]
    assert transitions, "no agent.transition line"
    for line in transitions:
        assert line["run_id"] == run_id
        assert line["from"] and line["to"]
        assert line["logger"] == "temporalio.workflow"
    assert transitions[-1]["to"] == "Done"
    calls = [line for line in lines if line["event"] == "model.call.completed"]
    assert [(c["step"], c["run_id"], c["activity_type"]) for c in calls] == [
        (1, run_id, "call_model"),
        (2, run_id, "call_model"),
    ]
    assert all("(" not in line["event"] for line in lines)  # the ids are fields, not text


async def test_text_lines_print_the_fields_after_the_event(harness: Harness) -> None:
    """The default text format prints ``key=value`` pairs after the event name."""
    model = harness.script({"content": "hello"})
    with worker_log(TextFormatter()) as out:
        handle = await harness.start(model)
        await handle.result()
    run_id = (await handle.describe()).run_id
    line = next(
        line
        for line in out.getvalue().splitlines()
        if " agent.transition " in line and f"workflow_id={handle.id}" in line
    )
    assert f"run_id={run_id}" in line
    assert " from=" in line and " to=" in line


async def test_workflow_lines_carry_the_step_and_are_not_logged_again_on_replay(
    client: Client,
) -> None:
    """With no workflow cache every task replays the earlier steps; each step's line is still
    logged once, with that step."""
    task_queue = f"probe-{uuid.uuid4().hex[:10]}"
    template = Worker(
        client,
        task_queue=f"{task_queue}-template",
        workflows=[MetricsProbeWorkflow],
        workflow_runner=workflow_runner(),
    )
    with worker_log(JsonFormatter()) as out:
        async with uncached_worker(template, task_queue):
            handle = await client.start_workflow(
                MetricsProbeWorkflow.run,
                PROBE_STEPS,
                id=f"probe-{uuid.uuid4().hex[:12]}",
                task_queue=task_queue,
            )
            await handle.result()
    lines = [
        line
        for line in json_lines(out)
        if line["event"] == "probe.step" and line.get("workflow_id") == handle.id
    ]
    assert [(line["probe"], line["step"]) for line in lines] == [(1, 1), (2, 2), (3, 3)]
