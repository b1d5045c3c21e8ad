"""The agent loop end to end: plan, act, observe, hook, answer — on a real dev server."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowExecutionStatus

from tests.support.harness import Harness, tool_messages
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


@pytest.mark.replay_corpus
async def test_happy_path_writes_a_file_and_answers(harness: Harness) -> None:
    """A tool call runs in the workspace, its result reaches the model, the answer ends the run."""
    model = harness.script(
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "notes.md", "content": "hi"}}
            ]
        },
        {"content": "I wrote notes.md."},
    )
    handle = await harness.start(model, task="Write hi to notes.md")
    result: AgentResult = await handle.result()

    assert result.status is RunStatus.DONE
    assert result.answer == "I wrote notes.md."
    assert result.steps == 2
    assert result.usage.total_tokens > 0
    assert (harness.workspace / "notes.md").read_text() == "hi"
    second = harness.requests(model)[1]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert "wrote 2 bytes" in tool_messages(second)[0]["content"]
    assert {t["function"]["name"] for t in second["tools"]} >= {"read_file", "write_file"}
    assert "run_command" not in {t["function"]["name"] for t in second["tools"]}


async def test_trace_records_every_transition_in_order(harness: Harness) -> None:
    """The trace walks the transition table: Idle, Planning, Acting, Observing, hook, Done."""
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}]},
        {"content": "done"},
    )
    handle = await harness.start(model)
    await handle.result()
    trace = await handle.query(AgentWorkflow.trace)
    transitions = [(e.state, e.event) for e in trace.entries if "->" in e.data]
    assert transitions == [
        ("Idle", "Start"),
        ("Planning", "LlmToolCall"),
        ("Acting", "ToolSuccess"),
        ("Observing", "FilesChanged"),
        ("PostToolsHook", "HookDone"),
        ("Planning", "LlmFinalAnswer"),
    ]
    times = [e.timestamp for e in trace.entries]
    assert times == sorted(times)
    replies = [e.data for e in trace.entries if e.event == "ModelResponse"]
    # What the provider said about each reply reaches the trace instead of being dropped.
    served = model.partition(":")[2]
    assert replies == [
        f"1 tool call(s), {replies[0].split()[3]} tokens, finish tool_calls, served by {served}",
        f"0 tool call(s), {replies[1].split()[3]} tokens, finish stop, served by {served}",
    ]
    status = await handle.query(AgentWorkflow.state)
    assert status.state == "Done"
    assert status.final_answer == "done"


async def test_read_only_tools_skip_the_post_tools_hook(harness: Harness) -> None:
    """Observing goes straight back to Planning when no tool changed anything."""
    model = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"content": "empty workspace"},
    )
    handle = await harness.start(model)
    await handle.result()
    trace = await handle.query(AgentWorkflow.trace)
    events = [e.event for e in trace.entries]
    assert "Continue" in events
    assert "HookDone" not in events


@pytest.mark.replay_corpus
async def test_parallel_tool_calls_run_concurrently_and_are_observed_in_call_order(
    harness: Harness,
) -> None:
    """Several calls from one response are scheduled together; results come back in call order."""
    (harness.workspace / "a.txt").write_text("alpha")
    (harness.workspace / "b.txt").write_text("beta")
    model = harness.script(
        {
            "tool_calls": [
                {"id": "first", "name": "read_file", "arguments": {"path": "a.txt"}},
                {"id": "second", "name": "read_file", "arguments": {"path": "b.txt"}},
                {"id": "third", "name": "list_dir", "arguments": {"path": "."}},
            ]
        },
        {"content": "read both"},
    )
    handle = await harness.start(model)
    result = await handle.result()
    assert result.status is RunStatus.DONE

    history = await handle.fetch_history()
    kinds = [
        e.event_type
        for e in history.events
        if e.event_type
        in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        )
    ]
    # model, then three tools scheduled before any of them completes, then the final model call
    scheduled = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    completed = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    assert kinds[:5] == [scheduled, completed, scheduled, scheduled, scheduled]

    tools = tool_messages(harness.requests(model)[1])
    assert [m["tool_call_id"] for m in tools] == ["first", "second", "third"]
    assert "alpha" in tools[0]["content"]
    assert "beta" in tools[1]["content"]
    trace = await handle.query(AgentWorkflow.trace)
    assert ("Planning", "LlmParallelToolCalls") in [(e.state, e.event) for e in trace.entries]


@pytest.mark.replay_corpus
async def test_max_steps_ends_a_run_that_never_answers(harness: Harness) -> None:
    """A model that keeps calling tools is stopped at max_steps with a clear error."""
    model = harness.script({"tool_calls": [{"name": "list_dir", "arguments": {}}]})
    handle = await harness.start(model, max_steps=3)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.ERROR
    assert result.error is not None
    assert "max steps" in result.error
    assert "3" in result.error
    assert result.steps == 3
    assert len(harness.requests(model)) == 3
    status = await handle.query(AgentWorkflow.state)
    assert status.state == "Error"


async def test_usage_accumulates_across_model_calls(harness: Harness) -> None:
    """Token usage from every response is summed into the run's state and result."""
    model = harness.script(
        {
            "tool_calls": [{"name": "list_dir", "arguments": {}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        },
        {"content": "ok", "usage": {"prompt_tokens": 150, "completion_tokens": 5}},
    )
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.usage.prompt_tokens == 250
    assert result.usage.completion_tokens == 15
    assert result.usage.total_tokens == 265
    status = await handle.query(AgentWorkflow.state)
    assert status.usage == result.usage


async def test_web_ui_sees_summaries_details_and_search_attributes(harness: Harness) -> None:
    """Activities carry 'step N · tool target' summaries; details and search attributes follow
    (a fast run's own moves wait for the pace; its end is its close status)."""
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.md", "content": "x"}}]},
        {"content": "done"},
    )
    handle = await harness.start(model, task="Write notes")
    await handle.result()
    history = await handle.fetch_history()
    converter = harness.client.data_converter.payload_converter
    summaries = [
        converter.from_payload(e.user_metadata.summary, str)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    model_name = model.partition(":")[2]
    assert summaries == [
        f"step 1 · model {model_name}",
        "step 1 · write_file notes.md",
        f"step 2 · model {model_name}",
    ]
    desc = await handle.describe()
    assert await desc.static_summary() == "Write notes"
    # Started with what it shows first, it answered from a step: the close status says done.
    assert desc.status is WorkflowExecutionStatus.COMPLETED
    assert desc.typed_search_attributes.get(search_attributes.AGENT_STATE) == "Planning"
    assert desc.typed_search_attributes.get(search_attributes.AGENT_STEP) == 0
    assert desc.typed_search_attributes.get(search_attributes.AGENT_MODEL) == model
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**State:** Done" in metadata.current_details
    assert "**Step:** 2 / 20" in metadata.current_details
