"""Continue-as-new: how a run or thread hands itself to a fresh run of the same workflow id, so
its history stays bounded however long it lives.

What is handed over is bounded: the conversation goes by reference to the record the store
already holds (``memory.conversation_head``), every list carried is a bounded tail with a count
of the rest, and the run's input is not copied into its own resume (the next run's input is
that input). A hand-over costs the same at step 100 as at step 100,000. Why not one blob
written by an activity: the carried state is the workflow's own, so an activity writing it
would take it as its input, in history all the same; what keeps the hand-over small is carrying
nothing that grows (and External Storage takes an input that is still large, such as a long
inbox of queued messages, as a reference). A run without a store has no record to refer to: it
carries its conversation inline (compacted above ``MAX_CARRIED_MEMORY_BYTES``).
"""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

from treadle.workflows.agent.messages.events import CARRIED_BYTES, EVENTS_CARRIED
from treadle.workflows.agent.messages.models import AgentInput
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.base import lean_dump

AUTO_UPGRADE = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE

CARRIED_TRACE_ENTRIES = 500
"""The trace's tail a run without a store hands over."""
MAX_CARRIED_MEMORY_BYTES = 1_000_000
"""Without a store, the conversation is carried inline: above this, older turns are compacted
before the hand-over, so the next run's input stays under Temporal's 2 MB payload limit."""
TRACE_TAIL = 10
"""Trace entries a hand-over by reference carries (the rest are counted in ``trace_earlier``
and stay readable in the earlier runs' histories)."""
FILES_CARRIED = 20
"""Written files and reads the progress tracker carries (written ones beyond are counted)."""
STREAM_EVENTS = 24
STREAM_BYTES = 4 * 1024
"""The live stream's tail a hand-over by reference carries (about four steps' events): a
watcher that reconnects from an offset a few turns back misses nothing, and the bound in bytes
keeps long replies from making the hand-over large (the hand-over is written twice into
history, so its every KiB costs a chain of 60-step runs 34 bytes a step; what the stream said
is in the runs' histories, and ``trace`` reads it)."""


def is_due(limit: int | None) -> bool:
    """Temporal suggests continuing as new, or the history reached ``limit`` events
    (``continue_as_new_after_events``; ``None``: Temporal's suggestion only)."""
    info = workflow.info()
    if info.is_continue_as_new_suggested():
        return True
    return limit is not None and info.get_current_history_length() >= limit


def due(run: AgentRun) -> str | None:
    """Why the run should continue as new now (Temporal suggests it, or
    ``continue_as_new_after_events`` is reached), or ``None``."""
    info, limit = workflow.info(), run.input.config.continue_as_new_after_events
    length = info.get_current_history_length()
    if not is_due(limit):
        return None
    return f"after {length} events, {info.get_current_history_size() // 1024} KiB of history"


async def continue_as_new(run: AgentRun, stream: WorkflowStream) -> NoReturn:
    """Hand the run, and the live stream's tail with its offsets, to a fresh run of the same
    workflow id (by reference and bounded, see the module's docstring). The stream releases its
    pollers and every handler finishes first, so no signal or update is lost in the hand-over.
    Call at a safe point: no activity or approval pending (sub-agents that outlive the run may
    run on: ``child_ends``)."""
    # Without a store there is no record to refer to: the conversation is carried inline.
    by_reference = run.memory.conversation_head is not None
    events, most = (
        (STREAM_EVENTS, STREAM_BYTES) if by_reference else (EVENTS_CARRIED, CARRIED_BYTES)
    )
    log = stream.get_state()
    keep, size = 0, 0
    for item in reversed(log.log[-events:]):
        size += len(item.data) + len(item.topic)
        if size > most:
            break
        keep += 1
    stream.truncate(log.base_offset + len(log.log) - keep)
    if by_reference:
        carried = run.handed_over(TRACE_TAIL, FILES_CARRIED)
        resume = lean_dump(carried, exclude={"input"})
    else:
        carried = run.carried(CARRIED_TRACE_ENTRIES, MAX_CARRIED_MEMORY_BYTES)
        resume = carried.model_dump(mode="json")
    # The stream's own continue_as_new, spelled out to pass one option: a thread's next run
    # starts on its Worker Deployment's current build (a run stays on the build that started
    # it, docs/upgrades.md). Without a deployment the server ignores it.
    stream.detach_pollers()
    await workflow.wait_condition(workflow.all_handlers_finished)
    workflow.continue_as_new(
        run.input.model_copy(update={"resume": resume, "stream": stream.get_state()}),
        initial_versioning_behavior=AUTO_UPGRADE if run.input.thread else None,
    )


def resumed(input: AgentInput) -> AgentRun:
    """The run ``input.resume`` hands over. A hand-over by reference leaves out the run's
    input, which is this input itself; a hand-over without a store, or ``treadle import``,
    carries it whole (plain JSON of an ``AgentRun``)."""
    carried = dict(input.resume or {})
    if "input" not in carried:
        carried["input"] = input.model_copy(update={"resume": None, "stream": None})
    return AgentRun.model_validate(carried)
