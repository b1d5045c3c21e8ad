"""Histories of real runs, recorded earlier, still replay through today's workflow code.

A change that would break replay of runs already in flight (reordered commands, a new activity
in the middle of the loop, different search-attribute upserts) fails here, before it ships.
Refresh after an intentional, versioned change with:
    TREADLE_RECORD_HISTORIES=1 pytest tests/loop/test_agent_loop.py tests/approvals/test_approval.py
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.support.harness import HISTORIES, recorded_history, replayer

RECORDED = sorted(HISTORIES.glob("*.json"))


def test_recorded_histories_are_present() -> None:
    """The replay corpus exists and covers approvals, parallel tools, errors, a crash, stuck
    recovery, phases, reflection, confidence, budgets, threads and continue-as-new, and families
    of sub-agents (parents and their children: parallel, cancelled, failed, out of budget or
    cost, reporting while they run, a grandchild's approval decided through the top run)."""
    names = {p.stem for p in RECORDED}
    assert len(names) >= 20
    needed_all = (
        "approve", "parallel", "max_steps", "killed", "reject", "modify", "not_json",
        "halted", "guidance", "productive", "reflection", "confidence", "budget", "cancelling",
        "thread", "continued-as-new", "identical_content", "parallel_children",
        "cancelling_the_parent", "a_child_that_fails", "one_budget", "decided_through_the_parent",
        "one_cost_cap", "running_spend", "stream_tagged", "grandchilds_approval",
    )  # fmt: skip
    for needed in needed_all:
        assert any(needed in name for name in names), needed


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_history_replays(path: Path) -> None:
    """Replaying the recorded events through the current code issues the same commands."""
    result = await replayer().replay_workflow(recorded_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


def patch_markers(text: str) -> set[str]:
    """The ``workflow.patched`` ids a recorded history's marker events carry (their payloads are
    base64 JSON, so a plain text search never sees them)."""
    found = set()
    for event in json.loads(text)["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if not marker or marker.get("markerName") != "core_patch":
            continue
        for payload in marker["details"]["patch-data"]["payloads"]:
            found.add(json.loads(base64.b64decode(payload["data"]))["id"])
    return found


def test_patch_markers_are_read_from_the_recorded_events() -> None:
    """The reader below sees markers where they are: without it the next test passes on any
    corpus."""
    marked = {p.stem: patch_markers(p.read_text()) for p in RECORDED}
    assert any("coalesced-search-attributes" in ids for ids in marked.values())


def test_the_corpus_holds_runs_from_before_each_versioned_change() -> None:
    """Every ``workflow.patched`` change is guarded by histories recorded before it: runs
    without its marker, which ``test_recorded_history_replays`` replays through the new code
    (the old path). The ``coalesced-search-attributes`` change (one upsert before each wait
    instead of one per transition) also needs old runs that upserted per transition."""
    from treadle.workflows.agent.acting import CALLS_END_TOGETHER
    from treadle.workflows.agent.engine import REFLECTION_KEEPS_RECORD
    from treadle.workflows.agent.messages.snapshots import (
        SNAPSHOTS_IN_CALLS,
        SUBAGENT_WORKSPACE,
        WORKSPACE_FOLLOWS,
    )
    from treadle.workflows.agent.parts.handover import CARRIED_BY_REFERENCE
    from treadle.workflows.agent.parts.outages import STORE_OUTAGES
    from treadle.workflows.agent.parts.planning import PATCHES_BEFORE_LOCAL_ACTIVITY
    from treadle.workflows.agent.parts.publishing import (
        ONE_UPSERT_PER_STEP,
        PACED_HOOK_ATTRIBUTES,
        PACED_STEP_ATTRIBUTES,
    )
    from treadle.workflows.agent.subagents.delegation import SUBAGENT_GUIDANCE, SUBAGENTS
    from treadle.workflows.agent.subagents.ends import SUBAGENTS_OUTLIVE_RUNS
    from treadle.workflows.agent.subagents.queries import SUBAGENT_QUERIES
    from treadle.workflows.agent.subagents.reports import (
        REPORT_PACE,
        SUBAGENT_APPROVALS,
        SUBAGENT_PROGRESS,
    )
    from treadle.workflows.agent.workflow import (
        CARRY_CONTENT_HASHES,
        CLIENT_QUERIES,
        COALESCED_SEARCH_ATTRIBUTES,
        LOADED_TOOLS,
    )

    texts = {p.stem: p.read_text() for p in RECORDED}
    agent_runs = {name: t for name, t in texts.items() if '"AgentWorkflow"' in t}
    marked = {name: patch_markers(t) for name, t in agent_runs.items()}
    patches = (CARRY_CONTENT_HASHES, CLIENT_QUERIES, COALESCED_SEARCH_ATTRIBUTES, LOADED_TOOLS)
    subagent_patches = (SUBAGENTS, SUBAGENT_APPROVALS, SUBAGENT_PROGRESS, REPORT_PACE)
    subagent_patches += (SUBAGENT_GUIDANCE, SUBAGENT_QUERIES, CALLS_END_TOGETHER)
    subagent_patches += (SUBAGENTS_OUTLIVE_RUNS,)
    workspace_patches = (WORKSPACE_FOLLOWS, SUBAGENT_WORKSPACE, SNAPSHOTS_IN_CALLS)
    later = (STORE_OUTAGES, *subagent_patches, ONE_UPSERT_PER_STEP, *workspace_patches)
    later += (PATCHES_BEFORE_LOCAL_ACTIVITY, PACED_STEP_ATTRIBUTES, PACED_HOOK_ATTRIBUTES)
    for patch in (*patches, *later):
        before = [name for name, ids in marked.items() if patch not in ids]
        assert before, f"no recorded run from before {patch}"
    # The hand-over by reference and reflection beside the record: runs that continued as new,
    # and runs that reflected, recorded before either.
    continued = [n for n, t in agent_runs.items() if "CONTINUED_AS_NEW" in t]
    assert any(CARRIED_BY_REFERENCE not in marked[n] for n in continued)
    reflected = [n for n in agent_runs if "reflection" in n]
    assert any(REFLECTION_KEEPS_RECORD not in marked[n] for n in reflected)
    per_transition = [
        name
        for name, t in agent_runs.items()
        if COALESCED_SEARCH_ATTRIBUTES not in marked[name]
        and t.count("EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES") >= 6
    ]
    assert per_transition, "no recorded run that upserted at every transition"
    for patch in (
        *subagent_patches,
        *workspace_patches,
        PACED_STEP_ATTRIBUTES,
        PACED_HOOK_ATTRIBUTES,
    ):
        assert any(patch in ids for ids in marked.values()), f"no recorded run after {patch}"
    # Paced step attributes: a run that sent its step once the pace allowed, and a run that
    # handed over with its held step.
    paced = [name for name, ids in marked.items() if PACED_STEP_ATTRIBUTES in ids]
    assert any("pace_allows" in name for name in paced), paced
    assert any("CONTINUED_AS_NEW" in agent_runs[name] for name in paced), paced
    # Paced hooks: runs with a post-tools hook from before (a step sent PostToolsHook, then
    # Planning) and after.
    hooked = [name for name, t in agent_runs.items() if '"run_hook"' in t]
    assert any(PACED_HOOK_ATTRIBUTES not in marked[name] for name in hooked), hooked
    assert any(PACED_HOOK_ATTRIBUTES in marked[name] for name in hooked), hooked
