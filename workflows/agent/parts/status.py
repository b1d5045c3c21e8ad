"""What a run shows the outside: the ``state`` query's answer, the Web UI's Current Details,
activity summaries, and the price of its usage. Pure functions of ``AgentRun``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from treadle.workflows.agent.messages.models import AgentStatus, Price, TokenUsage
from treadle.workflows.agent.parts.outages import Outage
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.waiting import describe


def cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters cut]"


def cost(usage_by_model: Mapping[str, TokenUsage], prices: Mapping[str, Price]) -> float | None:
    """Usage priced per model in US dollars; ``None`` if any model used has no price."""
    if not prices or not usage_by_model:
        return None
    total = 0.0
    for model, usage in usage_by_model.items():
        price = prices.get(model)
        if price is None:
            return None
        cached_price = price.prompt if price.cached_prompt is None else price.cached_prompt
        total += (
            (usage.prompt_tokens - usage.cached_tokens) * price.prompt
            + usage.cached_tokens * cached_price
            + usage.completion_tokens * price.completion
        ) / 1_000_000
    return round(total, 6)


def run_cost(run: AgentRun) -> float | None:
    """The run's cost: its usage (its ended children's included) priced, plus what children
    that ended without saying cost (their whole cost shares)."""
    priced = cost(run.memory.usage_by_model, run.input.config.prices)
    lost = run.family.lost_cost_usd
    if not lost:
        return priced
    return round((priced or 0.0) + lost, 6)


def status(
    run: AgentRun, now: datetime, stream_offset: int = 0, outage: Outage | None = None
) -> AgentStatus:
    """The ``state`` query: state, step, pending approvals, usage, progress, last event, and the
    store a call waits for."""
    m, config = run.memory, run.input.config
    return AgentStatus(
        state=run.state,
        step=m.step,
        max_steps=config.max_steps,
        model=run.model,
        task=run.input.task,
        pending_approvals=(*run.waiting_approvals(), *run.family.pending()),
        usage=m.usage,
        cost_usd=run_cost(run),
        token_budget=config.token_budget,
        max_cost_usd=config.max_cost_usd,
        confidence=m.confidence_score,
        last_event=run.last_event,
        final_answer=m.final_answer,
        error=m.error,
        progress=run.tracker.summary(now, run.started_at),
        stuck=m.pending_guidance or run.recovery.stuck_reason,
        thread=run.input.thread,
        queued_messages=len(run.thread.inbox),
        run_in_chain=run.runs,
        forked_from=run.input.forked_from,
        client_query=run.client.query,
        child_queries=run.family.queries(),
        wakes_at=run.waiting.wakes_at if run.waiting.active else None,
        stream_offset=stream_offset,
        last_decision=last_decision(run),
        outage=outage.describe() if outage is not None else None,
        served_by=run.served_by,
        usage_by_model=m.usage_by_model,
        children=tuple(run.family.children),
    )


def last_decision(run: AgentRun) -> str | None:
    """The trace's last decision or client answer (it names who sent it)."""
    for entry in reversed(run.trace):
        if entry.event in ("SignalReceived", "ClientAnswerReceived"):
            return entry.data
    return None


def details(run: AgentRun, now: datetime, outage: Outage | None = None) -> str:
    """The Web UI's Current Details (Markdown): state, step, model, tokens, what it waits for."""
    m = run.memory
    lines = [
        f"**State:** {run.state.value}",
        f"**Step:** {m.step} / {run.input.config.max_steps}",
        f"**Model:** {run.model}",
        f"**Tokens:** {m.usage.total_tokens}",
    ]
    if run.input.thread:
        lines.append(
            f"**Thread:** {len(run.thread.inbox)} message(s) queued"
            + (" · closing" if run.thread.closing else "")
            + (f" · run {run.runs} of this id" if run.runs > 1 else "")
        )
    waiting = (*run.waiting_approvals(), *run.family.pending())
    if waiting:
        lines.append("**Waiting for approval:**")
        lines.extend(f"- `{p.call_id}` {p.tool} {json.dumps(p.arguments)[:120]}" for p in waiting)
    if run.client.query is not None:
        q = run.client.query
        lines.append(f"**Waiting for the client:** `{q.id}` {q.kind} {cut(q.what, 120)}")
    for q in run.family.queries():  # a sub-agent's, answered through this run
        lines.append(f"**Waiting for the client:** `{q.id}` {q.kind} {cut(q.what, 120)}")
    if outage is not None:
        lines.append(f"**Waiting:** {outage.describe()}")
    if run.waiting.active:
        lines.append(f"**Waiting {waiting_line(run)}**")
    if run.family.children:
        lines.append(f"**Sub-agents** (tokens counted with the run's): {family_line(run)}")
        lines.extend(
            f"- `{c.workflow_id}` {c.status}"
            + (f" ({c.state}, step {c.steps})" if c.status == "running" and c.state else "")
            + f" · {c.tokens} tokens"
            + (f" · ${c.cost_usd:.4f}" if c.cost_usd is not None else "")
            + f" · {c.task}"
            + (
                f" · stuck{f' at {c.stuck_at}' if c.stuck_at else ''}: {cut(c.stuck, 120)}"
                f" (guide it: `guide --child {c.call_id}"
                f"{f'/{c.stuck_at}' if c.stuck_at else ''}`)"
                if c.status == "running" and c.stuck
                else ""
            )
            for c in run.family.children
        )
    if m.pending_guidance:
        lines.append(f"**Stuck, waiting for guidance:** {m.pending_guidance}")
    elif run.recovery.stuck_reason:
        lines.append(f"**Stuck:** {run.recovery.stuck_reason}")
    lines.append(f"**Progress:** {run.tracker.summary(now, run.started_at).describe()}")
    if m.error:
        lines.append(f"**Error:** {m.error}")
    if m.final_answer:
        lines.append(f"**Answer:** {cut(m.final_answer, 300)}")
    return "\n\n".join(lines)


def waiting_line(run: AgentRun) -> str:
    """A parked run's wake time and reason (the Web UI's details)."""
    return describe(run.waiting)


def family_line(run: AgentRun) -> str:
    """A run's children in one line: how many run and ended, and the budget they hold."""
    children = run.family.children
    running = sum(1 for c in children if c.status == "running")
    held, spending = run.family.reserved(), run.family.running_tokens()
    return (
        f"{running} running, {len(children) - running} ended"
        + (f", {held} tokens held for them" if held else "")
        + (f", {spending} of them spent so far" if spending else "")
    )
