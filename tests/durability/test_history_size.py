"""History that stays small: model calls carry the stored conversation's head plus what is new,
long tool outputs travel as a preview and a key, and the model still sees every word."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import decode_typed_search_attributes

from tests.support.harness import Harness, scripted_worker, start_agent
from treadle.activities.model.activity import http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    ApproveSignal,
    RunStatus,
    UserMessage,
)
from treadle.workflows.agent.parts.publishing import STEP_ATTRIBUTES_EVERY
from treadle.workflows.agent.workflow import AgentWorkflow

BIG = 50_000
STEPS = 6


def _reads(steps: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{i % 2}.txt"}}]}
        for i in range(steps)
    ]
    return [*turns, {"content": "read them"}]


async def _model_inputs(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """Bytes of every model activity's input in the run's history."""
    history = await handle.fetch_history()
    sizes = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "call_model":
                # A payload moved to External Storage counts at its stored size.
                sizes.append(
                    sum(
                        p.external_payloads[0].size_bytes if p.external_payloads else p.ByteSize()
                        for p in attrs.input.payloads
                    )
                )
    return sizes


async def _run_reads(
    client: Client, task_queue: str, models: ScriptedModelServer, workspace: Path
) -> tuple[WorkflowHandle[Any, Any], str]:
    for i in range(2):
        (workspace / f"f{i}.txt").write_text(f"{i}" * BIG)
    name = f"reads-{uuid.uuid4().hex[:8]}"
    models.add_model(name, _reads(STEPS))
    handle = await start_agent(
        client, task_queue, f"openai:{name}", workspace, "Read the files.",
        config=AgentConfig(max_observation_chars=60_000), id_prefix="reads",
    )  # fmt: skip
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    return handle, name


async def test_model_calls_carry_references_not_the_conversation(harness: Harness) -> None:
    """Six 50 KB reads: each model call's input stays a few KB, and the model got every byte."""
    handle, name = await _run_reads(
        harness.client, harness.task_queue, harness.models, harness.workspace
    )
    inputs = await _model_inputs(handle)
    assert len(inputs) == STEPS + 1
    assert max(inputs) < 8_000, inputs
    last = harness.models.requests_for(name)[-1].body
    tool_texts = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert len(tool_texts) == STEPS
    assert all(len(t) >= BIG for t in tool_texts)
    history = await handle.fetch_history()
    assert sum(e.ByteSize() for e in history.events) < (STEPS + 1) * 8_000


async def test_without_a_store_every_call_carries_everything(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """The baseline the store removes: without one, inputs grow with the conversation."""
    task_queue = f"nostore-{uuid.uuid4().hex[:8]}"
    async with (
        http_client() as http,
        scripted_worker(client, task_queue, model_server, http, store=None),
    ):
        handle, _ = await _run_reads(client, task_queue, model_server, tmp_path)
    inputs = await _model_inputs(handle)
    assert inputs[-1] > STEPS * BIG, inputs


async def test_a_missing_blob_is_a_clear_error_that_names_it(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A store that lost the conversation ends the call with the blob's key, never silently."""
    task_queue = f"lost-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "store"
    name = f"lost-{uuid.uuid4().hex[:8]}"
    model_server.add_model(name, [{"content": "one"}, {"content": "two"}])
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with (
        http_client() as http,
        scripted_worker(client, task_queue, model_server, http, store=FileBlobStore(root)),
    ):
        handle = await start_agent(
            client, task_queue, f"openai:{name}", workspace, "hello", thread=True,
            config=AgentConfig(model_max_attempts=1), id_prefix="lost",
        )  # fmt: skip
        while (await handle.query(AgentWorkflow.state)).final_answer != "one":
            await asyncio.sleep(0.05)
    shutil.rmtree(root)
    root.mkdir()  # the store answers, without the blobs (a gone directory is waited for)
    # A fresh worker: nothing cached, the store is all it has.
    async with (
        http_client() as http,
        scripted_worker(client, task_queue, model_server, http, store=FileBlobStore(root)),
    ):
        await handle.execute_update(AgentWorkflow.send, UserMessage(text="again"))
        result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert "conversation blob" in result.error and "is missing from the store at" in result.error
    assert str(root) in result.error


@pytest.mark.replay_corpus
async def test_a_step_costs_12_history_events_as_on_the_floor(harness: Harness) -> None:
    """A step (a model call and one tool call) is 12 events on the bare Temporal floor (two
    activities, two workflow tasks), and so is a Treadle step in the steady state: its own
    moves (AgentState Planning <-> Acting, AgentStep) send no upsert until STEP_ATTRIBUTES_EVERY
    of workflow time has passed since the last one (a busy machine's slower run is allowed
    that many)."""
    writes = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "n.md", "content": str(i)}}]}
        for i in range(10)
    ]
    short = harness.script(writes[0], {"content": "done"})
    long = harness.script(*writes, {"content": "done"})
    counts = []
    for model in (short, long):
        handle = await harness.start(model, max_steps=20)
        assert (await handle.result()).status is RunStatus.DONE
        history = await handle.fetch_history()
        counts.append(len(history.events))
    paced = int(
        (history.events[-1].event_time.ToDatetime() - history.events[0].event_time.ToDatetime())
        / STEP_ATTRIBUTES_EVERY
    )
    short_events, long_events = counts
    assert long_events - short_events <= 12 * 9 + paced, (counts, paced)


@pytest.mark.replay_corpus
async def test_an_approved_call_runs_as_acting_never_as_waiting(harness: Harness) -> None:
    """A step's tools send no upsert of their own after its model call, but tools approved
    after a wait do: visibility never shows a run whose approval was given as still waiting."""
    write = {"name": "write_file", "arguments": {"path": "n.md", "content": "x"}}
    model = harness.script({"tool_calls": [write]}, {"content": "done"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    assert (await handle.result()).status is RunStatus.DONE
    states = [
        decode_typed_search_attributes(
            e.upsert_workflow_search_attributes_event_attributes.search_attributes
        ).get(search_attributes.AGENT_STATE)
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    sent = [s for s in states if s is not None]
    assert sent[sent.index("WaitingForHuman") + 1] == "Acting", sent
