"""No input can wedge a run: every malformed signal body, model reply and tool argument is a
refusal in the trace or an ``ERROR:`` observation, and the run then finishes normally.

Each class of bad input that once failed the workflow task (which Temporal retries forever,
so the run is lost) is sent here the way a user or a model would send it — the stock
``temporal`` CLI for signal bodies — and the run is then approved and completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.service import RPCError

from tests.support.harness import Harness
from treadle.workflows.agent.messages.catalogue import TOOLS, ToolArgumentsError, parse_arguments
from treadle.workflows.agent.messages.models import (
    MAX_HUMAN_TEXT_CHARS,
    AgentConfig,
    AgentInput,
    AgentResult,
    AgentStatus,
    RunStatus,
    ToolCall,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import approvals
from treadle.workflows.agent.parts.approvals import Refused
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.toolbox import Toolbox
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from the model"}}


async def _cli_signal(harness: Harness, handle: WorkflowHandle[Any, Any], *args: str) -> None:
    """Send a signal with the stock ``temporal`` CLI, as an operator would."""
    done = await harness.temporal("workflow", "signal", "--workflow-id", handle.id, *args)
    assert done.returncode == 0, done.stderr


async def _refusals(handle: WorkflowHandle[Any, Any], count: int) -> list[str]:
    """The trace's ``SignalRefused`` lines, once there are at least ``count`` of them."""
    for _ in range(200):
        trace = await handle.query(AgentWorkflow.trace)
        refused = [e.data for e in trace.entries if e.event == "SignalRefused"]
        if len(refused) >= count:
            return refused
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} refusals, trace has {refused}")


async def _approve_and_finish(harness: Harness, handle: WorkflowHandle[Any, Any]) -> None:
    """The run is still alive after the bad input: a valid approval completes it."""
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.state is State.WAITING_FOR_HUMAN
    await _cli_signal(harness, handle, "--name", "approve", "--input", "{}")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    assert (harness.workspace / "notes.md").read_text() == "from the model"


