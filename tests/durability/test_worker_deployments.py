"""Upgrades on Worker Deployments (docs/upgrades.md), on the dev server: two workers of one
deployment with different build ids; a run started on build A stays on A after B becomes the
current version, a new run goes to B, and a thread moves to B at its next continue-as-new. The
current version is set with the stock ``temporal`` CLI, as an operator does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.common import VersioningBehavior
from temporalio.worker import Worker

from tests.support.harness import TEST_STORE, Harness, start_agent
from tests.support.processes import clean_env, run_cli, server_address, start_worker
from tests.support.threads import answered_turns, send
from treadle.activities.model.activity import ProviderSettings
from treadle.plugin import TreadlePlugin
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    AgentStatus,
    ApproveSignal,
    RunStatus,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow


@asynccontextmanager
async def build(
    harness: Harness, queue: str, deployment: str, build_id: str
) -> AsyncIterator[None]:
    """A worker of ``deployment`` at ``build_id``, as ``treadle worker --deployment-name``
    builds it, with the harness's scripted model."""
    plugin = TreadlePlugin(
        store=str(TEST_STORE),
        deployment_name=deployment,
        build_id=build_id,
        environ={},
        model_settings=ProviderSettings.from_env({"OPENAI_BASE_URL": harness.models.base_url}),
    )
    async with Worker(harness.client, task_queue=queue, plugins=[plugin]):
        yield


async def make_current(harness: Harness, deployment: str, build_id: str) -> None:
    """``temporal worker deployment set-current-version``, once the version's worker has polled
    (the server knows a version only then)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        done = await harness.temporal(
            "worker", "deployment", "set-current-version",
            "--deployment-name", deployment, "--build-id", build_id, "--yes",
        )  # fmt: skip
        if done.returncode == 0:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"set-current-version {build_id}: {done.stderr}")
        await asyncio.sleep(0.3)


async def builds_of(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The build id of each workflow task the run's history says was completed, in order."""
    history = await handle.fetch_history()
    return [
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]


async def pinned_to(handle: WorkflowHandle[Any, Any]) -> tuple[str, int]:
    """The build the run is on, and its versioning behaviour, as the server describes it."""
    info = (await handle.describe()).raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id, info.behavior


async def wait_for(handle: WorkflowHandle[Any, Any], state: State) -> AgentStatus:
    deadline = asyncio.get_running_loop().time() + 30
    while (status := await handle.query(AgentWorkflow.state)).state is not state:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the run never reached {state.value}")
        await asyncio.sleep(0.1)
    return status


async def test_a_run_finishes_on_its_build_and_new_runs_go_to_the_current_one(
    harness: Harness,
) -> None:
    """Run 1 starts on A and waits for an approval; B becomes current; run 1, approved, ends
    on A (every workflow task of its history completed by A, the server still pins it to A),
    and run 2, started after, runs on B."""
    deployment, queue = f"treadle-{uuid.uuid4().hex[:8]}", f"deploy-{uuid.uuid4().hex[:8]}"
    first = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "A"}}]},
        {"content": "written on A"},
    )
    second = harness.script({"content": "answered on B"})
    async with build(harness, queue, deployment, "a"):
        await make_current(harness, deployment, "a")
        config = AgentConfig(require_approval=("write_file",))
        run_1 = await start_agent(harness.client, queue, first, harness.workspace, config=config)
        harness.handles.append(run_1)
        waiting = await wait_for(run_1, State.WAITING_FOR_HUMAN)
        async with build(harness, queue, deployment, "b"):
            await make_current(harness, deployment, "b")
            await run_1.signal(
                AgentWorkflow.approve, ApproveSignal(call_id=waiting.pending_approvals[0].call_id)
            )
            result_1: AgentResult = await run_1.result()
            run_2 = await start_agent(harness.client, queue, second, harness.workspace)
            harness.handles.append(run_2)
            result_2: AgentResult = await run_2.result()
    assert (result_1.status, result_1.answer) == (RunStatus.DONE, "written on A")
    assert (result_2.status, result_2.answer) == (RunStatus.DONE, "answered on B")
    assert set(await builds_of(run_1)) == {"a"}
    assert await pinned_to(run_1) == ("a", VersioningBehavior.PINNED.value)
    assert set(await builds_of(run_2)) == {"b"}
    assert (harness.workspace / "a.md").read_text() == "A"


async def test_a_thread_moves_to_the_current_build_at_its_next_continue_as_new(
    harness: Harness,
) -> None:
    """A thread answers its first turn on A; B becomes current; it goes on answering on A
    until a message finds its history past ``continue_as_new_after_events``: it hands over,
    and the next run of the same workflow id answers on B, pinned there, while every task of
    the run before was A's."""
    deployment, queue = f"treadle-{uuid.uuid4().hex[:8]}", f"deploy-{uuid.uuid4().hex[:8]}"
    model = harness.script(*({"content": f"answer {turn}"} for turn in range(1, 9)))
    async with build(harness, queue, deployment, "a"):
        await make_current(harness, deployment, "a")
        started = await start_agent(
            harness.client,
            queue,
            model,
            harness.workspace,
            "Hello.",
            thread=True,
            config=AgentConfig(continue_as_new_after_events=20),
        )
        thread = harness.client.get_workflow_handle(started.id)  # its latest run, always
        await answered_turns(thread, 1)
        on_a = (await thread.describe()).run_id
        async with build(harness, queue, deployment, "b"):
            await make_current(harness, deployment, "b")
            for turn in range(2, 9):
                await send(thread, f"message {turn}")
                status = await answered_turns(thread, turn)
                moved = (await thread.describe()).run_id
                if moved != on_a:
                    break
            else:
                raise AssertionError("the thread never continued as new")
            assert status.final_answer == f"answer {turn}"
            before = harness.client.get_workflow_handle(started.id, run_id=on_a)
            after = harness.client.get_workflow_handle(started.id, run_id=moved)
            assert set(await builds_of(before)) == {"a"}
            assert set(await builds_of(after)) == {"b"}
            assert await pinned_to(thread) == ("b", VersioningBehavior.PINNED.value)
            await thread.terminate("the test is over")


async def test_treadle_worker_runs_as_a_version_of_its_deployment(harness: Harness) -> None:
    """``treadle worker --deployment-name --build-id`` polls as that version (the server lists
    it under the deployment); a name Temporal would refuse is one line and exit 2."""
    deployment = f"treadle-{uuid.uuid4().hex[:8]}"
    address = server_address(harness.client)
    queue = f"deploy-{uuid.uuid4().hex[:8]}"
    options = ("--deployment-name", deployment, "--build-id", "v1")
    worker = await start_worker(address, queue, clean_env(), *options)
    try:
        polling = next(line for line in worker.output if "polling task queue" in line)
        assert f"as {deployment}.v1 of its Worker Deployment" in polling
        await make_current(harness, deployment, "v1")  # the server knows the version
    finally:
        assert await worker.terminate() == 0
    refused = await run_cli("--deployment-name", "my.agents", program="worker.py")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: deployment name 'my.agents'"), refused.stderr
