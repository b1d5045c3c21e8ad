"""Nexora in real runs: stuck loops are caught and recovered or halted; real work is not."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.support.harness import Harness, tool_messages
from tests.support.processes import run_cli
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, Decision, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

BAD_EDIT = {
    "name": "edit_file",
    "arguments": {"path": "main.go", "old_text": "func missing()", "new_text": "x"},
}


def _write(i: int) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": f"pkg/f{i}.go", "content": f"package p{i}"}}


@pytest.fixture
def main_go(harness: Harness) -> None:
    (harness.workspace / "main.go").write_text("package main\n")


@pytest.mark.replay_corpus
async def test_repeated_failing_edit_is_hinted_then_recovers(
    harness: Harness, main_go: None
) -> None:
    """Three identical failures -> the model is told what repeats; it changes course and ends."""
    model = harness.script(
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "main.go", "content": "x"}}]},
        {"content": "rewrote main.go instead"},
    )
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    hint = harness.requests(model)[3]["messages"][-1]
    assert hint["role"] == "user"
    assert "Same error on 'main.go' repeated 3 times" in hint["content"]
    assert "Hint 1 of 2" in hint["content"]
    trace = await handle.query(AgentWorkflow.trace)
    moves = [(e.state, e.event) for e in trace.entries if "->" in e.data]
    assert ("Observing", "Stuck") in moves
    assert ("Recovering", "Recovered") in moves


@pytest.mark.replay_corpus
async def test_a_model_that_keeps_repeating_is_halted_after_its_hints(
    harness: Harness, main_go: None
) -> None:
    """hint -> hint -> halt: the default escalation ends the run halted, naming the reason."""
    model = harness.script({"tool_calls": [BAD_EDIT]})
    handle = await harness.start(model, max_steps=50)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED
    assert result.error is not None
    assert result.error.startswith("halted: Same error on 'main.go' repeated 3 times")
    assert "still stuck after 2 hint(s)" in result.error
    assert result.steps == 9  # 3 failures per detection, 2 hints, then halt
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.state == "Halted"
    desc = await handle.describe()
    assert desc.typed_search_attributes.get(search_attributes.AGENT_STATE) == "Halted"


async def test_halt_strategy_stops_at_the_first_detection(harness: Harness, main_go: None) -> None:
    """recovery=halt ends the run on the first stuck detection."""
    model = harness.script({"tool_calls": [BAD_EDIT]})
    handle = await harness.start(model, recovery="halt")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED
    assert result.steps == 3


@pytest.mark.replay_corpus
async def test_ask_human_waits_for_guidance_then_continues(harness: Harness, main_go: None) -> None:
    """recovery=ask_human parks the run in WaitingForHuman; guidance reaches the model."""
    model = harness.script(
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [BAD_EDIT]},
        {"content": "ok, following your advice"},
    )
    handle = await harness.start(model, recovery="ask_human")
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    assert status.stuck is not None
    assert "Same error on 'main.go'" in status.stuck
    assert status.pending_approvals == ()
    refused = await run_cli(
        "--address",
        harness.client.service_client.config.target_host,
        "approve",
        handle.id,
    )
    assert refused.returncode == 2  # nothing to approve: it waits for guidance
    await handle.execute_update(
        AgentWorkflow.decide, Decision(action="guide", guidance="main.go has no such function")
    )
    result: AgentResult = await handle.result()
    assert result.answer == "ok, following your advice"
    last = harness.requests(model)[3]["messages"][-1]
    assert last == {
        "role": "user",
        "content": "Guidance from a human: main.go has no such function",
    }


async def test_ask_human_can_halt_through_the_cli(harness: Harness, main_go: None) -> None:
    """`starter.py guide ID --halt` stops a stuck run with the human's reason."""
    model = harness.script({"tool_calls": [BAD_EDIT]})
    handle = await harness.start(model, recovery="ask_human")
    await harness.wait_for_state(handle, "WaitingForHuman")
    done = await run_cli(
        "--address", harness.client.service_client.config.target_host,
        "guide", handle.id, "--halt", "--reason", "wrong repository",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED
    assert result.error == "halted by a human: wrong repository"


@pytest.mark.replay_corpus
async def test_a_long_productive_run_is_not_interrupted(harness: Harness) -> None:
    """40 steps writing 40 distinct files, with phases and tests: never stuck, all recorded."""
    turns: list[dict[str, Any]] = []
    for i in range(40):
        calls = [_write(i)]
        if i and i % 10 == 0:
            calls.append(
                {"name": "start_phase", "arguments": {"description": f"part {i // 10 + 1}"}}
            )
        turns.append({"tool_calls": calls})
    turns.append({"content": "all 40 files written"})
    model = harness.script(*turns)
    handle = await harness.start(model, max_steps=60, phases=["part 1"])
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    trace = await handle.query(AgentWorkflow.trace)
    assert [e for e in trace.entries if e.event == "Stuck"] == []
    completed = [e.data for e in trace.entries if e.event == "PhaseCompleted"]
    assert len(completed) == 3
    # The write in the step that starts the next phase still belongs to the phase it ends.
    assert completed[0].startswith("phase 1: 11 files")
    assert completed[1].startswith("phase 2: 10 files")
    progress = await handle.query(AgentWorkflow.progress)
    assert progress.phases_completed == 3
    assert progress.current_phase == 4
    assert progress.files_modified == 40
    assert progress.tool_calls == 40
    assert len(list((harness.workspace / "pkg").iterdir())) == 40


async def test_a_phase_start_resets_the_error_count(harness: Harness, main_go: None) -> None:
    """Two identical errors, a new phase, one more: no longer three in a row."""
    model = harness.script(
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [{"name": "start_phase", "arguments": {"description": "second try"}}]},
        {"tool_calls": [BAD_EDIT]},
        {"content": "done"},
    )
    handle = await harness.start(model, phases=["first try", "second try"])
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    trace = await handle.query(AgentWorkflow.trace)
    assert [e for e in trace.entries if e.event == "Stuck"] == []
    (completed,) = [e.data for e in trace.entries if e.event == "PhaseCompleted"]
    assert "1 blockers" in completed
    status: AgentStatus = await handle.query(AgentWorkflow.state)
    assert status.progress is not None
    assert (status.progress.phases_completed, status.progress.total_phases) == (1, 2)


