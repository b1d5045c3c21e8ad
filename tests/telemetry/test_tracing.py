"""Traces: one run is one trace, from the client that starts it to every model and tool call,
exported over OTLP/HTTP to a real receiver on loopback, with no duplicate after replays."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import scripted_worker
from tests.support.telemetry import (
    Observed,
    ReceivedSpan,
    flush_spans,
    observed_client,
    uncached_worker,
)
from treadle.activities.model.activity import http_client
from treadle.scripted_model import ScriptedModelServer
from treadle.stream import watch_events
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput
from treadle.workflows.agent.workflow import AgentWorkflow

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 30}
SPAN_KIND_CLIENT = 3


def turns() -> list[Mapping[str, Any]]:
    return [
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}], "usage": USAGE},
        {"content": "the workspace is empty", "usage": USAGE},
    ]


async def traced_run(
    observed: Observed,
    models: ScriptedModelServer,
    workspace: Path,
    *,
    uncached: bool = False,
    script: Sequence[Mapping[str, Any]] | None = None,
    config: AgentConfig | None = None,
) -> tuple[str, list[ReceivedSpan]]:
    """Run a scripted agent to its end (``turns()`` unless ``script`` is given) on a worker of
    the traced client, following any continue-as-new; its model name and the spans of the
    trace its client's ``StartWorkflow`` span began."""
    name = f"traced-{uuid.uuid4().hex[:10]}"
    models.add_model(name, script if script is not None else turns())
    task_queue = f"traced-{uuid.uuid4().hex[:10]}"
    workspace.mkdir(exist_ok=True)
    async with http_client() as http:
        if uncached:
            template = scripted_worker(observed.client, f"{task_queue}-template", models, http)
            worker = uncached_worker(template, task_queue)
        else:
            worker = scripted_worker(observed.client, task_queue, models, http)
        async with worker:
            handle = await observed.client.start_workflow(
                AgentWorkflow.run,
                AgentInput(
                    task="Look around.",
                    model=f"openai:{name}",
                    workspace=str(workspace),
                    config=config or AgentConfig(),
                ),
                id=f"traced-{uuid.uuid4().hex[:12]}",
                task_queue=task_queue,
            )
            await handle.result()
    await flush_spans()
    (start,) = [
        s
        for s in observed.receiver.spans
        if s.name == "StartWorkflow:AgentWorkflow"
        and s.attributes.get("temporalWorkflowID") == handle.id
    ]
    return name, observed.receiver.of_trace(start.trace_id)


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def children(spans: list[ReceivedSpan], parent: ReceivedSpan, name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_id == parent.span_id and s.name == name]


async def test_a_run_is_one_trace_from_the_client_to_every_model_and_tool_call(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """StartWorkflow → RunWorkflow → StartActivity → RunActivity → chat / execute_tool spans,
    the model spans with the GenAI attributes, decoded from what the OTLP receiver was sent."""
    observed = await observed_client(temporal_address)
    name, spans = await traced_run(observed, model_server, tmp_path / "workspace")

    root = one(spans, "StartWorkflow:AgentWorkflow")
    assert root.parent_id == ""
    assert root.service == "treadle-tests"
    run = one(spans, "RunWorkflow:AgentWorkflow")
    assert run.parent_id == root.span_id

    model_starts = children(spans, run, "StartActivity:call_model")
    assert len(model_starts) == 2
    chats = []
    for start in model_starts:
        (attempt,) = children(spans, start, "RunActivity:call_model")
        chats += children(spans, attempt, f"chat {name}")
    assert len(chats) == 2
    for chat in chats:
        assert chat.kind == SPAN_KIND_CLIENT
        assert {k: v for k, v in chat.attributes.items() if k.startswith("gen_ai.")} == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": name,
            "gen_ai.response.model": name,
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 20,
            "gen_ai.usage.cache_read.input_tokens": 30,
            "gen_ai.response.finish_reasons": chat.attributes["gen_ai.response.finish_reasons"],
        }
        assert chat.attributes["temporal.activity.attempt"] == 1
        # Content capture is off: no prompt, no completion.
        assert "gen_ai.input.messages" not in chat.attributes
        assert "gen_ai.output.messages" not in chat.attributes
    assert sorted(c.attributes["gen_ai.response.finish_reasons"][0] for c in chats) == [
        "stop",
        "tool_calls",
    ]
    assert sorted(c.attributes["treadle.step"] for c in chats) == [1, 2]

    (tool_start,) = children(spans, run, "StartActivity:run_tool")
    (tool_attempt,) = children(spans, tool_start, "RunActivity:run_tool")
    (tool,) = children(spans, tool_attempt, "execute_tool list_dir")
    call_id = model_server.requests_for(name)[1].body["messages"][-1]["tool_call_id"]
    assert tool.attributes["gen_ai.tool.name"] == "list_dir"
    assert tool.attributes["gen_ai.tool.call.id"] == call_id
    assert tool.attributes["treadle.tool.target"] == "."
    assert tool.attributes["treadle.outcome"] == "ok"
    # Every span the run made is in this one trace, and each hangs from another but the root.
    by_id = {s.span_id for s in spans}
    assert all(s.parent_id in by_id for s in spans if s is not root)
    assert all(path == "/v1/traces" for path in observed.receiver.paths)


