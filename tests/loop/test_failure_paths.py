"""How runs end when things go wrong: each ends clearly, none hangs or retries forever."""

from __future__ import annotations

import asyncio
import gc
import sys
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from tests.support.harness import Harness, scripted_worker, start_agent
from tests.support.misbehaving_agent import MisbehavingAgent
from treadle.activities.model.activity import ModelActivities, ProviderSettings, http_client
from treadle.activities.tools.builtin import ToolActivities
from treadle.activities.tools.loading import list_loaded_tools
from treadle.sandbox import workflow_runner
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


async def test_input_that_fails_validation_fails_the_run_at_once(harness: Harness) -> None:
    """A client that skips our models and sends a bad config gets a failed run, not a stuck one."""
    handle = await harness.client.start_workflow(
        "AgentWorkflow",
        {
            "task": "x",
            "model": "openai:m",
            "workspace": str(harness.workspace),
            "config": {"require_approval": ["no_such_tool"]},
        },
        id=f"bad-input-{uuid.uuid4().hex[:8]}",
        task_queue=harness.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), 30)
    assert isinstance(caught.value.cause, ApplicationError)
    assert "unknown tool name(s): no_such_tool" in caught.value.cause.message


async def test_retryable_model_errors_that_never_stop_end_the_run_in_error(
    harness: Harness,
) -> None:
    """503 on every attempt: Temporal retries up to model_max_attempts, then the run ends."""
    overloaded = {"status": 503, "body": {"error": {"message": "overloaded"}}}
    model = harness.script({"content": "never", "errors": [overloaded] * 10})
    handle = await harness.start(model, model_max_attempts=3)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error == "model call failed: openai returned HTTP 503: overloaded"
    assert len(harness.requests(model)) == 3
    status = await handle.query(AgentWorkflow.state)
    assert status.state == "Error"
    assert status.error == result.error


async def test_a_model_call_that_outlives_its_timeout_is_retried_then_fails(
    harness: Harness,
) -> None:
    """A call slower than model_timeout_seconds times out per attempt; the error says so."""
    model = harness.script({"content": "too late", "delay": 5})
    handle = await harness.start(model, model_timeout_seconds=1, model_max_attempts=2)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error == "model call failed: start-to-close timeout (maximum attempts reached)"


@pytest.mark.replay_corpus
async def test_cancelling_a_waiting_run_ends_it_cancelled(harness: Harness) -> None:
    """`temporal workflow cancel` on a run waiting for approval: Cancelled, visibly."""
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "b"}}]}
    )
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    desc = await handle.describe()
    assert desc.status is WorkflowExecutionStatus.CANCELED
    assert desc.typed_search_attributes.get(search_attributes.AGENT_STATE) == "Cancelled"
    trace = await handle.query(AgentWorkflow.trace)
    assert (trace.entries[-1].state, trace.entries[-1].event) == ("WaitingForHuman", "Cancel")
    assert not (harness.workspace / "a").exists()


async def test_an_undeclared_transition_fails_the_agent_run(
    client: Client, model_server: ScriptedModelServer, tmp_path: Any
) -> None:
    """In AgentWorkflow's own engine an undeclared pair fails the run, non-retryably, by name."""
    name = f"misfire-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        name,
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "b"}}]},
            {"content": "unreachable"},
        ],
    )
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    async with http_client() as http:
        models = ModelActivities(
            ProviderSettings.from_env({"OPENAI_BASE_URL": model_server.base_url}), http
        )
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[MisbehavingAgent],
            activities=[models.call_model, ToolActivities().run_tool, list_loaded_tools],
            workflow_runner=workflow_runner(),
        ):
            handle = await client.start_workflow(
                MisbehavingAgent.run,
                AgentInput(task="t", model=f"openai:{name}", workspace=str(tmp_path)),
                id=name,
                task_queue=task_queue,
            )
            with pytest.raises(WorkflowFailureError) as caught:
                await asyncio.wait_for(handle.result(), 30)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidTransition"
    assert cause.non_retryable
    assert cause.message == "no transition is declared for (PostToolsHook, Continue)"
    history = await handle.fetch_history()
    assert not any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in history.events
    )  # the run failed; its task was not left retrying
    desc = await handle.describe()
    assert desc.typed_search_attributes.get(search_attributes.AGENT_STATE) == "Error"


async def test_a_run_dropped_by_a_stopping_worker_records_nothing(
    client: Client, model_server: ScriptedModelServer, tmp_path: Any
) -> None:
    """A worker that stops with a run parked closes the run's coroutine: that is not a failure,
    and no workflow code runs outside a workflow task ('Exception ignored' at collection)."""
    ignored: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = ignored.append
    try:
        task_queue = f"dropped-{uuid.uuid4().hex[:8]}"
        name = f"dropped-{uuid.uuid4().hex[:8]}"
        write = {"name": "write_file", "arguments": {"path": "a", "content": "a"}}
        model_server.add_model(name, [{"tool_calls": [write]}, {"content": "done"}])
        async with http_client() as http, scripted_worker(client, task_queue, model_server, http):
            handle = await start_agent(
                client, task_queue, f"openai:{name}", tmp_path, "write",
                config=AgentConfig(require_approval=("write_file",)), id_prefix="dropped",
            )  # fmt: skip
            while (await handle.query(AgentWorkflow.state)).state != "WaitingForHuman":
                await asyncio.sleep(0.05)
        gc.collect()
        await handle.terminate("test over")
    finally:
        sys.unraisablehook = previous
    runs = [u for u in ignored if "run_workflow" in repr(u.object)]
    assert runs == [], [repr(u.exc_value) for u in runs]
