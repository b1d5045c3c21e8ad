"""Histories of real runs, recorded from the first release's code (0.1.0) on, still replay
through today's workflow code.

A change that would break replay of runs already in flight (reordered commands, a new activity
in the middle of the loop, different search-attribute upserts) fails here, before it ships. The
corpus is the runs of the tests marked ``replay_corpus``; docs/development.md has the command
that records it again, and when.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.harness import HISTORIES, recorded_history, replayer

RECORDED = sorted(HISTORIES.glob("*.json"))


def test_recorded_histories_are_present() -> None:
    """The replay corpus exists and covers approvals, parallel tools, errors, a crash, stuck
    recovery, phases, reflection, confidence, budgets, threads and continue-as-new, families
    of sub-agents (parents and their children: parallel, cancelled, failed, out of budget or
    cost, reporting while they run, a grandchild's approval decided through the top run),
    client queries, typed answers, fallback models, hooks, MCP tools (a server listed again),
    workspaces that follow their runs, store outages, and the job, scheduled-agent and monitor
    workflows."""
    names = {p.stem for p in RECORDED}
    assert len(names) >= 20
    needed_all = (
        "approve", "parallel", "max_steps", "killed", "reject", "modify", "not_json",
        "halted", "guidance", "productive", "reflection", "confidence", "budget", "cancelling",
        "thread", "continued-as-new", "identical_content", "parallel_children",
        "cancelling_the_parent", "a_child_that_fails", "one_budget", "decided_through_the_parent",
        "one_cost_cap", "running_spend", "stream_tagged", "grandchilds_approval",
        "client-query-answered", "client_queries_are_answered", "invalid_answer",
        "endpoint_is_down", "committed", "stdio_servers", "workspace-follows", "snapshot",
        "store_directory_gone", "jobs-", "jobs-ledger-continued-as-new", "scheduled-agent",
        "scheduled-message", "monitor-burst-across-continue-as-new", "goes_missed",
        "past_its_max_runtime", "listed_again",
    )  # fmt: skip
    for needed in needed_all:
        assert any(needed in name for name in names), needed


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_history_replays(path: Path) -> None:
    """Replaying the recorded events through the current code issues the same commands."""
    result = await replayer().replay_workflow(recorded_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