async def test_replays_after_cache_eviction_export_no_span_twice(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """With no workflow cache every workflow task replays the run from its start; the replayed
    workflow code re-creates its spans but exports none of them again."""
    observed = await observed_client(temporal_address)
    name, spans = await traced_run(observed, model_server, tmp_path / "workspace", uncached=True)

    assert Counter(s.span_id for s in spans).most_common(1)[0][1] == 1
    names = Counter(s.name for s in spans)
    assert names["RunWorkflow:AgentWorkflow"] == 1
    assert names["StartActivity:call_model"] == 2
    assert names["RunActivity:call_model"] == 2
    assert names[f"chat {name}"] == 2
    assert names["StartActivity:run_tool"] == 1
    assert names["execute_tool list_dir"] == 1


@pytest.mark.parametrize("uncached", [False, True], ids=["cached", "uncached"])
async def test_a_run_that_continues_as_new_stays_one_trace(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path, uncached: bool
) -> None:
    """The run hands itself over (continue-as-new) after 20 history events: each later run's
    RunWorkflow span is the child of the previous run's (the plugin puts the context in the
    continue-as-new command's headers), so every run's model and tool calls are in the trace
    the client started, and every span of the chain is exported once, its parent with it, also
    when every workflow task replays the run from its start (no workflow cache)."""
    listing = {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}], "usage": USAGE}
    script = [listing] * 5 + [{"content": "the workspace is empty", "usage": USAGE}]
    observed = await observed_client(temporal_address)
    name, spans = await traced_run(
        observed,
        model_server,
        tmp_path / "workspace",
        script=script,
        config=AgentConfig(continue_as_new_after_events=20),
        uncached=uncached,
    )

    root = one(spans, "StartWorkflow:AgentWorkflow")
    workflow_id = root.attributes["temporalWorkflowID"]
    # Looked for in everything the receiver got, not only in this trace: a span of the chain
    # that went to a trace of its own would show here.
    received = list(observed.receiver.spans)
    of_chain = [s for s in received if s.attributes.get("temporalWorkflowID") == workflow_id]
    chats = [s for s in received if s.name == f"chat {name}"]
    attempts = {s.span_id for s in of_chain if s.name == "RunActivity:run_tool"}
    tools = [s for s in received if s.name == "execute_tool list_dir" and s.parent_id in attempts]
    assert len(chats) == 6
    assert len(tools) == 5
    assert {s.trace_id for s in of_chain + chats + tools} == {root.trace_id}

    # One RunWorkflow span per run of the chain, each hanging from the one before it.
    runs = [s for s in spans if s.name == "RunWorkflow:AgentWorkflow"]
    assert len({s.attributes["temporalRunID"] for s in runs}) == len(runs) >= 2
    by_parent = {s.parent_id: s for s in runs}
    chain = [by_parent[root.span_id]]
    while chain[-1].span_id in by_parent:
        chain.append(by_parent[chain[-1].span_id])
    assert len(chain) == len(runs)

    # The later runs' activities hang from their own run's RunWorkflow span.
    by_id = {s.span_id: s for s in spans}

    def run_of(span: ReceivedSpan) -> ReceivedSpan:
        while span.name != "RunWorkflow:AgentWorkflow":
            span = by_id[span.parent_id]
        return span

    later = chain[1:]
    assert any(run_of(c) in later for c in chats)
    assert any(run_of(t) in later for t in tools)
    for span in chats + tools:
        attempt = by_id[span.parent_id]
        assert attempt.attributes["temporalRunID"] == run_of(span).attributes["temporalRunID"]

    # Exported once each, and no span's parent is missing (the RunWorkflow span of a run that
    # continued as new is ended and exported like any other).
    assert Counter(s.span_id for s in spans).most_common(1)[0][1] == 1
    assert all(s.parent_id in by_id for s in spans if s is not root)


async def test_watching_a_run_is_one_trace_not_one_per_poll(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Every poll of a watch (``watch_events``) is a query span under the watch's one span:
    a watcher adds one trace, however many polls it makes."""
    observed = await observed_client(temporal_address)
    slow = [{**turns()[0], "delay": 1.0}, turns()[1]]
    name = f"watched-{uuid.uuid4().hex[:10]}"
    model_server.add_model(name, slow)
    task_queue = f"watched-{uuid.uuid4().hex[:10]}"
    async with (
        http_client() as http,
        scripted_worker(observed.client, task_queue, model_server, http),
    ):
        handle = await observed.client.start_workflow(
            AgentWorkflow.run,
            AgentInput(task="Look around.", model=f"openai:{name}", workspace=str(tmp_path)),
            id=f"watched-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue,
        )
        kinds = [item.value.kind async for item in watch_events(observed.client, handle.id)]
    assert kinds[-1] == "ended"
    await flush_spans()
    (watch,) = [s for s in observed.receiver.spans if s.name == f"watch {handle.id}"]
    polls = [
        s
        for s in observed.receiver.spans
        if s.name.startswith("QueryWorkflow:")
        and s.attributes.get("temporalWorkflowID") == handle.id
    ]
    assert len(polls) >= 2
    assert {s.trace_id for s in polls} == {watch.trace_id}
    assert watch.parent_id == ""
    assert all(s.parent_id == watch.span_id for s in polls)
