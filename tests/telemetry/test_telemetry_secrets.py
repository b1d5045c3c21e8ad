"""A canary API key appears in no span, no metric and no log line, even with prompt and
completion capture on and a provider that echoes the key back in an error."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.canary import canary_key, leaks
from tests.support.harness import TEST_STORE
from tests.support.telemetry import content_capture, flush_spans, observed_client, worker_log
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.cli.worker import build_worker
from treadle.logs import JsonFormatter
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput
from treadle.workflows.agent.workflow import AgentWorkflow


async def test_a_canary_key_reaches_no_span_metric_or_log_line(
    temporal_address: str, tmp_path: Path
) -> None:
    """The key is sent on every request, echoed by a failing attempt, and found nowhere in
    what the OTLP receiver got, what the metrics endpoint serves, or what the worker logged."""
    observed = await observed_client(temporal_address)
    key = canary_key()
    with ScriptedModelServer(api_key=key) as models:
        models.add_model(
            "m",
            [
                {
                    "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}],
                    "errors": [{"status": 503, "echo_key": ["exact", "lower", "upper"]}],
                },
                {"content": "done"},
            ],
        )
        task_queue = f"canary-{uuid.uuid4().hex[:10]}"
        settings = ProviderSettings.from_env(
            {"OPENAI_BASE_URL": models.base_url, "OPENAI_API_KEY": key}
        )
        with content_capture(), worker_log(JsonFormatter()) as log:
            async with (
                http_client() as http,
                build_worker(
                    observed.client,
                    task_queue=task_queue,
                    settings=settings,
                    http=http,
                    store=FileBlobStore(TEST_STORE),
                ),
            ):
                handle = await observed.client.start_workflow(
                    AgentWorkflow.run,
                    AgentInput(
                        task="Look around.",
                        model="openai:m",
                        workspace=str(tmp_path),
                        config=AgentConfig(model_max_attempts=3),
                    ),
                    id=f"canary-{uuid.uuid4().hex[:10]}",
                    task_queue=task_queue,
                )
                await handle.result()
                metrics = await observed.scrape()
        assert all(key in str(r.headers) for r in models.requests)  # the key was sent each time
        assert len(models.requests) == 3  # the echoing 503, its retry, the answer
    await flush_spans()
    spans = observed.receiver.raw().decode("latin-1")
    captured = [s for s in observed.receiver.spans if s.attributes.get("gen_ai.input.messages")]
    assert captured, "content capture recorded no prompt"
    assert any(
        s.attributes.get("error.type") for s in observed.receiver.spans if s.name == "chat m"
    )
    assert leaks(spans, key) == []
    assert leaks(metrics, key) == []
    assert "model.call.completed" in log.getvalue()
    # The echoing 503 is an expected failure: one line with its error, no traceback.
    (failed,) = [line for line in log.getvalue().splitlines() if "activity as failed" in line]
    assert "ModelHTTPError: openai returned HTTP 503" in failed
    assert "Traceback" not in log.getvalue()
    assert leaks(log.getvalue(), key) == []
