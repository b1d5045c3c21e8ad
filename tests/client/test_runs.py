"""A run from Python through ``AgentClient``: started, seen waiting for approval, approved, read
(status, trace, export, result), watched to its end; its client query answered, its wait woken;
what it refuses, and what is not there, as typed errors."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable

import pytest

from tests.support.harness import Harness, scripted_worker, tool_messages
from treadle.activities.model.activity import http_client
from treadle.client import (
    AgentClient,
    InvalidRequest,
    NoWorkerAnswered,
    Refused,
    RunExists,
    RunNotFound,
    ThreadUnavailable,
)
from treadle.stream import StreamItem
from treadle.workflows.agent.messages.config import AgentConfig, AgentInput
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import AgentStatus, RunStatus
from treadle.workflows.agent.messages.state_machine import State

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from python"}}


def task(
    harness: Harness, model: str, text: str = "Write the notes.", **config: object
) -> AgentInput:
    return AgentInput(
        task=text,
        model=model,
        workspace=str(harness.workspace),
        config=AgentConfig.model_validate(config),
    )


async def until_state(agents: AgentClient, run_id: str, state: State) -> AgentStatus:
    """The run's status once it is in ``state`` (asked through the client)."""
    for _ in range(600):
        status = await agents.status(run_id)
        if status.state is state:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {state.value}: {status.state.value}")


