"""Replies with nothing in them are a stuck reason: hinted, then halted, not left to the step
limit."""

from __future__ import annotations

from tests.support.harness import Harness
from tests.support.threads import start_thread
from treadle.workflows.agent.messages.models import AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

EMPTY = {"content": ""}
REASON = "The model replied with nothing (no text, no tool call) 3 times in a row"


async def test_repeated_empty_replies_are_hinted_then_halted(harness: Harness) -> None:
    """Three empty replies in a row -> a hint naming them; after two hints the run halts."""
    model = harness.script(EMPTY)
    handle = await harness.start(model, max_steps=50)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED, result
    assert result.error == f"halted: {REASON} (still stuck after 2 hint(s))"
    assert result.steps == 9  # three empty replies before each hint, and three after the last
    hints = [
        m["content"]
        for m in harness.requests(model)[-1]["messages"]
        if m["role"] == "user" and "You appear to be stuck" in (m["content"] or "")
    ]
    assert len(hints) == 2 and REASON in hints[0], hints
    trace = await handle.query(AgentWorkflow.trace)
    moves = [(e.state, e.event) for e in trace.entries if "->" in e.data]
    assert ("Planning", "Stuck") in moves
    assert ("Recovering", "Halt") in moves


async def test_an_empty_reply_followed_by_an_answer_is_not_stuck(harness: Harness) -> None:
    """Two empty replies are sent back as before; the third reply answers and the run is done."""
    model = harness.script(EMPTY, EMPTY, {"content": "the answer"})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    assert result.answer == "the answer"
    trace = await handle.query(AgentWorkflow.trace)
    assert not [e for e in trace.entries if e.event == "Stuck"]


async def test_a_tool_call_ends_a_run_of_empty_replies(harness: Harness) -> None:
    """Empty, empty, a tool call, empty, empty, an answer: never three empty in a row."""
    listing = {"tool_calls": [{"name": "list_dir", "arguments": {}}]}
    model = harness.script(EMPTY, EMPTY, listing, EMPTY, EMPTY, {"content": "done"})
    handle = await harness.start(model)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result


async def test_max_empty_replies_is_configurable(harness: Harness) -> None:
    """``progress.max_empty_replies`` sets how many in a row mean stuck."""
    model = harness.script(EMPTY)
    handle = await harness.start(
        model, max_steps=50, recovery="halt", progress={"max_empty_replies": 5}
    )
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED, result
    assert result.steps == 5
    assert result.error is not None and "5 times in a row" in result.error


async def test_a_thread_answering_nothing_is_halted_not_left_to_its_step_limit(
    harness: Harness,
) -> None:
    """The thread of the report: empty replies turn after turn end it halted, with the reason."""
    model = harness.script(EMPTY)
    handle = await start_thread(harness, model, task="Hello?", max_steps=30)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED, result
    assert result.error is not None and REASON in result.error
    assert result.steps < 30
