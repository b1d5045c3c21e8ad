"""The agent run's state is one model: it round-trips whole through Temporal's data converter
(as continue-as-new will carry it), the memory's ownership rules still hold on it, and the
workflow class keeps nothing beside it."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.support.parsing import parse
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, TokenUsage, ToolCall
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import approvals
from treadle.workflows.agent.parts.memory import OwnershipViolation
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.toolbox import Toolbox

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
AGENT_SOURCES = {  # the workflow class, the engine it is and its handlers
    "AgentWorkflow": Path(__file__).resolve().parents[2] / "workflows" / "agent" / "workflow.py",
    "AgentEngine": Path(__file__).resolve().parents[2] / "workflows" / "agent" / "engine.py",
    "AgentHandlers": Path(__file__).resolve().parents[2] / "workflows" / "agent" / "handlers.py",
}


def busy_run() -> AgentRun:
    """A run in the middle of things: a step planned, a call waiting for approval, usage
    spent on two models, the tracker fed, a phase started and the trace written."""
    run = AgentRun.begin(
        AgentInput(
            task="fix the build",
            model="openai:gpt-4o",
            workspace="/tmp/ws",
            config=AgentConfig(require_approval=("write_file",), phases=("read", "fix")),
        ),
        NOW,
    )
    run.tracker.start_phase(1, "read", NOW, total=2)
    run.state = State.PLANNING
    run.memory.enter(State.PLANNING)
    run.memory.step = 1
    call = ToolCall(id="c1", name="write_file", arguments='{"path": "a.md", "content": "x"}')
    run.memory.current_tool_calls = (call,)
    run.memory.pending_approvals = approvals.approvals_needed(
        (Toolbox(run.input.config).check(call),), run.input.config.require_approval, 1, NOW
    )
    run.spend("openai:gpt-4o", TokenUsage(prompt_tokens=10, completion_tokens=5, total_tokens=15))
    run.spend("openai:gpt-4o-mini", TokenUsage(prompt_tokens=3, total_tokens=3))
    run.tracker.record_tool_call("read_file", "a.md", success=True, mutating=False)
    run.record(State.PLANNING, "ModelResponse", "1 tool call(s), 15 tokens", NOW)
    run.recovery.stuck_reason = "No progress in the last 10 actions"
    run.recovery.hints_given = 1
    run.state = State.WAITING_FOR_HUMAN
    return run


def test_the_whole_run_round_trips_through_the_data_converter() -> None:
    """Encoded as one payload and decoded again, the run is equal in every field."""
    run = busy_run()
    payloads = pydantic_data_converter.payload_converter.to_payloads([run])
    [decoded] = pydantic_data_converter.payload_converter.from_payloads(payloads, [AgentRun])
    # Field by field (``==`` on the models would also compare the memory's private cursor,
    # which the engine sets again before every handler).
    assert decoded.model_dump() == run.model_dump()
    assert decoded.memory.pending_approvals[0].call_id == "c1"
    assert decoded.memory.usage_by_model["openai:gpt-4o-mini"].total_tokens == 3
    assert decoded.tracker.summary(NOW, decoded.started_at).current_phase == 1
    assert [e.event for e in decoded.trace] == ["ModelResponse"]
    assert decoded.waiting_approvals() == run.waiting_approvals() != ()


def test_ownership_rules_still_hold_on_a_decoded_run() -> None:
    """After the round trip the memory refuses a write from a state that does not own it."""
    payloads = pydantic_data_converter.payload_converter.to_payloads([busy_run()])
    [decoded] = pydantic_data_converter.payload_converter.from_payloads(payloads, [AgentRun])
    decoded.memory.enter(State.ACTING)
    with pytest.raises(OwnershipViolation, match="Acting may not write 'step'"):
        decoded.memory.step = 2


def test_the_workflow_class_keeps_nothing_but_the_run() -> None:
    """Every ``self.X = ...`` in AgentWorkflow and its engine assigns ``self._run`` (or the live
    stream and its topic): no other state beside it."""
    classes = [
        node
        for name, source in AGENT_SOURCES.items()
        for node in parse(source.read_text()).body
        if isinstance(node, ast.ClassDef) and node.name == name
    ]
    assert len(classes) == len(AGENT_SOURCES)
    assigned = {
        target.attr
        for cls in classes
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    }
    # The publisher holds the live stream (the SDK's object beside the run; continue-as-new
    # carries it in ``AgentInput.stream``) and search-attribute changes that wait within one
    # workflow task only. The tool runner holds only references to the run and the publisher.
    assert assigned == {"_run", "_pub", "_tools"}


def test_a_state_outside_the_table_is_refused_by_the_model() -> None:
    """The state field is the transition table's enum: a made-up state does not validate."""
    run = busy_run()
    with pytest.raises(ValueError, match="state"):
        run.state = "Dreaming"  # type: ignore[assignment]