async def test_a_run_waits_for_approval_and_is_approved(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """A write that needs approval parks the run in WaitingForHuman with the call in its status;
    approve runs it, and the result, trace and export say so."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Notes written."})
    started = await agents.start(task(harness, model, require_approval=["write_file"]))
    track(started.id)
    assert started.id.startswith("agent-") and started.task_queue == harness.task_queue
    assert not started.thread

    status = await until_state(agents, started.id, State.WAITING_FOR_HUMAN)
    (pending,) = status.pending_approvals
    assert (pending.tool, pending.arguments) == ("write_file", WRITE["arguments"])
    assert not (harness.workspace / "notes.md").exists()

    decided = await agents.approve(started.id, decided_by="alice@example.com")
    assert (decided.done, decided.call_id, decided.tool) == (
        "approved",
        pending.call_id,
        "write_file",
    )

    result = await agents.result(started.id)
    assert (result.status, result.answer) == (RunStatus.DONE, "Notes written.")
    assert (harness.workspace / "notes.md").read_text() == "from python"
    trace = await agents.trace(started.id)
    events = [e.event for e in trace.entries]
    assert "HumanApproved" in events and events[-1] == "LlmFinalAnswer"
    assert any("by alice@example.com" in e.data for e in trace.entries)
    exported = await agents.export(started.id)
    messages = exported.conversation.messages
    assert messages[-1].content == "Notes written."
    assert any(call.name == "write_file" for m in messages for call in m.tool_calls)
    final = await agents.status(started.id)
    assert (final.state, final.final_answer) == (State.DONE, "Notes written.")


async def test_watch_follows_a_run_to_its_end(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """Watching from the start yields the run's events in order, its tool call and its answer,
    and ends by itself once the run is over."""
    model = harness.script(
        {"content": "Looking first.", "tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"content": "The workspace is empty."},
    )
    started = await agents.start(task(harness, model, "Look around."))
    track(started.id)
    items: list[StreamItem] = []
    async with asyncio.timeout(120):
        async for item in agents.watch(started.id, from_offset=0):
            items.append(item)
    events = [i.value for i in items if isinstance(i.value, AgentEvent)]
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] == "ended"
    assert kinds.index("tool_started") < kinds.index("tool_finished") < kinds.index("answer")
    assert next(e for e in events if e.kind == "answer").text == "The workspace is empty."
    assert [i.offset for i in items] == sorted(i.offset for i in items)
    # What the stream keeps can be read in one go too.
    kept = await agents.read_stream(started.id)
    assert [i.offset for i in kept][-1] == items[-1].offset


async def test_a_client_query_is_answered_by_its_id(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """A question the run asks its client waits in WaitingForClient; answer_query answers it by
    its id, and the model reads the answer."""
    ask = {"name": "ask_client", "arguments": {"kind": "question", "what": "Which branch?"}}
    model = harness.script({"tool_calls": [ask]}, {"content": "Using main."})
    started = await agents.start(task(harness, model, "Ask which branch."))
    track(started.id)
    status = await until_state(agents, started.id, State.WAITING_FOR_CLIENT)
    assert status.client_query is not None
    answered = await agents.answer_query(
        started.id, status.client_query.id, "main, always", decided_by="carol"
    )
    assert (answered.kind, answered.what) == ("question", "Which branch?")
    assert (await agents.result(started.id)).answer == "Using main."
    assert "main, always" in tool_messages(harness.requests(model)[-1])[0]["content"]


async def test_wake_ends_a_wait_early(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """A run parked by the wait tool is woken now; the model reads why."""
    wait = {"name": "wait", "arguments": {"seconds": 3600, "reason": "CI"}}
    model = harness.script({"tool_calls": [wait]}, {"content": "done"})
    started = await agents.start(task(harness, model, "Wait for the CI."))
    track(started.id)
    status = await until_state(agents, started.id, State.WAITING)
    woken = await agents.wake(started.id, "the build finished")
    assert woken.would_have_woken_at == status.wakes_at
    assert (await agents.result(started.id)).status is RunStatus.DONE
    observed = tool_messages(harness.requests(model)[1])[0]["content"]
    assert observed.endswith("woke early: woken by a wake signal: the build finished")


async def test_refusals_and_absences_are_typed_errors(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """The run's own refusal is ``Refused`` with its validator's reason, and nothing reaches its
    history; what cannot be sent is ``InvalidRequest`` before anything is; a missing run is
    ``RunNotFound``, a taken id ``RunExists``, a message to a single-task run
    ``ThreadUnavailable``, a wake of a run that does not wait ``Refused``."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    started = await agents.start(task(harness, model, require_approval=["write_file"]))
    track(started.id)
    await until_state(agents, started.id, State.WAITING_FOR_HUMAN)
    events_before = len(
        (await harness.client.get_workflow_handle(started.id).fetch_history()).events
    )

    with pytest.raises(Refused) as refused:
        await agents.approve(started.id, call_id="call_nope")
    assert "call_nope" in refused.value.reason
    assert str(refused.value) == f"run {started.id!r} refused to approve: {refused.value.reason}"
    with pytest.raises(InvalidRequest, match="needs a reason"):
        await agents.reject(started.id, "")
    with pytest.raises(InvalidRequest, match="do not match its schema"):
        await agents.modify(started.id, {"path": 1}, tool="write_file")
    with pytest.raises(ThreadUnavailable, match="not a thread"):
        await agents.send(started.id, "hello?")
    with pytest.raises(Refused, match=r"is not waiting \(it is WaitingForHuman\)"):
        await agents.wake(started.id)
    with pytest.raises(RunExists, match="already exists"):
        await agents.start(task(harness, model), id=started.id)
    history = await harness.client.get_workflow_handle(started.id).fetch_history()
    assert len(history.events) == events_before  # refused updates leave nothing behind

    missing = f"no-such-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RunNotFound) as not_found:
        await agents.status(missing)
    assert str(not_found.value) == f"no run with id {missing!r} in namespace default"
    assert not_found.value.run_id == missing
    with pytest.raises(RunNotFound):
        await agents.approve(missing)

    await agents.reject(started.id, "not today")
    assert (await agents.result(started.id)).status is RunStatus.DONE


async def test_a_run_whose_worker_is_gone_is_no_worker_answered(
    harness: Harness, agents: AgentClient
) -> None:
    """A run parked on an approval whose only worker has stopped: its status query is
    ``NoWorkerAnswered`` (one line saying so), not a hang."""
    queue = f"gone-{uuid.uuid4().hex[:8]}"
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    async with http_client() as http, scripted_worker(harness.client, queue, harness.models, http):
        started = await agents.start(
            task(harness, model, require_approval=["write_file"]), task_queue=queue
        )
        await until_state(agents, started.id, State.WAITING_FOR_HUMAN)
    try:
        with pytest.raises(NoWorkerAnswered, match="is a worker running"):
            await agents.status(started.id)
    finally:
        with contextlib.suppress(Exception):
            await harness.client.get_workflow_handle(started.id).terminate("test over")


async def test_questions_asked_together_of_a_run_no_worker_takes_are_each_no_worker_answered(
    harness: Harness, agents: AgentClient
) -> None:
    """Three status queries at once of a run no worker has ever taken (as a page asks its
    status and its stream together): the server holds only some of them for a worker and
    refuses the others ("query buffer is full"); every one is ``NoWorkerAnswered``, none a
    refusal by Temporal."""
    started = await agents.start(
        task(harness, "openai:none"), task_queue=f"nobody-{uuid.uuid4().hex[:8]}"
    )
    try:
        asked = await asyncio.gather(
            *(agents.status(started.id) for _ in range(3)), return_exceptions=True
        )
    finally:
        await harness.client.get_workflow_handle(started.id).terminate("test over")
    assert all(isinstance(a, NoWorkerAnswered) for a in asked), asked
    assert all("is a worker running?" in str(a) for a in asked), asked


async def test_a_parent_whose_sub_agent_waits_for_a_person_is_listed_as_waiting(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """The "waiting for a person" filter lists a sub-agent waiting for an approval and its
    parent too (Acting in visibility while it delegates), whose row names the sub-agent."""
    child_model = harness.script({"tool_calls": [WRITE]}, {"content": "child done"})
    delegate = {"name": "delegate", "arguments": {"task": "write", "model": child_model}}
    parent_model = harness.script({"tool_calls": [delegate]}, {"content": "parent done"})
    started = await agents.start(
        task(
            harness,
            parent_model,
            require_approval=["write_file"],
            subagents={"models": [child_model]},
        )
    )
    track(started.id)
    for _ in range(300):  # the child starts, then visibility catches up (eventually consistent)
        rows = {r.id: r for r in await agents.list_runs("WaitingForHuman")}
        if started.id in rows and any(r.id != started.id for r in rows.values()):
            break
        await asyncio.sleep(0.1)
    parent = rows[started.id]
    [child_id] = [
        c.workflow_id for c in (await agents.status(started.id)).children if c.status == "running"
    ]
    assert rows[child_id].state == "WaitingForHuman"
    assert parent.state == "Acting"
    assert parent.waiting_on == child_id
    assert parent.waiting_for == (
        f"its sub-agent {child_id}, which waits for a person: approve a call or guide the run"
    )
    await agents.approve(child_id)
    assert (await agents.result(started.id)).answer == "parent done"


async def test_list_runs_finds_a_waiting_run_by_what_it_waits_for(
    harness: Harness, agents: AgentClient, track: Callable[[str], str]
) -> None:
    """list_runs keeps to runs waiting for a person; the row says who and what it is about."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    started = await agents.start(task(harness, model, require_approval=["write_file"]))
    track(started.id)
    await until_state(agents, started.id, State.WAITING_FOR_HUMAN)
    for _ in range(200):  # visibility is eventually consistent
        rows = await agents.list_runs("WaitingForHuman")
        row = next((r for r in rows if r.id == started.id), None)
        if row is not None:
            break
        await asyncio.sleep(0.1)
    assert row is not None
    assert (row.state, row.execution, row.answered) == ("WaitingForHuman", "running", True)
    assert row.waiting_for == "a person: approve a call or guide the run"
    assert row.task == "Write the notes."
    with pytest.raises(InvalidRequest, match="no filter"):
        await agents.list_runs("Sleeping")
    await agents.approve(started.id)
    await agents.result(started.id)
