"""A sub-agent's end: awaited, counted in its parent's usage, and turned into the observation
of the ``delegate`` call that started it (``delegation`` starts it).

A child may outlive its parent's run: it is started with ``ParentClosePolicy.ABANDON`` (a
hand-over closes the run, and ``REQUEST_CANCEL`` would cancel it) and signals its end to its
parent's workflow id, which reaches the newest run of the chain (``child_reports.last_report``,
kept in ``ChildRun.delivered`` and carried across the hand-over). The run that started it takes
whichever comes first, its handle's result or that signal; a later run, which holds no handle,
waits for the signal (``carried``), checking now and then (``CHECK_EVERY``) that the child is
still there (a terminated child signals nothing). A cancelled parent cancels such a child itself
(no parent close policy does) and waits for it to say it ended. Either way the observation,
the tokens counted and the family's record are the same.
"""

from __future__ import annotations

import asyncio
import builtins
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    TimeoutError,
    WorkflowAlreadyStartedError,
)

from treadle.workflows.agent.messages.family import ChildRun, ChildStatus
from treadle.workflows.agent.messages.models import (
    AgentResult,
    RunStatus,
    TokenUsage,
    ToolCall,
    ToolOutcome,
)
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import cost, cut
from treadle.workflows.agent.subagents.reports import CHILD_WAITING, ChildReport

_STATUS: dict[RunStatus, ChildStatus] = {
    RunStatus.DONE: "done",
    RunStatus.ERROR: "error",
    RunStatus.HALTED: "halted",
    RunStatus.RUNNING: "running",
}

_SILENT = "closed without telling its parent how it ended (terminated or timed out)"
"""A child that closed while a later run of its parent waited for it, and signalled nothing."""

CHECK_FIRST = timedelta(seconds=10)
CHECK_EVERY = timedelta(minutes=10)
"""A run waiting for a child an earlier run of its chain started checks that the child is
still there (a terminated or timed-out child signals nothing): ``CHECK_FIRST`` after it starts
waiting, then twice as long after each check, up to this. A check costs the parent about 6
history events and the child 4."""


def carried(run: AgentRun, call_id: str) -> ChildRun | None:
    """The running child ``call_id`` started, if a hand-over may carry it (started): the next
    run waits for its end instead of starting it again."""
    child = run.family.started(call_id)
    if child is None or child.status != "running":
        return None
    return child if child.run_id is not None else None


def merged(outcome: ToolOutcome, result: AgentResult, start: str | None) -> ToolOutcome:
    """The call's outcome carrying the child's last workspace snapshot, for the parent to
    merge (``snapshotting.merge_parallel``), when it changed from the one it started from."""
    if result.workspace_snapshot not in (None, start):
        # What the child's tools left, whether it answered or not: merged after the call.
        update = {"snapshot": result.workspace_snapshot}
        outcome = outcome.model_copy(update={"result": outcome.result.model_copy(update=update)})
    return outcome


async def awaited(
    run: AgentRun,
    pub: Publisher,
    call: ToolCall,
    child: ChildRun,
    handle: workflow.ChildWorkflowHandle[Any, AgentResult] | None,
    start: str | None,
) -> ToolOutcome:
    """A child that may outlive this run, awaited to its end: its workflow's result when this
    run started it (``handle``), or the end it signalled (``ChildRun.delivered``), whichever
    comes first; a run it was carried to has only the signal (and checks the child is still
    there). The call's observation is the same either way."""
    try:
        if handle is not None:
            # Whichever comes second is not read: its exception must not be left unretrieved.
            handle.add_done_callback(lambda done: done.cancelled() or done.exception())
            await workflow.wait_condition(
                lambda: not run.family.handing_over and (handle.done() or _delivered(run, call.id))
            )
        else:
            await _until_delivered(run, child)
        if run.family.handing_over:  # this run ends: the next observes the child's end
            await workflow.wait_condition(lambda: not run.family.handing_over)
    except asyncio.CancelledError:
        # The parent itself is cancelled: its child is cancelled and waited for, then so is it.
        if handle is not None and not handle.done():
            handle.cancel()
            await workflow.wait_condition(handle.done)
        elif handle is None:
            await cancel_child(child)
            await _until_delivered(run, child)
        _observed(run, pub, call, child, handle, start)  # its end, in the family's record
        raise
    return _observed(run, pub, call, child, handle, start)


def _observed(
    run: AgentRun,
    pub: Publisher,
    call: ToolCall,
    child: ChildRun,
    handle: workflow.ChildWorkflowHandle[Any, AgentResult] | None,
    start: str | None,
) -> ToolOutcome:
    """The call's observation of a child that ended (as ``awaited`` waited for it)."""
    found = run.family.started(call.id) or child
    delivered = found.delivered or {}
    if handle is not None and handle.done() and not delivered:
        try:
            result: AgentResult = handle.result()
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as exc:
            return ended_without_result(run, pub, call, found, exc)
    elif delivered.get("result") is not None:
        result = AgentResult.model_validate(delivered["result"])
    else:
        why = delivered.get("ended") or _SILENT
        status: ChildStatus = "cancelled" if why == "was cancelled" else "failed"
        return _closed(run, pub, call, found, status, why)
    return merged(ended(run, pub, call, found, result), result, start)


def _delivered(run: AgentRun, call_id: str) -> bool:
    child = run.family.started(call_id)
    return child is not None and child.delivered is not None


