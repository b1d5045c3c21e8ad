"""Continue-as-new: how a run or thread hands itself, whole, to a fresh run of the same
workflow id, so its history stays bounded however long it lives."""

from __future__ import annotations

from temporalio import workflow

from workflows.agent.state import AgentRun

CARRIED_TRACE_ENTRIES = 500
"""The trace's tail a run hands to the next run of its chain (older entries are counted)."""
MAX_CARRIED_MEMORY_BYTES = 1_000_000
"""Above this, older turns are compacted before the hand-over, so the next run's input stays
well under Temporal's 2 MB payload limit."""


async def continue_as_new_if_due(run: AgentRun) -> None:
    """At a safe point (no activity or approval pending), hand the whole run to a fresh run of
    the same workflow id when Temporal suggests it or ``continue_as_new_after_events`` is
    reached. Handlers finish first, so no signal or update is lost in the hand-over."""
    info, limit = workflow.info(), run.input.config.continue_as_new_after_events
    length = info.get_current_history_length()
    if not info.is_continue_as_new_suggested() and (limit is None or length < limit):
        return
    await workflow.wait_condition(workflow.all_handlers_finished)
    run.record(
        run.state,
        "ContinuedAsNew",
        f"after {length} events, {info.get_current_history_size() // 1024} KiB of history",
        workflow.now(),
    )
    carried = run.carried(CARRIED_TRACE_ENTRIES, MAX_CARRIED_MEMORY_BYTES)
    workflow.continue_as_new(
        run.input.model_copy(update={"resume": carried.model_dump(mode="json")})
    )
