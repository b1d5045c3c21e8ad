"""Several worker processes on one task queue share its runs, and killing any one of them
loses no run: what was in flight on it is retried by the others."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from tests.support.harness import activity_starts, replayer
from tests.support.processes import clean_env, start_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

RUNS = 6
STEPS = 3


async def test_three_workers_share_runs_and_one_killed_loses_none(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model = f"scale-{uuid.uuid4().hex[:8]}"
    turns = [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": f"s{i}.md", "content": str(i)}}
            ],
            "delay": 0.7,
        }
        for i in range(STEPS)
    ]
    model_server.add_model(model, [*turns, {"content": "all written", "delay": 0.7}])
    task_queue = f"scale-{uuid.uuid4().hex[:10]}"
    address = client.service_client.config.target_host
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    # A short sticky timeout: a run cached on the killed worker moves on within about a second.
    flags = ("--sticky-queue-timeout", "1")
    workers = [await start_worker(address, task_queue, env, *flags) for _ in range(3)]
    handles = [
        await client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="write three files",
                model=f"openai:{model}",
                workspace=str(tmp_path / f"ws{n}"),
                config=AgentConfig(heartbeat_timeout_seconds=2),
            ),
            id=f"scale-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=3),
        )
        for n in range(RUNS)
    ]
    # Kill one worker while the runs are mid-way (each waits on a slow model call).
    while len(model_server.requests_for(model)) < RUNS + 2:
        await asyncio.sleep(0.05)
    victim = workers[0]
    await victim.kill()
    try:
        results: list[AgentResult] = await asyncio.wait_for(
            asyncio.gather(*(h.result() for h in handles)), 150
        )
    finally:
        for worker in workers[1:]:
            assert await worker.terminate() == 0
    assert [r.status for r in results] == [RunStatus.DONE] * RUNS
    for n in range(RUNS):
        assert sorted(p.name for p in (tmp_path / f"ws{n}").iterdir()) == [
            "s0.md",
            "s1.md",
            "s2.md",
        ]
    identities: set[str] = set()
    for handle in handles:
        history = await handle.fetch_history()
        await replayer().replay_workflow(history)
        identities |= {s.identity.partition("@")[0] for s in activity_starts(history)}
    # The work was spread: the killed worker had taken some of it, and the others finished it.
    assert str(victim.pid) in identities
    assert len(identities) >= 2
