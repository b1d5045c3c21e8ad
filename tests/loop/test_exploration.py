"""Exploration is progress in real runs: a research agent reads before it writes; re-reading is
not progress, so a model reading one file over and over is still stuck."""

from __future__ import annotations

from typing import Any

from tests.support.harness import Harness
from treadle.workflows.agent.messages.models import AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


def _read(path: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": path}}]}


async def test_fifty_distinct_reads_then_a_write_get_no_hint(harness: Harness) -> None:
    """Fifty different files read before the first write: no stuck, no hint, the run ends done."""
    for i in range(50):
        (harness.workspace / f"f{i}.py").write_text(f"x = {i}\n")
    write = {"name": "write_file", "arguments": {"path": "notes.md", "content": "read them"}}
    model = harness.script(
        *(_read(f"f{i}.py") for i in range(50)),
        {"tool_calls": [write]},
        {"content": "read fifty files, wrote notes"},
    )
    handle = await harness.start(model, max_steps=60)
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    assert (harness.workspace / "notes.md").read_text() == "read them"
    trace = await handle.query(AgentWorkflow.trace)
    assert not [e for e in trace.entries if e.event in ("Stuck", "Recovered")]
    assert not [m for body in harness.requests(model) for m in body["messages"] if "Hint" in str(m)]


async def test_the_same_file_read_eleven_times_is_stuck(harness: Harness) -> None:
    """One file read again and again: the first read explores, ten re-reads halt the run."""
    (harness.workspace / "main.go").write_text("package main\n")
    model = harness.script(_read("main.go"))
    handle = await harness.start(model, max_steps=60, recovery="halt")
    result: AgentResult = await handle.result()
    assert result.status is RunStatus.HALTED, result
    assert result.error == "halted: No progress in the last 10 actions: 10 read-only"
    assert result.steps == 11