async def test_stuck_and_progress_are_logged_with_stable_names(
    harness: Harness, main_go: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Operators see agent.stuck (and the transitions) in the worker's log without code."""
    caplog.set_level(logging.INFO)
    model = harness.script({"tool_calls": [BAD_EDIT]})
    handle = await harness.start(model, recovery="halt")
    await handle.result()
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("agent.stuck") for m in messages)
    assert any(m.startswith("agent.halted") for m in messages)
    assert any(m.startswith("agent.transition") for m in messages)


@pytest.mark.replay_corpus
async def test_reflection_shortens_what_the_next_request_carries(harness: Harness) -> None:
    """Every 3 steps older turns become one summary; the next request is shorter and keeps
    the task, the recent turns and the unresolved error."""
    summarizer = harness.script({"content": "Wrote f0-f1; main.go edit failed."})
    model = harness.script(
        {"tool_calls": [_write(0)]},
        {"tool_calls": [_write(1)]},
        {"tool_calls": [BAD_EDIT]},
        {"content": "done"},
    )
    handle = await harness.start(
        model, reflect_every_n_steps=3, reflection_keep_recent=1, reflection_model=summarizer
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    before, after = harness.requests(model)[2], harness.requests(model)[3]
    assert len(after["messages"]) < len(before["messages"]) + 2
    summary = after["messages"][2]
    assert summary["role"] == "user"
    assert summary["content"].startswith("Summary of steps 1-2")
    assert "Wrote f0-f1" in summary["content"]
    assert after["messages"][1]["content"] == before["messages"][1]["content"]  # the task
    assert tool_messages(after)[-1]["content"].startswith("ERROR:")  # recent turn verbatim
    events = [e.event for e in (await handle.query(AgentWorkflow.trace)).entries]
    assert "HistoryCompressed" in events
    (summary_request,) = harness.requests(summarizer)
    assert "write_file(pkg/f0.go)" in summary_request["messages"][1]["content"]


@pytest.mark.replay_corpus
async def test_reflection_falls_back_to_compaction_when_the_summary_call_fails(
    harness: Harness, main_go: None
) -> None:
    """A failing summary call is replaced by a deterministic compaction, said in the trace;
    unresolved errors survive it."""
    broken = harness.script({"content": "x", "errors": [{"status": 401}] * 5})
    model = harness.script(
        {"tool_calls": [BAD_EDIT]},
        {"tool_calls": [_write(1)]},
        {"tool_calls": [_write(2)]},
        {"content": "done"},
    )
    handle = await harness.start(
        model, reflect_every_n_steps=3, reflection_keep_recent=1, reflection_model=broken
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    trace = await handle.query(AgentWorkflow.trace)
    fallback = [e.data for e in trace.entries if e.event == "ReflectionFallback"]
    assert len(fallback) == 1
    assert "HTTP 401" in fallback[0]
    summary = harness.requests(model)[3]["messages"][2]["content"]
    assert "compressed" in summary
    assert "Unresolved errors:\n- edit_file(main.go): ERROR: old_text not found" in summary


SAME_WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "same words\n"}}


