"""Search attributes follow a run at a bounded cost: a state a user searches for (waiting, done,
failed) is sent at once with the exact step, a step's own moves (Planning <-> Acting or
PostToolsHook, AgentStep) at most once per ``STEP_ATTRIBUTES_EVERY`` of workflow time, and every
run of a chain hands over with its exact step in visibility. A run started as Treadle's clients
start runs (``start_attributes``) shows its first values from its start and upserts nothing
visibility shows already; one that answers from a step ends on its close status. A run started
without them (a client that sets none) upserts as runs always did, its start and its ``Done``."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import decode_typed_search_attributes

from tests.support.harness import Harness, keep_history
from tests.support.repos import committed_repo, git
from treadle.client.runs import FILTERS
from treadle.workflows.agent.messages import search_attributes as sa
from treadle.workflows.agent.messages.models import AgentResult, ApproveSignal, RunStatus
from treadle.workflows.agent.parts.publishing import STEP_ATTRIBUTES_EVERY
from treadle.workflows.agent.workflow import AgentWorkflow


def _writes(steps: int) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": f"n{i}.md", "content": "x"}}]}
        for i in range(steps)
    ]


def _sent(history: WorkflowHistory) -> list[tuple[str | None, int | None]]:
    """(AgentState, AgentStep) of every upsert that carries the run's own attributes (the
    SDK's ``TemporalChangeVersion`` upserts for patch markers are left out)."""
    sent = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            continue
        attrs = decode_typed_search_attributes(
            event.upsert_workflow_search_attributes_event_attributes.search_attributes
        )
        if attrs.get(sa.AGENT_STEP) is not None:
            sent.append((attrs.get(sa.AGENT_STATE), attrs.get(sa.AGENT_STEP)))
    return sent


def _paced_allowance(history: WorkflowHistory) -> int:
    """How many paced upserts the run's workflow time allows (one per ``STEP_ATTRIBUTES_EVERY``
    from its first event to its last; a busy machine's slow run is allowed more)."""
    first, last = history.events[0].event_time, history.events[-1].event_time
    span = last.ToDatetime() - first.ToDatetime()
    return int(span / STEP_ATTRIBUTES_EVERY)


async def test_a_fast_run_sends_no_upsert_and_is_found_done_by_its_close_status(
    harness: Harness,
) -> None:
    """Thirty fast steps of a run started with what it shows first: no upsert at all (its
    start's values are visibility's from the start; its steps wait for the pace; its answer is
    its close status), and the runs list's ``done`` filter finds it, ``error`` does not."""
    steps = 30
    model = harness.script(*_writes(steps), {"content": "done"})
    handle = await harness.start(model, max_steps=steps + 5)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    history = await handle.fetch_history()
    assert len(_sent(history)) <= _paced_allowance(history), _sent(history)
    assert history.events[0].workflow_execution_started_event_attributes.HasField(
        "search_attributes"
    )
    desc = await handle.describe()
    assert desc.typed_search_attributes.get(sa.AGENT_MODEL) == model
    assert desc.typed_search_attributes.get(sa.AGENT_STATE) == "Planning"
    mine = f"WorkflowId='{handle.id}'"
    assert await harness.found_by(f"{mine} AND {FILTERS['done']}") == [handle.id]
    assert await harness.found_by(f"{mine} AND {FILTERS['error']}", timeout=0) == []


