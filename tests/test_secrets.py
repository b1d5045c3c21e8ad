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

from activities.model import ProviderSettings, http_client
from devserver import find_temporal_binary
from scripted_model import ScriptedModelServer
from tests.conftest import replayer
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.models import AgentConfig, AgentInput, AgentResult, RunStatus

KEY = "sk-treadle-canary-7f3a9c2e51d04b86a1"


async def test_key_never_enters_the_exported_history(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose worker holds a recognisable key, and whose tool prints the environment,
    leaves no trace of the key in `temporal workflow show -o json`."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # as a worker would have it
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
            {"OPENAI_BASE_URL": models.base_url, "OPENAI_API_KEY": os.environ["OPENAI_API_KEY"]}
        )
        async with (
            http_client() as http,
            build_worker(client, task_queue=task_queue, settings=settings, http=http),
        ):
            handle = await client.start_workflow(
                AgentWorkflow.run,
                AgentInput(
                    task="print the environment",
                    model="openai:m",
                    workspace=str(tmp_path),
                    config=AgentConfig(allow_run_command=True, command_allowlist=("env",)),
                ),
                id=f"secret-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            result: AgentResult = await handle.result()
            await replayer().replay_workflow(await handle.fetch_history())
        assert models.requests[0].headers["authorization"] == f"Bearer {KEY}"

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
    assert "OPENAI_API_KEY" not in exported


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
