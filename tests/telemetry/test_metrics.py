"""Metrics: the worker's Prometheus endpoint serves Temporal's runtime metrics and Treadle's,
with the right counts after a run, and workflow metrics are not counted again on replay."""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.worker import Worker

from tests.support.harness import scripted_worker
from tests.support.metrics_probe import PROBE_STEPS, MetricsProbeWorkflow
from tests.support.telemetry import observed_client, uncached_worker, value
from treadle.activities.model.activity import http_client
from treadle.sandbox import workflow_runner
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput
from treadle.workflows.agent.workflow import AgentWorkflow

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 30}


async def test_the_endpoint_serves_runtime_and_treadle_metrics_with_the_runs_counts(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Two model calls, their tokens by kind, one tool call, and Temporal's own counters."""
    observed = await observed_client(temporal_address)
    name = f"metered-{uuid.uuid4().hex[:10]}"
    model_server.add_model(
        name,
        [
            {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}], "usage": USAGE},
            {"content": "nothing here", "usage": USAGE},
        ],
    )
    task_queue = f"metered-{uuid.uuid4().hex[:10]}"
    (tmp_path / "workspace").mkdir()
    async with (
        http_client() as http,
        scripted_worker(observed.client, task_queue, model_server, http),
    ):
        handle = await observed.client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="Look around.",
                model=f"openai:{name}",
                workspace=str(tmp_path / "workspace"),
                config=AgentConfig(),
            ),
            id=f"metered-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue,
        )
        await handle.result()
        text = await observed.scrape()

    model = {"task_queue": task_queue, "model": f"openai:{name}"}
    assert value(text, "treadle_model_calls", **model, outcome="ok") == 2
    assert value(text, "treadle_model_calls", **model, outcome="error") == 0
    assert value(text, "treadle_model_tokens", **model, kind="input") == 200
    assert value(text, "treadle_model_tokens", **model, kind="output") == 40
    assert value(text, "treadle_model_tokens", **model, kind="cached") == 60
    assert value(text, "treadle_model_call_latency_count", **model) == 2
    tool = {"task_queue": task_queue, "tool": "list_dir"}
    assert value(text, "treadle_tool_calls", **tool, outcome="ok") == 1
    assert value(text, "treadle_tool_call_latency_count", **tool) == 1
    # The Temporal runtime's own metrics come from the same endpoint.
    assert (
        value(
            text,
            "temporal_workflow_completed",
            task_queue=task_queue,
            workflow_type="AgentWorkflow",
        )
        == 1
    )
    assert value(text, "temporal_activity_execution_latency_count", task_queue=task_queue) == 3


async def test_workflow_metrics_count_once_however_often_the_workflow_replays(
    temporal_address: str,
) -> None:
    """With no workflow cache each workflow task replays every earlier step; the steps, the
    stuck event, the human wait and the client query are each counted once."""
    observed = await observed_client(temporal_address)
    task_queue = f"probe-{uuid.uuid4().hex[:10]}"
    template = Worker(
        observed.client,
        task_queue=f"{task_queue}-template",
        workflows=[MetricsProbeWorkflow],
        workflow_runner=workflow_runner(),
    )
    async with uncached_worker(template, task_queue):
        result = await observed.client.execute_workflow(
            MetricsProbeWorkflow.run,
            PROBE_STEPS,
            id=f"probe-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue,
        )
        text = await observed.scrape()
    assert result == PROBE_STEPS
    labels = {"task_queue": task_queue, "workflow_type": "MetricsProbeWorkflow"}
    assert value(text, "treadle_agent_steps", **labels) == PROBE_STEPS
    assert value(text, "treadle_agent_stuck_events", **labels, reason="repeated_error") == 1
    assert value(text, "treadle_agent_human_waits_started", **labels, tool="write_file") == 1
    assert (
        value(
            text, "treadle_agent_human_waits_ended", **labels, outcome="approved", tool="write_file"
        )
        == 1
    )
    assert value(text, "treadle_agent_client_queries", **labels, outcome="asked") == 1
    # The workflow did replay: Temporal counted more workflow tasks than the steps' timers.
    assert value(text, "temporal_workflow_task_replay_latency_count", task_queue=task_queue) >= 1