@pytest.mark.replay_corpus
async def test_rewriting_one_file_with_identical_content_is_no_progress(harness: Harness) -> None:
    """The write tool's content hash reaches the tracker: identical rewrites halt the run."""
    model = harness.script({"tool_calls": [SAME_WRITE]})
    handle = await harness.start(model, max_steps=60, recovery="halt")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED, result
    assert result.error is not None
    assert result.error.startswith("halted: No progress in the last 10 actions"), result.error
    # The first write is a change; ten more identical ones fill the window.
    assert result.steps == 11
    assert (harness.workspace / "notes.md").read_text() == "same words\n"


async def test_identical_rewrites_spelled_differently_are_still_the_same_file(
    harness: Harness,
) -> None:
    """``./notes.md`` and ``notes.md`` resolve to one file, so the hash still matches."""
    dotted = {"name": "write_file", "arguments": {"path": "./notes.md", "content": "same\n"}}
    model = harness.script({"tool_calls": [dotted]})
    handle = await harness.start(model, max_steps=60, recovery="ask_human")
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    assert status.stuck is not None and status.stuck.startswith("No progress"), status
    await handle.execute_update(
        AgentWorkflow.decide, Decision(action="guide", halt=True, reason="it loops")
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED
    assert result.steps <= 12


async def test_a_command_printing_the_same_output_again_is_no_progress(harness: Harness) -> None:
    """A repeated command whose output never changes is caught like an identical rewrite."""
    (harness.workspace / "a.txt").write_text("hello\n")
    same = {"name": "run_command", "arguments": {"command": "cat a.txt"}}
    model = harness.script({"tool_calls": [same]})
    handle = await harness.start(model, max_steps=60, recovery="halt", allow_run_command=True)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED, result
    assert result.error is not None and "No progress in the last 10 actions" in result.error


async def test_rewrites_with_new_content_each_time_are_progress(harness: Harness) -> None:
    """The counterpart: the same file with different content every time is real work."""
    turns = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "n.md", "content": f"v{i}"}}]}
        for i in range(25)
    ]
    model = harness.script(*turns, {"content": "wrote 25 versions"})
    handle = await harness.start(model, max_steps=60, recovery="halt")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    assert result.steps == 26
