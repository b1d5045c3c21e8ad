"""A sub-agent reports to its parent while it runs, and the parent shows what it reported.

A child signals its parent's workflow id (``CHILD_WAITING``, the signal's name since the first
reports, which were only about approvals) with one bounded ``ChildReport``: its state and step,
what it and its running children spent so far, its calls waiting for a human and its children's
(named ``<its call>/<their call>``, so a grandchild's approval bubbles up to the top run), and its
newest stream events. It reports when its calls wait for a human and when they were decided,
when it is stuck, at the start of each step and whenever one of its own children reported (so a
grandchild's report reaches the top without waiting for the child's next step); the routine
ones keep a pace (``pace``), and a last report goes with its end.

The parent keeps the numbers in the child's ``ChildRun`` (``status``, the Web UI details),
publishes each new pending call as its own ``approval_needed`` event (decided through it:
``delegation.forward``), and passes the child's events on in its own stream, tagged with the
child (``AgentEvent.subagent``). A child's events carry no more than the stream already does:
each is cut further (``events.reported``), and at most ``events.REPORTED_EVENTS`` per report.
What a report does not carry (the child's tokens as they stream, whole texts) stays in the
child's own stream and status.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.events import (
    AgentEvent,
    ClientQuery,
    EventKind,
    answer_commands,
    approval_commands,
    guidance_commands,
    reported,
)
from treadle.workflows.agent.messages.models import AgentResult, PendingApproval
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import run_cost
from treadle.workflows.base import Frozen

CHILD_WAITING = "subagent_waiting"
"""The signal a child reports to its parent with (a name, not a method: this module cannot
import the workflow class it is part of)."""

REPORT_EVERY = timedelta(seconds=15)
"""A child's routine reports (a step began, a child of its own reported) come at most this
often for its first ``SLOWER_AFTER`` reports, then half as often for each ``SLOWER_AFTER``
more, down to one each ``SLOWEST``; what waits for a human, and a stuck run, are reported at
once. Each report costs its parent about 4 history events (a report every step would cost the
child two events a step and its parent four): eight children add about 10,300 over their first
day and 4,600 a day after, so a family of days stays below Temporal's limit (51,200); status and
stream lag a child by at most its pace."""
SLOWER_AFTER = 40
SLOWEST = timedelta(minutes=10)


def pace(reports: int) -> timedelta:
    """How long after its last report a child that has sent ``reports`` reports next reports
    what is routine."""
    return min(REPORT_EVERY * (1 << min(reports // SLOWER_AFTER, 8)), SLOWEST)


NOT_PASSED_ON: frozenset[EventKind] = frozenset(
    {"approval_needed", "client_query", "answer", "ended", "continued", "state"}
)
"""A child's events its parent does not pass on: its approvals and client queries (the parent
publishes its own, with commands that name the parent), the kinds a watcher of the parent reads
as the parent's own end (its answer, its end, its hand-over; the parent's ``delegate`` call
shows how the child ended), and its state transitions (the report's ``state`` says where it
is, and a report's room is kept for its replies and tool calls)."""


class ChildReport(Frozen):
    """What a child tells its parent (``CHILD_WAITING``)."""

    workflow_id: str
    pending: tuple[PendingApproval, ...] = ()
    """Its calls waiting for a human, and its children's (``<its call>/<their call>``)."""
    state: str | None = None
    step: int = 0
    tokens: int = 0
    """What it spent so far: its own usage, its ended children's, and what its running
    children reported."""
    cost_usd: float | None = None
    stuck: str | None = None
    """Why it is stuck, if it is (guided through the parent: ``treadle guide PARENT_ID
    --child CALL``, or its own id); or why a child of its own is (``stuck_at``)."""
    stuck_at: str | None = None
    """The call path, below it, of the stuck child ``stuck`` is about (``None``: itself)."""
    events: tuple[AgentEvent, ...] = ()
    """Its newest stream events since its last report (its children's among them, tagged)."""
    events_left_out: int = 0
    """Older events since its last report that this one does not carry."""
    queries: tuple[ClientQuery, ...] = ()
    """Its client query waiting for an answer, and its children's (``<their call>/q1``):
    answered through the parent (``child_queries``)."""
    result: AgentResult | None = None
    """Its result, in its last report (the parent's newest run reads it: the workflow's own
    result goes to the run that started it, which a hand-over may have closed)."""
    ended: str | None = None
    """A child that closes without a result: why (``was cancelled``, ``failed: ...``)."""


def is_child(run: AgentRun) -> bool:
    sub = run.input.config.subagents
    return workflow.info().parent is not None and sub is not None and sub.depth > 0


def report(run: AgentRun, pub: Publisher) -> ChildReport:
    """The report this run sends its parent now; its outbox is emptied into it."""
    m, family = run.memory, run.family
    priced = run_cost(run)
    running = family.running_cost()
    body = ChildReport(
        workflow_id=workflow.info().workflow_id,
        pending=(*run.waiting_approvals(), *family.pending()),
        state=run.state.value,
        step=m.step,
        tokens=m.usage.total_tokens + family.running_tokens(),
        cost_usd=None if priced is None and not running else round((priced or 0) + running, 6),
        **_stuck(run),
        events=tuple(
            reported(e, workflow.info().workflow_id)
            for e in pub.outbox
            if e.kind not in NOT_PASSED_ON
        ),
        events_left_out=pub.outbox_dropped,
        queries=(*_open_query(run), *family.queries()),
    )
    pub.outbox.clear()
    pub.outbox_dropped = 0
    pub.reported_at = workflow.now()
    pub.reports_sent += 1
    return body


async def tell_parent(run: AgentRun, pub: Publisher) -> None:
    """A child: tell the parent which of its calls wait for a human now (none: decided), with
    the rest of its report. A parent that is gone is no error: the child's own approvals still
    work."""
    info = workflow.info()
    if not is_child(run) or info.parent is None:
        return
    await _signal(run, info.parent.workflow_id, report(run, pub))


def report_soon(run: AgentRun, pub: Publisher, *, urgent: bool = False) -> None:
    """A child: report to the parent without waiting for the signal to be delivered (at the
    start of a step, and from a handler when one of its own children reported). Routine
    reports keep their pace (``pace``); an ``urgent`` one (stuck, what waits for a human
    changed) goes at once."""
    info = workflow.info()
    if not is_child(run) or info.parent is None:
        return
    last = pub.reported_at
    if not urgent and last is not None and workflow.now() - last < pace(pub.reports_sent):
        return
    # Scheduled in this workflow task as any command is: deterministic. Handlers are not
    # coroutines, and the loop need not wait a round trip for its parent to hear.
    body = report(run, pub)
    asyncio.get_running_loop().create_task(_signal(run, info.parent.workflow_id, body))


async def last_report(run: AgentRun, pub: Publisher, result: AgentResult) -> None:
    """A child that ends: its result, with what its paced reports have not passed on yet (its
    workflow's result goes to the parent's run that started it; the newest run reads this)."""
    info = workflow.info()
    if not is_child(run) or info.parent is None:
        return
    await _signal(run, info.parent.workflow_id, _with(report(run, pub), result=result))


async def ended_report(run: AgentRun, pub: Publisher, why: str) -> None:
    """A child that closes without a result (cancelled, failed): why, so the parent's newest
    run is not left waiting for it."""
    info = workflow.info()
    if info.parent is None or not is_child(run):
        return
    await _signal(run, info.parent.workflow_id, _with(report(run, pub), ended=why))


def _with(body: ChildReport, **update: object) -> ChildReport:
    return body.model_copy(update=update)


async def _signal(run: AgentRun, parent_id: str, body: ChildReport) -> None:
    parent = workflow.get_external_workflow_handle(parent_id)
    try:
        await parent.signal(CHILD_WAITING, body)
    except ApplicationError as exc:
        workflow.logger.warning("agent.subagent.parent_gone", extra={"why": exc.message})
        if run.parent_gone is None:
            # No server cancels such a child when its parent closes: it ends itself.
            run.parent_gone = f"its parent {parent_id} is gone ({exc.message})"


def child_reported(run: AgentRun, pub: Publisher, body: ChildReport) -> None:
    """A parent: a child reported. Its numbers and pending calls go to its ``ChildRun``; each
    new pending call is published as an ``approval_needed`` event that names this run, and its
    events are passed on, tagged. A run that is itself a child reports onward."""
    child = next((c for c in run.family.children if c.workflow_id == body.workflow_id), None)
    if child is None or child.status != "running":
        return
    if body.result is not None or body.ended is not None:
        # Its end, for whichever run of this workflow id waits for it (``child_ends``).
        ended = {"result": body.result.model_dump(mode="json")} if body.result else {}
        child = child.model_copy(update={"delivered": {**ended, "ended": body.ended}})
    known = {p.call_id for p in child.pending_approvals}
    asked = {q.id for q in child.client_queries}
    update: dict[str, object] = {
        "pending_approvals": body.pending,
        "client_queries": body.queries,
        "tokens": body.tokens,
        "cost_usd": body.cost_usd,
        "state": body.state,
        "stuck": body.stuck,
        "stuck_at": body.stuck_at,
        "steps": body.step,
    }
    run.family.replace(child.model_copy(update=update))
    if known != {p.call_id for p in body.pending}:
        waiting = ", ".join(f"{child.call_id}/{p.call_id} ({p.tool})" for p in body.pending)
        pub.record(run.state, "SubagentWaiting", f"{child.workflow_id}: {waiting or 'decided'}")
    parent_id = workflow.info().workflow_id
    if body.events_left_out:
        pub.publish(
            AgentEvent(
                kind="progress",
                step=body.step,
                state=body.state or "",
                at=workflow.now(),
                text=f"{body.events_left_out} earlier event(s) of this sub-agent not passed on",
                subagent=body.workflow_id,
            )
        )
    for event in body.events:
        pub.publish(_answerable_here(event, child.call_id, parent_id))
    for p in body.pending:
        if p.call_id in known:
            continue
        named = f"{child.call_id}/{p.call_id}"
        pub.emit(
            "approval_needed",
            f"sub-agent {child.workflow_id}: {p.tool}",
            tool=p.tool,
            call_id=named,
            target=child.workflow_id,
            arguments=p.arguments,
            commands=approval_commands(parent_id, named),
        )
    for q in body.queries:
        if q.id in asked:
            continue
        query = q.model_copy(update={"id": f"{child.call_id}/{q.id}"})
        pub.emit(
            "client_query",
            f"sub-agent {child.workflow_id}: {query.kind}: {query.what[:200]}",
            query=query,
            call_id=query.id,
            target=child.workflow_id,
            commands=answer_commands(parent_id, query),
        )
    pub.show()
    changed = known != {p.call_id for p in body.pending}
    changed = changed or asked != {q.id for q in body.queries}
    # A run stuck further down is passed on at the pace.
    report_soon(run, pub, urgent=changed or (body.stuck is not None and body.stuck_at is None))


def _stuck(run: AgentRun) -> dict[str, str | None]:
    """Why this run is stuck, or else the first stuck run below it and where (a grandchild's
    stuck recovery shows in the top run's status, named by the path that guides it)."""
    own = run.memory.pending_guidance or run.recovery.stuck_reason
    below = None if own else run.family.stuck_below()
    if below is None:
        return {"stuck": own}
    return {"stuck": below[1], "stuck_at": below[0]}


def _answerable_here(event: AgentEvent, call_id: str, parent_id: str) -> AgentEvent:
    """A child's event as its parent passes it on: a stuck run's ``guidance_needed`` names the
    child by its call (``call_1``, a grandchild's ``call_1/call_2``) and carries the commands
    that guide it through this run (``delegation.forward_guidance``)."""
    if event.kind != "guidance_needed":
        return event
    named = f"{call_id}/{event.call_id}" if event.call_id else call_id
    return event.model_copy(
        update={"call_id": named, "commands": guidance_commands(parent_id, named)}
    )


def _open_query(run: AgentRun) -> tuple[ClientQuery, ...]:
    """The run's own client query while it waits for its answer."""
    query = run.client.query
    return (query,) if query is not None and run.client.answer is None else ()
