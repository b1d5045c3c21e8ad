"""Threads survive what kills processes: a worker killed mid-turn and a dev server restarted
while a thread waits for its user; real worker.py processes, real Temporal, the scripted model."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tests.support.harness import keep_history, replayer, start_agent, wait_for_requests
from tests.support.processes import (
    WorkerProcess,
    clean_env,
    free_port,
    run_cli,
    server_address,
    start_worker,
)
from tests.support.threads import answered_turns, send
from treadle.connection import connect
from treadle.devserver import DevServer, DevServerConfig
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    AgentStatus,
    RunStatus,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

FIRST = "Hello, remember the word 'marmalade'."
TURN_TIMEOUT = 120
"""Seconds a turn may take here: a worker or the dev server restarts in the middle."""


async def _start_thread(
    client: Client, model: str, task_queue: str, workspace: Path, **config: Any
) -> WorkflowHandle[Any, Any]:
    return await start_agent(
        client, task_queue, f"openai:{model}", workspace, FIRST, thread=True,
        config=AgentConfig.model_validate(config), id_prefix="thread",
    )  # fmt: skip


def _texts(body: dict[str, Any], role: str) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == role]


def _for_turn(models: ScriptedModelServer, model: str, turn: int) -> list[dict[str, Any]]:
    """Request bodies of one turn (0-based): those carrying ``turn`` earlier answers."""
    return [r.body for r in models.requests_for(model) if len(_texts(r.body, "assistant")) == turn]


@pytest.mark.replay_corpus
async def test_a_thread_survives_its_worker_killed_mid_turn(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """SIGKILL mid turn 2: a new worker answers it with turn 1 in context, then takes turn 3."""
    model = f"thread-crash-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"content": "Noted: marmalade."},
            {"content": "You asked me to remember a word.", "delay": 3},
            {"content": "The word was marmalade."},
        ],
    )
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    store = str(tmp_path / "store")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    first = await start_worker(server_address(client), task_queue, env, "--store", store)
    second: WorkerProcess | None = None
    try:
        handle = await _start_thread(
            client, model, task_queue, workspace, heartbeat_timeout_seconds=2
        )
        assert (await answered_turns(handle, 1, TURN_TIMEOUT)).final_answer == "Noted: marmalade."
        receipt = await send(handle, "What did I ask?")
        assert not receipt.queued
        await wait_for_requests(model_server, model, 2)  # turn 2's model call is in flight
        await first.kill()

        second = await start_worker(server_address(client), task_queue, env, "--store", store)
        status = await answered_turns(handle, 2, TURN_TIMEOUT)
        assert status.final_answer == "You asked me to remember a word."
        await send(handle, "Which word?")
        status = await answered_turns(handle, 3, TURN_TIMEOUT)
        assert status.final_answer == "The word was marmalade."
        await handle.execute_update(AgentWorkflow.close)
        result: AgentResult = await asyncio.wait_for(handle.result(), 60)
    finally:
        if first.process.returncode is None:
            await first.kill()
        if second is not None:
            assert await second.terminate() == 0

    assert (result.status, result.answer) == (RunStatus.DONE, "The word was marmalade.")
    turn_2 = _for_turn(model_server, model, 1)
    assert len(turn_2) >= 2  # the killed attempt and its retry on the new worker
    assert _texts(turn_2[-1], "user") == [FIRST, "What did I ask?"]
    assert _texts(turn_2[-1], "assistant") == ["Noted: marmalade."]
    (turn_3,) = _for_turn(model_server, model, 2)
    assert _texts(turn_3, "user") == [FIRST, "What did I ask?", "Which word?"]
    assert _texts(turn_3, "assistant") == ["Noted: marmalade.", "You asked me to remember a word."]
    history = await handle.fetch_history()
    model_calls = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    ]
    # Three turns, and turn 2's call made again on the new worker (a try of its own), not
    # answered by the dead one.
    assert len(model_calls) >= 4
    await replayer().replay_workflow(history)
    keep_history("test_a_thread_survives_its_worker_killed_mid_turn-0", history)


def _dev_config(db_dir: Path) -> DevServerConfig:
    return DevServerConfig(
        ip="127.0.0.1",
        port=free_port(),
        ui_port=free_port(),
        db_filename=str(db_dir / "dev.sqlite"),
        namespace="default",
        log_level="error",
        search_attributes={
            name: kind.name.title() for name, kind in search_attributes.REQUIRED.items()
        },
        dynamic_config={"system.forceSearchAttributesCacheRefreshOnRead": True},
    )


async def test_a_waiting_thread_resumes_after_a_dev_server_restart(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Server and worker SIGKILLed while a thread waits; after a restart on the same SQLite file
    the next message is answered with the first turn in context, and `status` still answers."""
    model = f"thread-restart-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model, [{"content": "Noted: marmalade."}, {"content": "The word was marmalade."}]
    )
    config = _dev_config(tmp_path / "temporal")
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    store = str(tmp_path / "store")
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async with DevServer.ensure(config) as server:
        assert server.started and server.pid is not None
        client = await connect(address=server.address, namespace="default")
        worker = await start_worker(server.address, task_queue, env, "--store", store)
        try:
            handle = await _start_thread(client, model, task_queue, workspace)
            assert (
                await answered_turns(handle, 1, TURN_TIMEOUT)
            ).final_answer == "Noted: marmalade."
        finally:
            await worker.kill()
        os.kill(server.pid, signal.SIGKILL)
    thread_id = handle.id

    async with DevServer.ensure(config) as server:
        assert server.started  # a new server process, not the old one still up
        client = await connect(address=server.address, namespace="default")
        worker = await start_worker(server.address, task_queue, env, "--store", store)
        try:
            handle = client.get_workflow_handle(thread_id)
            receipt = await send(handle, "Which word?")
            assert not receipt.queued
            status = await answered_turns(handle, 2, TURN_TIMEOUT)
            assert status.final_answer == "The word was marmalade."
            shown = await run_cli("--address", server.address, "status", thread_id, "--json")
            assert shown.returncode == 0, shown.stderr
            shown_status = AgentStatus.model_validate_json(shown.stdout)
            assert shown_status.state == State.WAITING_FOR_USER_INPUT
            await handle.execute_update(AgentWorkflow.close)
            result: AgentResult = await asyncio.wait_for(
                client.get_workflow_handle(thread_id, result_type=AgentResult).result(), 60
            )
            history = await handle.fetch_history()
        finally:
            assert await worker.terminate() == 0

    assert (result.status, result.answer) == (RunStatus.DONE, "The word was marmalade.")
    (second_turn,) = _for_turn(model_server, model, 1)
    assert _texts(second_turn, "user") == [FIRST, "Which word?"]
    assert _texts(second_turn, "assistant") == ["Noted: marmalade."]
    assert len(model_server.requests_for(model)) == 2  # turn 1 was not asked again
    await replayer().replay_workflow(history)
