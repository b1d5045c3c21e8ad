"""Who decided: every approval, rejection, modification, guidance and client answer records who
sent it (``--as NAME``, by default USER@HOST; ``decided_by`` in the stock CLI's JSON) in the
trace, ``status`` and the stream; a run that names its ``approvers`` refuses anyone else."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tests.support.harness import Harness
from tests.support.processes import ROOT, clean_env, run_cli
from tests.support.stream import wait_for_event
from treadle.cli import identity
from treadle.workflows.agent.messages.models import AgentStatus, Decision, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "from the model"}}
ASK = {"name": "ask_client", "arguments": {"kind": "question", "what": "Which branch?"}}


async def starter(harness: Harness, *arguments: str) -> str:
    done = await run_cli("--address", harness.client.service_client.config.target_host, *arguments)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def waiting_call(harness: Harness, **config: Any) -> tuple[WorkflowHandle[Any, Any], str]:
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"], **config)
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    return handle, status.pending_approvals[0].call_id


async def received(harness: Harness, handle: WorkflowHandle[Any, Any]) -> str:
    [entry] = await harness.trace_events(handle, "SignalReceived", 1)
    return entry.data


async def test_starter_as_names_who_approved_in_trace_status_and_stream(harness: Harness) -> None:
    """``starter.py approve --as alice@team``: the trace line, ``status`` (its ``decided:``
    line) and the stream's ``decided`` event all name alice@team."""
    handle, call_id = await waiting_call(harness)
    await starter(harness, "approve", handle.id, "--as", "alice@team")
    assert (await handle.result()).status is RunStatus.DONE
    assert await received(harness, handle) == f"approve {call_id} by alice@team"
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.last_decision == f"approve {call_id} by alice@team"
    shown = await starter(harness, "status", handle.id)
    assert f"decided:  approve {call_id} by alice@team" in shown
    event = await wait_for_event(handle, lambda e: e.kind == "decided")
    assert event.decided_by == "alice@team"
    assert event.text == f"approve {call_id} by alice@team"


async def test_starter_without_as_names_the_os_user_and_host(harness: Harness) -> None:
    """No ``--as``: the rejection is recorded as the OS user at this host."""
    handle, call_id = await waiting_call(harness)
    await starter(harness, "reject", handle.id, "--reason", "not now")
    await handle.result()
    data = await received(harness, handle)
    assert data.startswith(f"reject {call_id} by "), data
    assert data.endswith(f"@{socket.gethostname()}"), data


async def test_the_stock_cli_json_may_say_who_decided(harness: Harness) -> None:
    """``temporal workflow signal --input '{"decided_by": "bob"}'`` is recorded as bob; a body
    without it (the old shape) is still taken, naming no one."""
    handle, call_id = await waiting_call(harness)
    body = json.dumps({"call_id": call_id, "arguments": WRITE["arguments"], "decided_by": "bob"})
    done = await harness.temporal(
        "workflow", "signal", "--workflow-id", handle.id, "--name", "modify", "--input", body
    )
    assert done.returncode == 0, done.stderr
    await handle.result()
    assert await received(harness, handle) == f"modify {call_id} by bob"

    other, other_call = await waiting_call(harness)
    done = await harness.temporal(
        "workflow", "signal", "--workflow-id", other.id, "--name", "approve", "--input", "{}"
    )
    assert done.returncode == 0, done.stderr
    await other.result()
    assert await received(harness, other) == f"approve {other_call}"


