"""``ScheduledAgentWorkflow``: what a scheduled agent's Temporal Schedule starts.

Check in ``in_progress`` to the agent's cron monitor, run the agent task as a child
``AgentWorkflow`` (id: this workflow's id plus ``-run``, so approvals go to a name the CLI can
work out), then check in ``ok`` with the answer or ``error`` with the error, and the duration.
The monitor does the rest with its own durable timers: a slot that never started is a missed
check-in, a run past its max runtime a timeout. ``AgentWorkflow`` itself knows nothing of
schedules.

Check-ins are signals to the monitor's workflow (``MonitorWorkflow.checkin``), sent from here as
workflow commands: no activity, and Temporal keeps them while the monitor's worker is down.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    is_cancelled_exception,
)

from workflows.agent.models import AgentResult, RunStatus
from workflows.agent.workflow import AgentWorkflow
from workflows.monitors.models import CheckInSignal, CheckInSource, CheckInStatus
from workflows.monitors.models import monitor_workflow_id as monitor_id
from workflows.monitors.workflow import MonitorWorkflow
from workflows.scheduled.models import (
    AgentSchedule,
    ScheduledRunInput,
    ScheduledRunResult,
    agent_run_id,
)

__all__ = ["WORKFLOWS", "ScheduledAgentWorkflow"]


# A ValidationError in workflow code means bad data (an input another client built without our
# models): fail the run with the message instead of retrying its task forever.
@workflow.defn(failure_exception_types=[ValidationError])
class ScheduledAgentWorkflow:
    """One slot of a scheduled agent: check in, run the agent, check in its outcome."""

    @workflow.run
    async def run(self, input: ScheduledRunInput) -> ScheduledRunResult:
        schedule = input.schedule
        run_id = agent_run_id(workflow.info().workflow_id)
        started = workflow.now()
        await _check_in(
            schedule, CheckInStatus.IN_PROGRESS, f"agent run {run_id}: {_cut(schedule.agent.task)}"
        )
        try:
            result: AgentResult = await workflow.execute_child_workflow(
                AgentWorkflow.run,
                schedule.agent,
                id=run_id,
                static_summary=f"{schedule.name} · {_cut(schedule.agent.task, 180)}",
                static_details=f"scheduled agent {schedule.name} ({schedule.describe()})",
            )
        except BaseException as exc:
            if isinstance(exc, workflow.ContinueAsNewError | GeneratorExit):
                raise  # the worker evicting this run from its cache: nothing happened
            why = "cancelled" if is_cancelled_exception(exc) else _reason(exc)
            await _check_in(schedule, CheckInStatus.ERROR, f"agent run {run_id}: {why}", started)
            if is_cancelled_exception(exc) or not isinstance(exc, ChildWorkflowError):
                raise
            failed = ScheduledRunResult(
                agent_run_id=run_id,
                status=RunStatus.ERROR,
                error=why,
                duration_seconds=_seconds_since(started),
            )
            raise ApplicationError(
                f"scheduled agent {schedule.name}: {why}",
                failed,
                type="ScheduledRunFailed",
                non_retryable=True,
            ) from None
        outcome = ScheduledRunResult(
            agent_run_id=run_id,
            status=result.status,
            answer=result.answer,
            error=result.error,
            duration_seconds=_seconds_since(started),
        )
        if result.status is RunStatus.DONE:
            await _check_in(schedule, CheckInStatus.OK, result.answer or "", started)
            return outcome
        why = f"{result.status.value}: {result.error or 'no answer'}"
        await _check_in(schedule, CheckInStatus.ERROR, why, started)
        # Failing the workflow (not its task) marks the slot red on the Schedules page.
        raise ApplicationError(
            f"scheduled agent {schedule.name}: run {run_id} ended {why}",
            outcome,
            type="ScheduledRunFailed",
            non_retryable=True,
        )


async def _check_in(
    schedule: AgentSchedule, status: CheckInStatus, output: str, started: datetime | None = None
) -> None:
    """Signal the monitor; a monitor that is gone (deleted by hand) does not stop the run."""
    body = CheckInSignal(
        status=status,
        source=CheckInSource.SDK,
        output=output,
        duration_seconds=None if started is None else _seconds_since(started),
        sent_at=workflow.now(),
    )
    monitor = workflow.get_external_workflow_handle_for(
        MonitorWorkflow.run, monitor_id(schedule.name)
    )
    try:
        await monitor.signal(MonitorWorkflow.checkin, body)
    except FailureError as exc:
        if is_cancelled_exception(exc):
            raise
        workflow.logger.warning(
            "scheduled.checkin.failed",
            extra={"schedule": schedule.name, "status": status.value, "why": str(exc)},
        )


def _seconds_since(started: datetime) -> float:
    return max((workflow.now() - started).total_seconds(), 0.0)


def _reason(exc: BaseException) -> str:
    """The innermost failure's message: why the agent run failed, not that a child did."""
    innermost: BaseException = exc
    while isinstance(innermost, FailureError) and innermost.cause is not None:
        innermost = innermost.cause
    return getattr(innermost, "message", None) or str(innermost) or type(innermost).__name__


def _cut(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


WORKFLOWS: list[type[Any]] = [ScheduledAgentWorkflow]
"""Workflow classes worker.py registers for scheduled agents."""
