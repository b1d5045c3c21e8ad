"""``ScheduledAgentWorkflow``: what a scheduled agent's Temporal Schedule starts.

Check in ``in_progress`` to the agent's cron monitor, run the agent task as a child
``AgentWorkflow`` (id: this workflow's id plus ``-run``, so approvals go to a name the CLI can
work out), then check in ``ok`` with the answer or ``error`` with the error, and the duration.
The monitor does the rest with its own durable timers: a slot that never started is a missed
check-in, a run past its max runtime a timeout. ``AgentWorkflow`` itself knows nothing of
schedules.

A schedule with a ``message`` instead starts no run: the slot sends that message to an existing
thread and waits for the answer in one activity (``send_to_thread``: the ``send`` update, then
polling the thread, heartbeating), bounded by the monitor's max runtime. Whatever goes wrong —
no such thread, a closed one, a turn that failed, no answer in time — is an ``error`` check-in
and a failed slot, never a failed workflow task.

Check-ins are signals to the monitor's workflow (``MonitorWorkflow.checkin``), sent from here as
workflow commands: no activity, and Temporal keeps them while the monitor's worker is down.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    TimeoutError,
    is_cancelled_exception,
)

from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import AgentResult, RunStatus
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.monitors.models import CheckInSignal, CheckInSource, CheckInStatus
from treadle.workflows.monitors.models import monitor_workflow_id as monitor_id
from treadle.workflows.monitors.workflow import MonitorWorkflow
from treadle.workflows.scheduled.models import (
    AgentSchedule,
    ScheduledRunInput,
    ScheduledRunResult,
    SendToThreadInput,
    ThreadAnswer,
    ThreadMessage,
    agent_run_id,
    format_duration,
)

with workflow.unsafe.imports_passed_through():
    # The activity is named by its function object; its module (client calls) is loaded once
    # outside the sandbox, never re-imported per run.
    from treadle.activities.threads import send_to_thread

__all__ = [
    "DEFAULT_ANSWER_TIMEOUT",
    "SEND_HEARTBEAT_TIMEOUT",
    "SEND_RETRY",
    "WORKFLOWS",
    "ScheduledAgentWorkflow",
]

DEFAULT_ANSWER_TIMEOUT = timedelta(days=1)
"""How long a slot waits for a thread's answer without ``--max-runtime``: a thread left waiting
for an approval must not hold the schedule (overlap skip) for ever."""
SEND_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
"""A worker lost while waiting for the answer is noticed after this; the retry does not send
the message again."""
SEND_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
"""Retries of ``send_to_thread`` (the server or the thread's worker did not answer), within the
answer timeout; a thread that cannot take the message fails it non-retryable."""


# A ValidationError in workflow code means bad data (an input another client built without our
# models): fail the run with the message instead of retrying its task forever.
@workflow.defn(failure_exception_types=[ValidationError])
class ScheduledAgentWorkflow:
    """One slot of a scheduled agent: check in, run the agent, check in its outcome."""

    @workflow.run
    async def run(self, input: ScheduledRunInput) -> ScheduledRunResult:
        schedule = input.schedule
        if schedule.message is not None:
            return await _send_message(schedule, schedule.message)
        if schedule.agent is None:  # the model refuses a schedule with neither
            raise ApplicationError(
                f"scheduled agent {schedule.name} has no run to start", non_retryable=True
            )
        agent = schedule.agent
        run_id = agent_run_id(workflow.info().workflow_id)
        started = workflow.now()
        await _check_in(
            schedule, CheckInStatus.IN_PROGRESS, f"agent run {run_id}: {_cut(agent.task)}"
        )
        try:
            result: AgentResult = await workflow.execute_child_workflow(
                AgentWorkflow.run,
                agent,
                id=run_id,
                search_attributes=search_attributes.start_attributes(agent),
                static_summary=f"{schedule.name} · {_cut(agent.task, 180)}",
                static_details=f"scheduled agent {schedule.name} ({schedule.describe()})",
            )
        except BaseException as exc:
            if isinstance(exc, workflow.ContinueAsNewError | GeneratorExit):
                raise  # the worker evicting this run from its cache: nothing happened
            why = "cancelled" if is_cancelled_exception(exc) else _reason(exc)
            await _check_in(schedule, CheckInStatus.ERROR, f"agent run {run_id}: {why}", started)
            if is_cancelled_exception(exc) or not isinstance(exc, ChildWorkflowError):
                raise
            raise _slot_failed(schedule, run_id, why, started) from None
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


async def _send_message(schedule: AgentSchedule, message: ThreadMessage) -> ScheduledRunResult:
    """Send the thread its message and check in its answer (see the module's docstring)."""
    thread_id = message.thread_id
    started = workflow.now()
    timeout = (
        timedelta(minutes=schedule.max_runtime_minutes)
        if schedule.max_runtime_minutes
        else DEFAULT_ANSWER_TIMEOUT
    )
    await _check_in(
        schedule,
        CheckInStatus.IN_PROGRESS,
        f"message to thread {thread_id}: {_cut(message.text)}",
    )
    try:
        request = SendToThreadInput(thread_id=thread_id, text=message.text)
        answer: ThreadAnswer = await workflow.execute_activity(
            send_to_thread,
            request,
            schedule_to_close_timeout=timeout,
            heartbeat_timeout=SEND_HEARTBEAT_TIMEOUT,
            retry_policy=SEND_RETRY,
            summary=f"message to thread {_cut(thread_id, 80)}: {_cut(message.text, 100)}",
        )
    except BaseException as exc:
        if isinstance(exc, workflow.ContinueAsNewError | GeneratorExit):
            raise  # the worker evicting this run from its cache: nothing happened
        cancelled = is_cancelled_exception(exc)
        if cancelled:
            why = "cancelled"
        elif isinstance(exc, ActivityError) and isinstance(exc.cause, TimeoutError):
            why = f"no answer within {format_duration(timeout)}"
        elif isinstance(exc, ActivityError) and isinstance(exc.cause, ApplicationError):
            why = exc.cause.message  # the activity's own words; its causes are RPC details
        else:
            why = _reason(exc)
        await _check_in(
            schedule, CheckInStatus.ERROR, f"message to thread {thread_id}: {why}", started
        )
        if cancelled:
            raise
        # Any other exception too: a failed workflow task would be retried for ever.
        raise _slot_failed(schedule, thread_id, why, started) from None
    outcome = ScheduledRunResult(
        agent_run_id=thread_id,
        status=RunStatus.DONE
        if answer.answered
        else (RunStatus.HALTED if answer.state is State.HALTED else RunStatus.ERROR),
        answer=answer.answer,
        error=None if answer.answered else answer.error,
        duration_seconds=_seconds_since(started),
    )
    if answer.answered:
        await _check_in(schedule, CheckInStatus.OK, answer.answer or "", started)
        return outcome
    why = f"its turn ended the thread {answer.state.value}: {answer.error or 'no answer'}"
    await _check_in(schedule, CheckInStatus.ERROR, f"message to thread {thread_id}: {why}", started)
    raise ApplicationError(
        f"scheduled agent {schedule.name}: {why}",
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


def _slot_failed(
    schedule: AgentSchedule, run_id: str, why: str, started: datetime
) -> ApplicationError:
    """The failure that ends a slot whose run or message raised: ``ScheduledRunFailed``
    (non-retryable, the slot red on the Schedules page) with an ``error`` outcome."""
    failed = ScheduledRunResult(
        agent_run_id=run_id,
        status=RunStatus.ERROR,
        error=why,
        duration_seconds=_seconds_since(started),
    )
    return ApplicationError(
        f"scheduled agent {schedule.name}: {why}",
        failed,
        type="ScheduledRunFailed",
        non_retryable=True,
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
"""Workflow classes the worker registers for scheduled agents."""