async def _until_delivered(run: AgentRun, child: ChildRun) -> None:
    """Wait for the end a child signals; a child no longer there (terminated, timed out)
    signals nothing: its end is then recorded as unknown (``delivered`` stays empty)."""
    wait = CHECK_FIRST
    while not _delivered(run, child.call_id) or run.family.handing_over:
        try:
            await workflow.wait_condition(
                lambda: not run.family.handing_over and _delivered(run, child.call_id),
                timeout=wait,
                timeout_summary=f"sub-agent {child.workflow_id}",
            )
        except builtins.TimeoutError:  # wait_condition's (this module imports Temporal's)
            if run.family.handing_over:
                continue  # the next run checks
            if not await _still_there(child):
                found = run.family.started(child.call_id) or child
                if found.delivered is None:
                    run.family.replace(found.model_copy(update={"delivered": {}}))
                return
            wait = min(wait * 2, CHECK_EVERY)


async def _still_there(child: ChildRun) -> bool:
    """Whether the child's workflow is still open: a report that names no child of its own,
    which it ignores, is delivered only to an open workflow."""
    handle = workflow.get_external_workflow_handle(child.workflow_id)
    try:
        await handle.signal(CHILD_WAITING, ChildReport(workflow_id=workflow.info().workflow_id))
    except ApplicationError:
        return False
    return True


async def cancel_child(child: ChildRun) -> None:
    """Cancel a child this run did not start (its parent close policy would not: it outlives
    runs); it ends Cancelled and says so (``child_reports.ended_report``)."""
    try:
        await workflow.get_external_workflow_handle(child.workflow_id).cancel()
    except ApplicationError as exc:  # it ended meanwhile
        workflow.logger.warning("agent.subagent.cancel_failed", extra={"why": exc.message})


def count(run: AgentRun, child: ChildRun, result: AgentResult | None) -> int:
    """Count what the child spent in the parent's usage (by model, for cost); its whole share
    when it ended without a result. Returns the tokens counted."""
    if result is not None:
        spent = dict(result.usage_by_model) or {child.model: result.usage}
    elif child.token_budget:
        budget = child.token_budget
        spent = {child.model: TokenUsage(total_tokens=budget, estimated_tokens=budget)}
    else:
        spent = {}
    for model, usage in spent.items():
        run.spend(model, usage)
    if result is None:
        # Unknown what it spent: its whole cost share is counted, as its tokens are.
        run.family.lost_cost_usd += child.cost_budget_usd or 0.0
    elif result.cost_usd:
        # What the child counted beyond its priced usage (its own lost children).
        priced = cost(result.usage_by_model, run.input.config.prices) or 0.0
        run.family.lost_cost_usd += max(0.0, round(result.cost_usd - priced, 9))
    return sum(u.total_tokens for u in spent.values())


def ended(
    run: AgentRun, pub: Publisher, call: ToolCall, child: ChildRun, result: AgentResult
) -> ToolOutcome:
    tokens = count(run, child, result)
    status = _STATUS[result.status]
    outcome = result.answer if status == "done" else result.error
    ended = child.model_copy(
        update={
            "status": status,
            "tokens": tokens,
            "cost_usd": result.cost_usd,
            "steps": result.steps,
            "outcome": cut(outcome or "", 200) or None,
            "pending_approvals": (),
            "delivered": None,
        }
    )
    run.family.replace(ended)
    pub.record(run.state, "SubagentEnded", f"{child.workflow_id} {status}, {tokens} tokens")
    limit = run.input.config.max_observation_chars
    if status == "done":
        text = f"Sub-agent {child.workflow_id} answered:\n{result.answer or ''}"
        return ToolOutcome.of(call, cut(text, limit), success=True)
    why = result.error or "no answer"
    text = (
        f"ERROR: sub-agent {child.workflow_id} ended {status} after {result.steps} step(s): {why}"
    )
    return ToolOutcome.of(call, cut(text, limit), success=False)


def ended_without_result(
    run: AgentRun,
    pub: Publisher,
    call: ToolCall,
    child: ChildRun,
    exc: ChildWorkflowError | WorkflowAlreadyStartedError,
) -> ToolOutcome:
    if isinstance(exc, WorkflowAlreadyStartedError):
        status: ChildStatus = "failed"
        why = f"could not start: workflow id {child.workflow_id} is already running"
    else:
        status, why = _why(exc)
    return _closed(run, pub, call, child, status, why)


def _closed(
    run: AgentRun, pub: Publisher, call: ToolCall, child: ChildRun, status: ChildStatus, why: str
) -> ToolOutcome:
    """A child that closed without a result (``why``): its whole share counts."""
    tokens = count(run, child, None)
    run.family.replace(
        child.model_copy(
            update={
                "status": status,
                "tokens": tokens,
                "outcome": cut(why, 200),
                "pending_approvals": (),
                "delivered": None,
            }
        )
    )
    pub.record(run.state, "SubagentEnded", f"{child.workflow_id} {status}: {why}")
    text = f"ERROR: sub-agent {child.workflow_id} {why}"
    return ToolOutcome.of(call, cut(text, run.input.config.max_observation_chars), success=False)


def _why(exc: ChildWorkflowError) -> tuple[ChildStatus, str]:
    """How a child's workflow closed without a result, in words."""
    cause = exc.cause
    if isinstance(cause, CancelledError):
        return "cancelled", "was cancelled"
    if isinstance(cause, TerminatedError):
        return "failed", "was terminated"  # the reason stays in the child's own history
    if isinstance(cause, TimeoutError):
        return "failed", "timed out"
    if isinstance(cause, ApplicationError):
        return "failed", f"failed: {cause.message}"
    return "failed", f"failed: {cause or exc}"
