"""API keys stay in the worker's environment: never in a run's history, even via a tool."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from activities.model.activity import ProviderSettings, http_client
from tests.conftest import replayer
from treadle.devserver import find_temporal_binary
from treadle.scripted_model import ScriptedModelServer
from worker import build_worker
from workflows.agent.models import AgentConfig, AgentInput, AgentResult, RunStatus
from workflows.agent.workflow import AgentWorkflow

# A fake canary key, split so secret scanners do not mistake the source for a real one.
KEY = "sk-" + "treadle-canary-7f3a9c2e51d04b86a1"


@pytest.mark.parametrize(
    ("provider", "key_env", "url_env", "header"),
    [
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "authorization"),
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "x-api-key"),
    ],
)
async def test_key_never_enters_the_exported_history(
    client: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    key_env: str,
    url_env: str,
    header: str,
) -> None:
    """A run whose worker holds a recognisable key, and whose tool prints the environment,
    leaves no trace of the key in `temporal workflow show -o json`."""
    monkeypatch.setenv(key_env, KEY)  # as a worker would have it
    with ScriptedModelServer(api_key=KEY) as models:
        models.add_model(
            "m",
            [
                {"tool_calls": [{"name": "run_command", "arguments": {"command": "env"}}]},
                {"content": "printed the environment"},
            ],
        )
        task_queue = f"test-{uuid.uuid4().hex[:12]}"
        settings = ProviderSettings.from_env(
            {url_env: models.base_url, key_env: os.environ[key_env]}
        )
        async with (
            http_client() as http,
            build_worker(client, task_queue=task_queue, settings=settings, http=http),
        ):
            handle = await client.start_workflow(
                AgentWorkflow.run,
                AgentInput(
                    task="print the environment",
                    model=f"{provider}:m",
                    workspace=str(tmp_path),
                    config=AgentConfig(allow_run_command=True, command_allowlist=("env",)),
                ),
                id=f"secret-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            result: AgentResult = await handle.result()
            await replayer().replay_workflow(await handle.fetch_history())
        assert KEY in models.requests[0].headers[header]  # the key did reach the provider

    assert result.status is RunStatus.DONE
    shown = await asyncio.to_thread(
        subprocess.run,
        [
            find_temporal_binary(),
            "workflow",
            "show",
            "--address",
            client.service_client.config.target_host,
            "--workflow-id",
            handle.id,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stderr
    exported = shown.stdout + "\n".join(_decoded_payloads(json.loads(shown.stdout)))
    assert "PATH=" in exported  # the tool's output is in there...
    assert KEY not in exported  # ...but not the key
    assert key_env not in exported


def _decoded_payloads(node: Any) -> Iterator[str]:
    """Every payload's data, base64-decoded: the CLI's JSON carries payloads encoded."""
    if isinstance(node, dict):
        if isinstance(node.get("data"), str) and "metadata" in node:
            yield base64.b64decode(node["data"]).decode("utf-8", "replace")
        for value in node.values():
            yield from _decoded_payloads(value)
    elif isinstance(node, list):
        for value in node:
            yield from _decoded_payloads(value)