async def test_a_run_started_bare_sends_its_steps_only_at_the_pace_and_ends_exact(
    harness: Harness,
) -> None:
    """Thirty fast steps of a run started without its attributes send their own moves at most
    once per 10 s of workflow time (on a machine that runs them within it: none), and the run
    ends with Done and its exact step."""
    steps = 30
    handle = await harness.start(
        harness.script(*_writes(steps), {"content": "done"}), max_steps=steps + 5, shown=False
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    history = await handle.fetch_history()
    sent = _sent(history)
    # The first (model, Planning, step 0) before the first model call, and Done at the end.
    assert sent[0] == ("Planning", 0), sent
    assert sent[-1] == ("Done", steps + 1), sent
    assert len(sent) - 2 <= _paced_allowance(history), sent
    desc = await handle.describe()
    assert desc.typed_search_attributes.get(sa.AGENT_STATE) == "Done"
    assert desc.typed_search_attributes.get(sa.AGENT_STEP) == result.steps == steps + 1


@pytest.mark.replay_corpus
async def test_a_slow_step_sends_its_step_once_the_pace_allows(harness: Harness) -> None:
    """A model call longer than the run's pace (``step_attributes_every_seconds``, 5 minutes
    at default; 2 s here): the next step's model call is preceded by one upsert of the step
    reached, with no state change."""
    slow = {**_writes(1)[0], "delay": 2.5}
    model = harness.script(slow, {"content": "done"})
    handle = await harness.start(model, step_attributes_every_seconds=2, shown=False)
    assert (await handle.result()).status is RunStatus.DONE
    assert _sent(await handle.fetch_history()) == [("Planning", 0), ("Planning", 1), ("Done", 2)]


@pytest.mark.replay_corpus
async def test_a_lean_start_sends_only_the_step_visibility_does_not_show(
    harness: Harness,
) -> None:
    """The same slow step in a run started with what it shows first: its start sends nothing,
    the step reached goes once the pace allows, and its answer sends no ``Done``."""
    slow = {**_writes(1)[0], "delay": 2.5}
    model = harness.script(slow, {"content": "done"})
    handle = await harness.start(model, step_attributes_every_seconds=2)
    assert (await handle.result()).status is RunStatus.DONE
    assert _sent(await handle.fetch_history()) == [(None, 1)]
    attrs = (await handle.describe()).typed_search_attributes
    assert (attrs.get(sa.AGENT_STATE), attrs.get(sa.AGENT_STEP)) == ("Planning", 1)


@pytest.mark.replay_corpus
async def test_a_lean_run_that_halts_still_sends_its_state(harness: Harness) -> None:
    """A run started lean still sends an end a user searches for that its close status does
    not tell: ``Halted`` (a completed run, found by the ``error`` filter, not ``done``)."""
    model = harness.script({"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]})
    (harness.workspace / "a").write_text("same")
    halted = await harness.start(model, max_steps=30, recovery="halt")
    assert (await halted.result()).status is RunStatus.HALTED
    attrs = (await halted.describe()).typed_search_attributes
    assert attrs.get(sa.AGENT_STATE) == "Halted"
    mine = f"WorkflowId='{halted.id}'"
    assert await harness.found_by(f"{mine} AND {FILTERS['error']}") == [halted.id]
    assert await harness.found_by(f"{mine} AND {FILTERS['done']}", timeout=0) == []


@pytest.mark.replay_corpus
async def test_a_waiting_run_is_found_by_its_state_at_once_with_its_exact_step(
    harness: Harness,
) -> None:
    """After fast steps that sent none of their own, a run waiting for approval is found by
    ``AgentState='WaitingForHuman'`` and its exact ``AgentStep``: the wait's upsert carries
    the steps held back."""
    lists = [{"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}] * 4
    model = harness.script(*lists, *_writes(1), {"content": "done"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    # A query is answered between workflow tasks: the wait's upsert is already in history.
    sent = _sent(await handle.fetch_history())
    assert sent[-1] == ("WaitingForHuman", 5), sent
    query = f"AgentState='WaitingForHuman' AND AgentStep=5 AND WorkflowId='{handle.id}'"
    assert await harness.found_by(query) == [handle.id]
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    assert (await handle.result()).status is RunStatus.DONE


@pytest.mark.replay_corpus
async def test_each_run_of_a_chain_hands_over_with_its_exact_step(harness: Harness) -> None:
    """A fast run that continues as new several times: each run's last values in visibility
    are the step it handed over at (its model calls and those of the runs before it)."""
    steps = 24
    handle = await harness.start(
        harness.script(*_writes(steps), {"content": "done"}),
        max_steps=steps + 5,
        continue_as_new_after_events=60,
        shown=False,
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    run_id: str | None = handle.first_execution_run_id or handle.run_id
    done_steps, runs = 0, 0
    while run_id:
        run = harness.client.get_workflow_handle(handle.id, run_id=run_id)
        history = await run.fetch_history()
        done_steps += sum(
            1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
        )
        attrs = (await run.describe()).typed_search_attributes
        last = history.events[-1]
        runs += 1
        if runs == 1:  # the harness records the chain's last run; the replay corpus gets both
            keep_history("test_each_run_of_a_chain_hands_over_with_its_exact_step-first", history)
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            assert (attrs.get(sa.AGENT_STATE), attrs.get(sa.AGENT_STEP)) == (
                "Planning",
                done_steps,
            )
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        else:
            assert (attrs.get(sa.AGENT_STATE), attrs.get(sa.AGENT_STEP)) == ("Done", done_steps)
            assert done_steps == result.steps
            run_id = None
    assert runs >= 3


@pytest.mark.replay_corpus
async def test_a_run_with_a_hook_sends_its_steps_only_at_the_pace(harness: Harness) -> None:
    """A run whose every step is committed by ``git_commit``: the hook is one of a step's own
    moves, so a fast run sends neither ``PostToolsHook`` nor the ``Planning`` after it, and
    still commits each step and ends with Done and its exact step."""
    committed_repo(harness.workspace)
    steps = 6
    handle = await harness.start(
        harness.script(*_writes(steps), {"content": "done"}),
        max_steps=steps + 5,
        hooks=["git_commit"],
        shown=False,
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    assert len(git(harness.workspace, "rev-list", "HEAD").split()) == steps + 1
    history = await handle.fetch_history()
    sent = _sent(history)
    assert sent[0] == ("Planning", 0), sent
    assert sent[-1] == ("Done", steps + 1), sent
    assert all(state != "PostToolsHook" for state, _ in sent), sent
    assert len(sent) - 2 <= _paced_allowance(history), sent
    # The Web UI's details and the trace still say where each step was.
    trace = await handle.query(AgentWorkflow.trace)
    assert sum(1 for e in trace.entries if e.event == "HookRun") == steps


@pytest.mark.replay_corpus
async def test_a_lean_chain_hands_over_exact_and_ends_on_its_close_status(
    harness: Harness,
) -> None:
    """A lean run that continues as new several times: each hand-over still sends the exact
    step (the lean start is carried to every run of the chain), and the last run's answer sends
    no ``Done``: the chain is found done by its close status."""
    steps = 24
    handle = await harness.start(
        harness.script(*_writes(steps), {"content": "done"}),
        max_steps=steps + 5,
        continue_as_new_after_events=60,
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result.error
    run_id: str | None = handle.first_execution_run_id or handle.run_id
    runs: list[WorkflowHistory] = []
    while run_id:
        history = await harness.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        runs.append(history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else None
        )
    assert len(runs) >= 3
    keep_history("test_a_lean_chain_hands_over_exact_and_ends_on_its_close_status-first", runs[0])
    steps_sent = []
    for history in runs[:-1]:  # each hand-over: one upsert, its step (Planning is shown)
        [(state, step)] = _sent(history)
        assert state is None
        steps_sent.append(step)
    assert steps_sent == sorted(steps_sent) and steps_sent[-1] < result.steps, steps_sent
    assert _sent(runs[-1]) == []
    assert await harness.found_by(f"WorkflowId='{handle.id}' AND {FILTERS['done']}") == [handle.id]
