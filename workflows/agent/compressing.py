"""Reflecting's compression (agentsm): older turns become a summary the model is shown, and the
thread's record keeps every turn."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, is_cancelled_exception

from treadle.workflows import telemetry
from treadle.workflows.agent import calls
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import reflection
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.base import failure_message


async def compress(run: AgentRun, pub: Publisher) -> None:
    """Reflecting's compression: the turns older than ``reflection_keep_recent`` summarised by
    the model (or compacted without one when that call fails), the summary kept beside the
    stored record or, in a run without a store, instead of the older turns."""
    m, config = run.memory, run.input.config
    keep = config.reflection_keep_recent
    # With a store, the record stays whole: the summary is appended beside it and the model is
    # shown the record from the first turn kept verbatim on (``memory.view_from``).
    beside = m.conversation_head is not None
    start = m.summarised_turns if beside else 0
    older, recent = m.history[start:-keep], m.history[-keep:]
    if not older:
        pub.record(State.REFLECTING, "HistoryKept", f"no turns older than the last {keep}")
        return
    unresolved = reflection.unresolved_errors(older, recent)
    model = config.reflection_model or run.model
    try:
        response = await calls.summarise(
            config,
            reflection.summary_request(model, m.task, older),
            f"step {m.step} · reflect {model.partition(':')[2]}",
        )
        summary = (response.content or "").strip()
        run.spend(model, response.usage)
        telemetry.model_spent(model, response.usage, config.prices)
        if not summary or response.tool_calls:
            raise reflection.NoSummary("the summary reply was empty or called tools")
        how = "summarised by the model"
    except (ActivityError, reflection.NoSummary) as exc:
        if is_cancelled_exception(exc):
            raise
        summary = reflection.compact(older)
        how = "compacted without a model"
        detail = failure_message(exc) if isinstance(exc, ActivityError) else str(exc)
        pub.record(State.REFLECTING, "ReflectionFallback", f"summary call failed: {detail}")
    if beside:
        m.view_from = m.history_base + len(m.messages_of(m.history[: len(m.history) - keep]))
        m.view_summary_at = m.history_base + len(m.messages_of(m.history))
        m.summarised_turns = len(m.history) - keep
        m.history = (*m.history, reflection.summary_turn(older, summary, unresolved))
    else:
        m.history = (reflection.summary_turn(older, summary, unresolved), *recent)
        # The conversation changed from its start: the next call sends it whole again.
        m.conversation_head = None
        m.conversation_sent = 0
        m.conversation_turns = 0
    pub.record(
        State.REFLECTING,
        "HistoryCompressed",
        f"{len(older)} turns {how}; {len(recent)} kept verbatim; "
        f"{len(unresolved)} unresolved error(s) carried",
    )
