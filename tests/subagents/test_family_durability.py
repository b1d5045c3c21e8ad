"""A family survives its worker: children mid-run when the worker is killed finish on the next
one, each started once, and no completed tool call of theirs runs again."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import keep_history, replayer, start_agent
from tests.support.processes import clean_env, start_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    RunStatus,
    SubagentConfig,
)
from treadle.workflows.agent.workflow import AgentWorkflow


def append_once(name: str) -> str:
    return f"python3 -c \"open('{name}.log', 'a').write('ran\\n')\""


async def requests_reach(models: ScriptedModelServer, model: str, count: int) -> None:
    for _ in range(600):
        if len(models.requests_for(model)) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{model} never received {count} requests")


def count(events: list, kind: EventType.ValueType) -> int:
    return sum(1 for e in events if e.event_type == kind)


@pytest.mark.replay_corpus
async def test_children_survive_a_killed_worker(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """SIGKILL while two children wait on their second model call: a new worker finishes them
    and the parent; each child was started once and ran its command once."""
    suffix = uuid.uuid4().hex[:8]
    names = [f"kid-{i}-{suffix}" for i in (1, 2)]
    for name in names:
        model_server.add_model(
            name,
            [
                {
                    "tool_calls": [
                        {"name": "run_command", "arguments": {"command": append_once(name)}}
                    ]
                },
                {"content": f"{name} done", "delay": 3},
            ],
        )
    parent = f"family-{suffix}"
    delegates = [
        {"name": "delegate", "arguments": {"task": task, "model": f"openai:{name}"}, "id": call}
        for task, name, call in (("one", names[0], "call_1"), ("two", names[1], "call_2"))
    ]
    model_server.add_model(parent, [{"tool_calls": delegates}, {"content": "the family is done"}])
    address = client.service_client.config.target_host
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    workspace = tmp_path / "ws"
    config = AgentConfig(
        allow_run_command=True,
        command_allowlist=("python3",),
        heartbeat_timeout_seconds=2,
        subagents=SubagentConfig(models=tuple(f"openai:{n}" for n in names)),
    )
    first = await start_worker(address, task_queue, env)
    handle = await start_agent(
        client, task_queue, f"openai:{parent}", workspace, "split it", config=config,
        id_prefix="family",
    )  # fmt: skip
    for name in names:  # each child's command ran; its second model call is live
        await requests_reach(model_server, name, 2)
    await first.kill()

    second = await start_worker(address, task_queue, env)
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        assert await second.terminate() == 0

    assert result.status is RunStatus.DONE, result.error
    assert result.answer == "the family is done"
    history = await handle.fetch_history()
    started = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    assert count(list(history.events), started) == 2
    await replayer().replay_workflow(history)
    keep_history("test_children_survive_a_killed_worker-0", history)
    for index, (name, call) in enumerate(zip(names, ("call_1", "call_2"), strict=True), 1):
        assert (workspace / f"{name}.log").read_text() == "ran\n"
        kid = client.get_workflow_handle_for(AgentWorkflow.run, f"{handle.id}.{call}")
        done: AgentResult = await kid.result()
        assert done.answer == f"{name} done"
        events = list((await kid.fetch_history()).events)
        assert count(events, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) >= 2
        run_tools = [
            e
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool"
        ]
        assert len(run_tools) == 1
        kid_history = await kid.fetch_history()
        await replayer().replay_workflow(kid_history)
        keep_history(f"test_children_survive_a_killed_worker-{index}", kid_history)
