"""The same agent against a real provider, to verify your own endpoint and key.

Skipped unless TREADLE_REAL_MODEL is set, e.g.:

    TREADLE_REAL_MODEL=openai:gpt-4o-mini OPENAI_API_KEY=sk-... \\
        pytest tests/models/test_real_provider.py
    TREADLE_REAL_MODEL=anthropic ANTHROPIC_API_KEY=... pytest tests/models/test_real_provider.py
    TREADLE_REAL_MODEL=ollama:llama3.2 pytest tests/models/test_real_provider.py   # local, no key

The worker reads base URLs and keys from this process's environment, as worker.py does.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.model.activity import ProviderSettings, http_client
from worker import build_worker
from workflows.agent.models import AgentConfig, AgentInput, AgentResult, RunStatus
from workflows.agent.workflow import AgentWorkflow

REAL_MODEL = os.environ.get("TREADLE_REAL_MODEL")

pytestmark = pytest.mark.skipif(
    not REAL_MODEL, reason="set TREADLE_REAL_MODEL=provider:model (and its key) to run"
)


async def test_a_real_model_reads_a_file_and_answers(client: Client, tmp_path: Path) -> None:
    """A real model uses read_file on the workspace and answers with what it found."""
    assert REAL_MODEL is not None
    (tmp_path / "secret.txt").write_text("The password is pineapple.\n")
    task_queue = f"real-{uuid.uuid4().hex[:10]}"
    async with (
        http_client() as http,
        build_worker(
            client, task_queue=task_queue, settings=ProviderSettings.from_env(os.environ), http=http
        ),
    ):
        result: AgentResult = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="Read secret.txt with the read_file tool and reply with only the password.",
                model=REAL_MODEL,
                workspace=str(tmp_path),
                config=AgentConfig(max_steps=6, token_budget=20_000),
            ),
            id=f"real-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
    assert result.status is RunStatus.DONE, result.error
    assert "pineapple" in (result.answer or "").lower()
    assert result.usage.total_tokens > 0
