"""Continue-as-new: how a run or thread hands itself, whole, to a fresh run of the same
workflow id, so its history stays bounded however long it lives."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

from workflows.agent.events import CARRIED_BYTES, EVENTS_CARRIED
from workflows.agent.models import AgentConfig
from workflows.agent.state import AgentRun

CARRIED_TRACE_ENTRIES = 500
"""The trace's tail a run hands to the next run of its chain (older entries are counted)."""
MAX_CARRIED_MEMORY_BYTES = 1_000_000
"""Above this, older turns are compacted before the hand-over, so the next run's input stays
well under Temporal's 2 MB payload limit."""


DEFAULT_EVENT_BOUND = "default-event-bound"
"""Patch id: an input that does not name ``continue_as_new_after_events`` gets its default too
(before it, only an input that named the field was bounded; see ``event_bound``)."""


def event_bound(config: AgentConfig, patched: Callable[[str], bool]) -> int | None:
    """The run's own continue-as-new bound, in events (``None``: Temporal's suggestion only).

    Every new run gets it, whichever client started it: a ``temporal workflow start`` with plain
    JSON, or another SDK, leaves the field out. Runs recorded before ``DEFAULT_EVENT_BOUND``
    were bounded only where the input named the field (an input from before the field existed,
    or from such a client, grew to Temporal's suggestion), so without the patch's marker they
    replay that way. ``patched`` is ``workflow.patched``, asked only when the input is silent."""
    named = "continue_as_new_after_events" in config.model_fields_set
    if not named and not patched(DEFAULT_EVENT_BOUND):
        return None
    return config.continue_as_new_after_events


def due(run: AgentRun) -> str | None:
    """Why the run should continue as new now (Temporal suggests it, or
    ``continue_as_new_after_events`` is reached), or ``None``."""
    info, limit = workflow.info(), event_bound(run.input.config, workflow.patched)
    length = info.get_current_history_length()
    if not info.is_continue_as_new_suggested() and (limit is None or length < limit):
        return None
    return f"after {length} events, {info.get_current_history_size() // 1024} KiB of history"


async def continue_as_new(run: AgentRun, stream: WorkflowStream) -> NoReturn:
    """Hand the whole run, and the live stream's tail with its offsets, to a fresh run of the
    same workflow id. The stream releases its pollers and every handler finishes first, so no
    signal or update is lost in the hand-over. Call at a safe point: no activity or approval
    pending."""
    log = stream.get_state()
    keep, size = 0, 0
    for item in reversed(log.log[-EVENTS_CARRIED:]):
        size += len(item.data) + len(item.topic)
        if size > CARRIED_BYTES:
            break
        keep += 1
    stream.truncate(log.base_offset + len(log.log) - keep)
    carried = run.carried(CARRIED_TRACE_ENTRIES, MAX_CARRIED_MEMORY_BYTES)
    await stream.continue_as_new(
        lambda state: [
            run.input.model_copy(
                update={"resume": carried.model_dump(mode="json"), "stream": state}
            )
        ]
    )