async def _waiting_run(harness: Harness) -> WorkflowHandle[Any, Any]:
    model = harness.script({"tool_calls": [WRITE]}, {"content": "written"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    return handle


async def test_a_signal_with_two_bodies_is_refused_and_the_run_goes_on(harness: Harness) -> None:
    """``--input`` given twice used to fail the workflow task forever; now it is refused."""
    handle = await _waiting_run(harness)
    await _cli_signal(harness, handle, "--name", "approve", "--input", "{}", "--input", "{}")
    [refused] = await _refusals(handle, 1)
    assert refused == "approve: approve takes one JSON body; got 2"
    await _approve_and_finish(harness, handle)


async def test_bodies_of_the_wrong_type_are_refused(harness: Harness) -> None:
    """A string, a list, a number or an object of the wrong shape is refused with a reason."""
    handle = await _waiting_run(harness)
    bodies = ['"approve it"', "[1, 2]", "42", '{"call_id": 7}', '{"reason": ""}']
    for body in bodies[:4]:
        await _cli_signal(harness, handle, "--name", "approve", "--input", body)
    await _cli_signal(harness, handle, "--name", "reject", "--input", bodies[4])
    refused = await _refusals(handle, 5)
    assert all(r.startswith(("approve: ", "reject: ")) for r in refused), refused
    assert "reason: String should have at least 1 character" in refused[4]
    await _approve_and_finish(harness, handle)


async def test_text_that_is_not_valid_unicode_never_wedges_a_run(harness: Harness) -> None:
    """A lone surrogate in a signal body costs nothing: the run still answers and approves."""
    handle = await _waiting_run(harness)
    # The plain JSON converter writes a lone surrogate as the escape "\ud800". The worker's
    # pydantic converter refuses to decode it, so the SDK drops the signal with a log line;
    # a converter that let it through would meet the run's own check (next test).
    plain = Client(
        harness.client.service_client,
        namespace=harness.client.namespace,
        data_converter=DataConverter.default,
    ).get_workflow_handle(handle.id)
    await plain.signal("reject", {"reason": "no \ud800 thanks"})
    await plain.signal("modify", {"arguments": {"path": "\udfff.md", "content": "x"}})
    await _approve_and_finish(harness, handle)


def test_a_body_with_a_lone_surrogate_is_refused_by_the_checks() -> None:
    """If such text reaches a handler, it is refused: it could never be written to history."""
    run = _waiting()
    for action, body in (
        ("reject", {"reason": "no \ud800 thanks"}),
        ("modify", {"arguments": {"path": "\udfff.md", "content": "x"}}),
    ):
        try:
            approvals.check_decision(run, action, body)
        except Refused as exc:
            assert str(exc)  # pydantic or the history check: either way a reason
        else:
            raise AssertionError(f"{action} with a lone surrogate was accepted")


async def test_an_oversized_reason_is_refused(harness: Harness, tmp_path: Path) -> None:
    """A 1 MB rejection reason would be re-sent to the model every step: it is refused."""
    handle = await _waiting_run(harness)
    body = tmp_path / "reason.json"
    body.write_text(json.dumps({"reason": "x" * 1_000_000}))
    await _cli_signal(harness, handle, "--name", "reject", "--input-file", str(body))
    [refused] = await _refusals(handle, 1)
    assert f"at most {MAX_HUMAN_TEXT_CHARS} characters" in refused
    await _approve_and_finish(harness, handle)


async def test_a_misspelt_signal_shows_in_the_trace_and_status(harness: Harness) -> None:
    """Temporal accepts any signal name; an unknown one is named in the trace and status."""
    handle = await _waiting_run(harness)
    await _cli_signal(harness, handle, "--name", "aprove", "--input", "{}")
    [refused] = await _refusals(handle, 1)
    assert (
        refused == "aprove: unknown signal (this run takes: approve, reject, modify, guide, wake)"
    )
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.last_event is not None and "aprove: unknown signal" in status.last_event
    await _approve_and_finish(harness, handle)


async def test_many_random_bodies_never_wedge_a_waiting_run(harness: Harness) -> None:
    """Whatever JSON arrives, in whatever number, the run answers queries and still approves."""
    bodies: list[tuple[str, list[Any]]] = []

    @settings(max_examples=40, database=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["approve", "reject", "modify", "guide"]), st.lists(JSON, max_size=3))
    def collect(name: str, args: list[Any]) -> None:
        bodies.append((name, args))

    collect()
    handle = await _waiting_run(harness)
    for name, args in bodies:
        try:
            await handle.signal(name, args=args)
        except RPCError as exc:
            # Some random bodies are valid decisions (``approve`` with ``null``): the run
            # may have finished already, which is the other acceptable outcome.
            assert "already completed" in exc.message, exc
            break
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.state in (State.WAITING_FOR_HUMAN, State.DONE), status
    if status.state is State.WAITING_FOR_HUMAN:
        await handle.signal("approve", {})
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE


async def test_tool_arguments_that_are_not_valid_unicode_are_an_error_observation(
    harness: Harness,
) -> None:
    """A model whose arguments hold a lone surrogate gets an ERROR, and the run answers."""
    bad = {"name": "write_file", "arguments": '{"path": "a\\ud800.md", "content": "x"}'}
    deep = {"name": "write_file", "arguments": "[" * 100_000 + "]" * 100_000}
    model = harness.script({"tool_calls": [bad]}, {"tool_calls": [deep]}, {"content": "gave up"})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    observations = [m["content"] for r in harness.requests(model)[1:] for m in r["messages"][-1:]]
    assert "arguments for write_file contain text that is not valid Unicode" in observations[0]
    assert "arguments for write_file are nested too deeply" in observations[1]


async def test_a_reply_with_more_calls_than_a_step_allows_runs_none(harness: Harness) -> None:
    """2,100 calls in one reply (over Temporal's 2,000 pending activities) are answered with
    errors, none runs, and the model's next, smaller reply is served."""
    calls = [{"name": "list_dir", "arguments": {"path": "."}, "id": f"c{i}"} for i in range(2100)]
    model = harness.script({"tool_calls": calls}, {"content": "asked for too much"})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    # The closed run's trace as its result carries it (what `trace` of a closed run reads): a
    # query would replay the 2,100 calls at once, which a worker loaded past its cores may not
    # finish within the SDK's 2 s deadlock detector.
    trace = result.trace
    assert trace is not None and trace.earlier == 0
    moves = [(e.state, e.event) for e in trace.entries if "->" in e.data]
    assert ("Planning", "TooManyToolCalls") in moves
    assert not any(e.event == "ToolObserved" for e in trace.entries)
    answers = [m for m in harness.requests(model)[1]["messages"] if m["role"] == "tool"]
    assert len(answers) == 2100
    assert "asked for 2100 tool calls and at most 64 run per step" in answers[0]["content"]


# ------------------------------------------------------------------------------------------
# Properties of the checks themselves (no server): refuse or accept, never anything else.
# ------------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["call_id", "reason", "arguments", "guidance", "halt", "path", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


ANY_CHARACTER = st.characters(exclude_categories=())
"""Lone surrogates included: JSON text from a model can spell them."""


def _waiting(state: State = State.WAITING_FOR_HUMAN) -> AgentRun:
    run = AgentRun.begin(
        AgentInput(
            task="t",
            model="openai:gpt-4o",
            workspace="/tmp/w",
            config=AgentConfig(require_approval=("write_file",)),
        ),
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    run.memory.enter(State.PLANNING)
    call = ToolCall(id="c1", name="write_file", arguments=json.dumps(WRITE["arguments"]))
    run.memory.current_tool_calls = (call,)
    run.memory.pending_approvals = approvals.approvals_needed(
        (Toolbox(run.input.config).check(call),), ("write_file",), 1, run.started_at
    )
    run.state = state
    return run


@settings(max_examples=300, database=None)
@given(st.sampled_from(["approve", "reject", "modify"]), st.lists(JSON, max_size=3))
def test_decision_checks_refuse_or_accept_any_json(action: str, bodies: list[Any]) -> None:
    """Any bodies: ``Refused`` or a decision the run can write to history — nothing else."""
    run = _waiting()
    try:
        checked = approvals.check_decision(
            run, action, approvals.signal_body(action, tuple(bodies))
        )
    except Refused as exc:
        assert str(exc)
        return
    checked.pending.model_copy(update=checked.update).model_dump_json()


@settings(max_examples=300, database=None)
@given(st.sampled_from(sorted(TOOLS)), st.text(alphabet=ANY_CHARACTER, max_size=60))
def test_tool_arguments_parse_or_become_an_error(tool: str, text: str) -> None:
    """Any argument text: schema-valid arguments that serialise, or ``ToolArgumentsError``."""
    try:
        args = parse_arguments(tool, text)
    except ToolArgumentsError as exc:
        assert str(exc).startswith(("arguments for", "unknown tool"))
        return
    args.model_dump_json()


@settings(max_examples=200, database=None)
@given(st.sampled_from(sorted(TOOLS)), st.dictionaries(st.text(max_size=8), JSON, max_size=4))
def test_tool_argument_objects_parse_or_become_an_error(tool: str, body: dict[str, Any]) -> None:
    """Any JSON object as arguments (as a human's ``modify`` sends): valid or an error."""
    with contextlib.suppress(ToolArgumentsError):
        parse_arguments(tool, json.dumps(body)).model_dump_json()
