"""agentsm's memory ownership rules, enforced: each field has its writers and its clearers."""

from __future__ import annotations

import pytest

from treadle.workflows.agent.messages.models import ToolCall, ToolOutcome, Turn
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.memory import OWNERSHIP, AgentMemory, OwnershipViolation

CALL = ToolCall(id="c1", name="list_dir", arguments="{}")
OUTCOME = ToolOutcome.of(CALL, "a.txt", success=True)


def memory_in(state: State) -> AgentMemory:
    memory = AgentMemory(task="t")
    memory.enter(state)
    return memory


def test_step_is_written_by_planning_only() -> None:
    """Only Planning increments the step; every other state is refused."""
    memory_in(State.PLANNING).step = 1
    for state in State:
        if state is State.PLANNING:
            continue
        with pytest.raises(OwnershipViolation, match=f"{state.value} may not write 'step'"):
            memory_in(state).step = 1


def test_current_tool_calls_set_by_planning_cleared_by_observing() -> None:
    """Planning sets the calls; Observing clears them; Acting may do neither."""
    memory = memory_in(State.PLANNING)
    memory.current_tool_calls = (CALL,)
    memory.enter(State.ACTING)
    with pytest.raises(OwnershipViolation, match="Acting may not clear 'current_tool_calls'"):
        memory.current_tool_calls = ()
    with pytest.raises(OwnershipViolation, match="Acting may not write 'current_tool_calls'"):
        memory.current_tool_calls = (CALL, CALL)
    memory.enter(State.OBSERVING)
    memory.current_tool_calls = ()
    assert memory.current_tool_calls == ()


def test_observations_set_by_acting_cleared_by_observing() -> None:
    """Acting writes the observation; Planning may not; Observing clears it."""
    memory = memory_in(State.ACTING)
    memory.observations = (OUTCOME,)
    memory.enter(State.PLANNING)
    with pytest.raises(OwnershipViolation):
        memory.observations = ()
    memory.enter(State.OBSERVING)
    memory.observations = ()


def test_history_is_append_only_for_observing() -> None:
    """Observing may only push to the history; rewriting it is Reflecting's job alone."""
    memory = memory_in(State.OBSERVING)
    first = Turn(step=1, outcomes=(OUTCOME,))
    memory.history = (first,)
    memory.history = (first, Turn(step=2, outcomes=(OUTCOME,)))
    with pytest.raises(OwnershipViolation, match="Observing may only append to 'history'"):
        memory.history = (Turn(step=9),)
    memory.enter(State.REFLECTING)
    memory.history = (Turn(step=2, note="summary of steps 1-2"),)
    assert len(memory.history) == 1


def test_final_answer_and_error_are_never_cleared() -> None:
    """Once written, the final answer and the error stay: nobody may clear them."""
    memory = memory_in(State.PLANNING)
    memory.final_answer = "42"
    memory.error = "boom"
    for state in State:
        memory.enter(state)
        with pytest.raises(OwnershipViolation):
            memory.final_answer = None
        with pytest.raises(OwnershipViolation):
            memory.error = None


def test_ownership_table_names_only_real_fields() -> None:
    """Every rule refers to a field that exists, so no rule is silently dead."""
    assert set(OWNERSHIP) <= set(AgentMemory.model_fields)


def test_messages_pair_each_tool_call_with_its_result() -> None:
    """build_messages: system, task, then assistant tool calls each followed by their results."""
    memory = AgentMemory(task="do it", system_prompt="be brief")
    memory.enter(State.OBSERVING)
    memory.history = (Turn(step=1, assistant_text="looking", outcomes=(OUTCOME,)),)
    messages = memory.build_messages()
    assert [(m.role, m.content) for m in messages] == [
        ("system", "be brief"),
        ("user", "do it"),
        ("assistant", "looking"),
        ("tool", "a.txt"),
    ]
    assert messages[2].tool_calls == (CALL,)
    assert messages[3].tool_call_id == "c1"