async def test_a_run_with_approvers_refuses_anyone_else(harness: Harness) -> None:
    """``approvers: ["alice"]``: a signal from mallory, or naming no one, and a guidance from
    mallory are refusals in the trace and status; the ``decide`` update from mallory is refused
    at once and leaves no history; alice's approval runs the call."""
    handle, call_id = await waiting_call(harness, approvers=["alice"])
    await handle.signal("approve", {"decided_by": "mallory"})
    await handle.signal("approve", {})
    await handle.signal("guide", {"guidance": "go on", "decided_by": "mallory"})
    refused = [e.data for e in await harness.trace_events(handle, "SignalRefused", 3)]
    assert refused == [
        "approve: 'mallory' is not one of this run's approvers (alice)",
        "approve: this run takes decisions from its approvers only (alice); say who decides "
        "with decided_by (treadle approve --as NAME)",
        "guide: 'mallory' is not one of this run's approvers (alice)",
    ]
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.state == "WaitingForHuman"
    assert status.last_event == f"SignalRefused: {refused[-1]}"

    before = len((await handle.fetch_history()).events)
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(
            AgentWorkflow.decide, Decision(action="approve", decided_by="mallory")
        )
    assert isinstance(caught.value.cause, ApplicationError)
    assert caught.value.cause.message == "'mallory' is not one of this run's approvers (alice)"
    assert len((await handle.fetch_history()).events) == before
    refused_cli = await run_cli(
        "--address", harness.client.service_client.config.target_host,
        "approve", handle.id, "--as", "mallory",
    )  # fmt: skip
    assert refused_cli.returncode == 2
    assert "'mallory' is not one of this run's approvers (alice)" in refused_cli.stderr

    await starter(harness, "approve", handle.id, "--as", "alice")
    assert (await handle.result()).status is RunStatus.DONE
    assert await received(harness, handle) == f"approve {call_id} by alice"
    assert (harness.workspace / "notes.md").exists()


async def test_a_client_answer_says_who_answered(harness: Harness) -> None:
    """``starter.py answer --as carol``: the trace and ``status`` say carol answered."""
    model = harness.script({"tool_calls": [ASK]}, {"content": "main it is"})
    handle = await harness.start(model)
    status: AgentStatus = await harness.wait_for_state(handle, "WaitingForClient")
    assert status.client_query is not None
    query_id = status.client_query.id
    await starter(harness, "answer", handle.id, query_id, "main", "--as", "carol")
    assert (await handle.result()).answer == "main it is"
    [entry] = await harness.trace_events(handle, "ClientAnswerReceived", 1)
    assert entry.data == f"{query_id}: answered by carol"
    status = await handle.query(AgentWorkflow.state)
    assert status.last_decision == f"{query_id}: answered by carol"


async def _interactive(harness: Harness, *arguments: str, stdin: str) -> str:
    """``starter.py ARGUMENTS`` with ``stdin`` typed at its prompts; its stderr (the prompts)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), *arguments,
        cwd=ROOT, env=clean_env(), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(stdin.encode()), 120)
    assert process.returncode == 0, err.decode()
    return err.decode()


async def test_a_decision_typed_at_watch_interactive_names_who_typed_it(harness: Harness) -> None:
    """``watch --interactive``: the approval typed at its prompt is recorded as the OS user at
    this host, as ``approve`` without ``--as`` records it."""
    handle, call_id = await waiting_call(harness)
    await _interactive(harness, "watch", handle.id, "--interactive", stdin="a\n")
    assert (await handle.result()).status is RunStatus.DONE
    assert await received(harness, handle) == f"approve {call_id} by {identity.default_name()}"


async def test_run_wait_interactive_as_names_the_decider(harness: Harness) -> None:
    """``run --wait --interactive --as carol``: the rejection typed there is carol's."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    workflow_id = f"who-{uuid.uuid4().hex[:10]}"
    harness.handles.append(harness.client.get_workflow_handle(workflow_id))
    await _interactive(
        harness, "run", "Write", "--model", model, "--workspace", str(harness.workspace),
        "--require-approval", "write_file", "--id", workflow_id, "--wait", "--interactive",
        "--as", "carol", stdin="r\nnot today\n",
    )  # fmt: skip
    handle = harness.client.get_workflow_handle(workflow_id)
    [entry] = await harness.trace_events(handle, "SignalReceived", 1)
    assert entry.data.startswith("reject ") and entry.data.endswith(" by carol")
