"""The transition table: immutable, complete for the seeds, strict about undeclared pairs."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from treadle.sandbox import workflow_runner
from treadle.workflows.agent.messages.state_machine import (
    SEED_STATES,
    TRANSITIONS,
    Event,
    InvalidTransition,
    State,
    next_state,
)

README = Path(__file__).resolve().parents[2] / "README.md"


def test_table_cannot_be_changed_at_runtime() -> None:
    """The table is read-only: no code path can add or change a rule."""
    with pytest.raises(TypeError):
        TRANSITIONS[(State.DONE, Event.START)] = State.PLANNING  # type: ignore[index]


def test_undeclared_pair_raises_a_non_retryable_invalid_transition() -> None:
    """An undeclared (state, event) names the pair and is not retryable."""
    with pytest.raises(InvalidTransition) as caught:
        next_state(State.IDLE, Event.TOOL_SUCCESS)
    assert caught.value.message == "no transition is declared for (Idle, ToolSuccess)"
    assert caught.value.type == "InvalidTransition"
    assert caught.value.non_retryable


def test_terminal_states_have_no_way_out() -> None:
    """Done, Error, Halted and Cancelled end the run: no rule leaves them."""
    for (state, _event), _target in TRANSITIONS.items():
        assert not state.is_terminal, state


def test_every_state_is_reachable_from_idle() -> None:
    """No state in the enum is dead: each is the target of some path from Idle."""
    reached = {State.IDLE}
    frontier = [State.IDLE]
    while frontier:
        state = frontier.pop()
        for (source, _event), target in TRANSITIONS.items():
            if source is state and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(State)


def test_every_live_state_can_be_cancelled() -> None:
    """Cancelling a run is legal whatever it is doing."""
    for state in State:
        if not state.is_terminal:
            assert next_state(state, Event.CANCEL) is State.CANCELLED


def test_agentsm_table_is_contained() -> None:
    """agentsm's declared transitions hold in ours, with its state names mapped."""
    agentsm = SEED_STATES["agentsm"]
    rules = [
        ("Idle", "Start", "Planning"),
        ("Planning", "LlmToolCall", "Acting"),
        ("Planning", "LlmParallelToolCalls", "ParallelActing"),
        ("Planning", "LlmFinalAnswer", "Done"),
        ("Planning", "MaxSteps", "Error"),
        ("Planning", "LowConfidence", "Reflecting"),
        ("Planning", "AnswerTooShort", "Planning"),
        ("Planning", "ToolBlacklisted", "Planning"),
        ("Planning", "HumanApprovalRequired", "WaitingForHuman"),
        ("Planning", "FatalError", "Error"),
        ("WaitingForHuman", "HumanApproved", "Acting"),
        ("WaitingForHuman", "HumanRejected", "Observing"),
        ("WaitingForHuman", "HumanModified", "Acting"),
        ("Acting", "ToolSuccess", "Observing"),
        ("Acting", "ToolFailure", "Observing"),
        ("ParallelActing", "ToolSuccess", "Observing"),
        ("ParallelActing", "ToolFailure", "Observing"),
        ("Observing", "Continue", "Planning"),
        ("Observing", "NeedsReflection", "Reflecting"),
        ("Reflecting", "ReflectDone", "Planning"),
    ]
    for source, event, target in rules:
        assert next_state(agentsm[source], Event(event)) is agentsm[target]


def test_readme_maps_every_seed_state() -> None:
    """The manual's mapping table (docs/loop.md) agrees with SEED_STATES, row by row."""
    text = (README.parent / "docs" / "loop.md").read_text()
    for seed, names in SEED_STATES.items():
        for name, ours in names.items():
            row = re.compile(rf"^\|\s*{seed}\s*\|\s*`?{name}`?\s*\|\s*`?{ours.value}`?\s*\|", re.M)
            assert row.search(text), f"docs/loop.md lacks: | {seed} | {name} | {ours.value} |"


@workflow.defn(sandboxed=False)
class MisfiringWorkflow:
    """Fires an event its state does not declare: the shape of a bug in the loop."""

    @workflow.run
    async def run(self) -> str:
        next_state(State.IDLE, Event.START)
        next_state(State.PLANNING, Event.HOOK_DONE)
        return "unreachable"


async def test_invalid_transition_fails_the_workflow_not_the_task(client: Client) -> None:
    """In a real worker the error fails the run at once instead of retrying the task forever."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[MisfiringWorkflow],
        workflow_runner=workflow_runner(),
    ):
        with pytest.raises(WorkflowFailureError) as caught:
            await client.execute_workflow(
                MisfiringWorkflow.run, id=f"misfire-{uuid.uuid4().hex[:8]}", task_queue=task_queue
            )
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidTransition"
    assert cause.non_retryable
    assert cause.message == "no transition is declared for (Planning, HookDone)"
