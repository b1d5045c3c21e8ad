"""Scheduled agents on the client side: the Temporal Schedule ``treadle-agent-<name>`` whose
action starts ``ScheduledAgentWorkflow``, and the cron monitor ``monitor-<name>`` that watches
it, created together and idempotently. Each slot starts an agent run, or sends an existing
thread its next message (the thread must run, and be a thread, when the schedule is created).

The schedule's action carries the whole ``AgentSchedule``, so a schedule describes itself: what
runs, when, with which policies and which monitor settings. Creating the same scheduled agent
again changes nothing; creating a different one under an existing name is refused (delete it
first), never a silent overwrite of what an operator may have edited in the Web UI.
"""

from __future__ import annotations

import contextlib
import enum
import secrets
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    WorkflowExecutionStatus,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities.thread_turns import check_thread
from treadle.workflows.base import Frozen
from treadle.workflows.monitors.models import (
    DeleteRequest,
    MonitorConfig,
    MonitorInput,
    monitor_workflow_id,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow
from treadle.workflows.scheduled.models import (
    SCHEDULE_PREFIX,
    AgentSchedule,
    Overlap,
    ScheduledRunInput,
    agent_run_id,
    schedule_id,
)
from treadle.workflows.scheduled.workflow import ScheduledAgentWorkflow

__all__ = [
    "MEMO_SCHEDULED_AGENT",
    "OVERLAP_POLICIES",
    "CreateAction",
    "DeployedSchedule",
    "RecentRun",
    "ScheduleConflict",
    "build_schedule",
    "create",
    "delete",
    "deployed",
    "ensure_monitor",
    "list_deployed",
    "monitor_config",
]

OVERLAP_POLICIES = {
    Overlap.SKIP: ScheduleOverlapPolicy.SKIP,
    Overlap.BUFFER: ScheduleOverlapPolicy.BUFFER_ONE,
    Overlap.ALLOW: ScheduleOverlapPolicy.ALLOW_ALL,
}
"""``--overlap`` as Temporal's policy. BUFFER_ONE rather than BUFFER_ALL: a run that hangs for
a day must not leave a day of paid runs queued behind it."""

MEMO_SCHEDULED_AGENT = "scheduled_agent"
"""Memo key of a scheduled agent's monitor: which schedule it watches, with which settings, so
an existing monitor is reused only when it is this schedule's own."""

CREATED_NOTE = "created with treadle schedule create"
DELETE_TIMEOUT = timedelta(seconds=10)


class ScheduleConflict(Exception):
    """A schedule or monitor of that name exists and is something else; the message says what."""


class CreateAction(enum.StrEnum):
    CREATED = "created"
    UNCHANGED = "unchanged"


class RecentRun(Frozen):
    """One slot the schedule acted on: when it was due, and the workflow it started."""

    scheduled_at: datetime
    started_at: datetime
    workflow_id: str

    @property
    def agent_run_id(self) -> str:
        return agent_run_id(self.workflow_id)


class DeployedSchedule(Frozen):
    """A scheduled agent as its Temporal Schedule holds it (edits in the Web UI included)."""

    schedule: AgentSchedule
    task_queue: str
    paused: bool
    note: str | None
    next_runs: tuple[datetime, ...]
    running: tuple[str, ...]
    """Workflow ids of the slots still running (their agent runs: ``agent_run_id``)."""
    recent: tuple[RecentRun, ...]
    """Newest first."""
    started: int
    skipped_overlap: int
    missed_catchup: int


def build_schedule(plan: AgentSchedule, task_queue: str) -> Schedule:
    """The Temporal Schedule that starts ``ScheduledAgentWorkflow`` for ``plan``."""
    if plan.cron is not None:
        spec = ScheduleSpec(
            cron_expressions=[plan.cron], time_zone_name=plan.timezone, jitter=plan.jitter
        )
    else:
        every = timedelta(minutes=plan.every_minutes or 1)
        spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)], jitter=plan.jitter)
    return Schedule(
        action=ScheduleActionStartWorkflow(
            ScheduledAgentWorkflow.run,
            ScheduledRunInput(schedule=plan),
            # Temporal appends the slot's time: treadle-agent-<name>-2026-01-01T02:00:00Z.
            id=plan.schedule_id,
            task_queue=task_queue,
            static_summary=_summary(plan),
        ),
        spec=spec,
        policy=SchedulePolicy(
            overlap=OVERLAP_POLICIES[plan.overlap],
            catchup_window=plan.catchup_window,
            # A failed run shows in the monitor's health; the next slot still runs.
            pause_on_failure=False,
        ),
        state=ScheduleState(note=CREATED_NOTE),
    )


def _summary(plan: AgentSchedule) -> str:
    if plan.message is not None:
        return (
            f"scheduled message {plan.name} to thread {plan.message.thread_id[:80]}: "
            f"{plan.message.text[:100]}"
        )
    return f"scheduled agent {plan.name}: {plan.task[:150]}"


def monitor_config(plan: AgentSchedule, ping_key: str | None = None) -> MonitorConfig:
    """The monitor that watches ``plan``: the same times, its margin and max runtime."""
    return MonitorConfig(
        slug=plan.name,
        name=f"scheduled agent {plan.name}",
        schedule=plan.monitor_schedule(),
        margin_minutes=plan.margin_minutes,
        max_runtime_minutes=plan.max_runtime_minutes,
        # The secret is made here, by the client: never with randomness in workflow code.
        ping_key=ping_key or f"{plan.name}.{secrets.token_urlsafe(24)}",
    )


def _monitor_marker(plan: AgentSchedule) -> dict[str, Any]:
    return {
        "schedule_id": plan.schedule_id,
        "schedule": plan.describe(),
        "margin_minutes": plan.margin_minutes,
        "max_runtime_minutes": plan.max_runtime_minutes,
    }


async def create(client: Client, plan: AgentSchedule, task_queue: str) -> CreateAction:
    """Create the monitor, then the schedule; ``UNCHANGED`` if both exist as asked.

    ``ScheduleConflict`` when the name is taken by something else; ``ThreadUnavailable``
    (before anything is made) when the plan sends to a thread that does not run or is no
    thread. When Temporal refuses the schedule itself, a monitor made for it is removed
    again, so nothing is left half-made.
    """
    if plan.message is not None:
        await check_thread(client, plan.message.thread_id)
    existing = await deployed(client, plan.name)
    if existing is not None:
        _same_or_conflict(existing, plan, task_queue)
        await ensure_monitor(client, plan, task_queue)  # made again if deleted by hand
        return CreateAction.UNCHANGED
    made_monitor = await ensure_monitor(client, plan, task_queue)
    try:
        await client.create_schedule(plan.schedule_id, build_schedule(plan, task_queue))
    except ScheduleAlreadyRunningError:
        # Another create won the race (or a schedule we could not read is in the way).
        existing = await deployed(client, plan.name)
        if existing is None:
            raise ScheduleConflict(
                f"a schedule {plan.schedule_id!r} exists that is not a scheduled agent"
            ) from None
        _same_or_conflict(existing, plan, task_queue)
        return CreateAction.UNCHANGED
    except BaseException:
        if made_monitor:
            with contextlib.suppress(RPCError):
                await client.get_workflow_handle(monitor_workflow_id(plan.name)).terminate(
                    "its schedule could not be created"
                )
        raise
    return CreateAction.CREATED


def _same_or_conflict(existing: DeployedSchedule, plan: AgentSchedule, task_queue: str) -> None:
    if existing.schedule == plan and existing.task_queue == task_queue:
        return
    what = "task queue" if existing.schedule == plan else "settings"
    raise ScheduleConflict(
        f"scheduled agent {plan.name!r} already exists with other {what}; "
        f"delete it first (treadle schedule delete {plan.name})"
    )


async def ensure_monitor(client: Client, plan: AgentSchedule, task_queue: str) -> bool:
    """Start the plan's monitor; False if its own monitor already runs. Conflict otherwise."""
    config = monitor_config(plan)
    try:
        await client.start_workflow(
            MonitorWorkflow.run,
            MonitorInput(config=config),
            id=monitor_workflow_id(plan.name),
            task_queue=task_queue,
            memo={**config.memo(), MEMO_SCHEDULED_AGENT: _monitor_marker(plan)},
            static_summary=f"cron monitor {plan.name}: {plan.describe()} (scheduled agent)",
            # A deleted monitor's slug may be used again.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        return True
    except WorkflowAlreadyStartedError:
        pass
    description = await client.get_workflow_handle(monitor_workflow_id(plan.name)).describe()
    marker = await description.memo_value(MEMO_SCHEDULED_AGENT, None)
    if marker == _monitor_marker(plan) and description.task_queue == task_queue:
        return False
    raise ScheduleConflict(
        f"a cron monitor {plan.name!r} already exists and watches something else; "
        "pick another name, or delete it (treadle monitors delete "
        f"{plan.name})"
    )


async def deployed(client: Client, name: str) -> DeployedSchedule | None:
    """The scheduled agent ``name`` as deployed; None without such a schedule.

    ``ScheduleConflict`` for a schedule of that id that does not hold a scheduled agent.
    """
    try:
        description = await client.get_schedule_handle(schedule_id(name)).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    found = await _deployed(client, description)
    if found is None:
        raise ScheduleConflict(
            f"schedule {schedule_id(name)!r} exists but does not start a scheduled agent"
        )
    return found


async def list_deployed(client: Client) -> list[DeployedSchedule]:
    """Every scheduled agent of the namespace, by name (schedules that are not are skipped)."""
    found = []
    async for listed in await client.list_schedules():
        if not listed.id.startswith(SCHEDULE_PREFIX):
            continue
        try:
            description = await client.get_schedule_handle(listed.id).describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                continue  # deleted meanwhile (the list is eventually consistent)
            raise
        one = await _deployed(client, description)
        if one is not None:
            found.append(one)
    return sorted(found, key=lambda d: d.schedule.name)


async def _deployed(client: Client, description: ScheduleDescription) -> DeployedSchedule | None:
    action = description.schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow) or len(action.args) != 1:
        return None
    try:
        decoded = await client.data_converter.decode(list(action.args), [ScheduledRunInput])
    except (ValidationError, TypeError, ValueError, RuntimeError):
        return None
    run_input = decoded[0]
    if not isinstance(run_input, ScheduledRunInput):
        return None
    state, info = description.schedule.state, description.info
    recent = [
        RecentRun(
            scheduled_at=result.scheduled_at,
            started_at=result.started_at,
            workflow_id=result.action.workflow_id,
        )
        for result in info.recent_actions
        if isinstance(result.action, ScheduleActionExecutionStartWorkflow)
    ]
    return DeployedSchedule(
        schedule=run_input.schedule,
        task_queue=action.task_queue,
        paused=state.paused,
        note=state.note or None,
        next_runs=() if state.paused else tuple(info.next_action_times),
        running=tuple(
            r.workflow_id
            for r in info.running_actions
            if isinstance(r, ScheduleActionExecutionStartWorkflow)
        ),
        recent=tuple(reversed(recent)),
        started=info.num_actions,
        skipped_overlap=info.num_actions_skipped_overlap,
        missed_catchup=info.num_actions_missed_catchup_window,
    )


async def delete(client: Client, name: str) -> bool:
    """Delete the schedule, then stop its monitor; False if there was no such schedule.

    The monitor completes through its ``delete`` update when its worker answers, else it is
    terminated: a deleted scheduled agent must not go on reporting missed runs. Runs still in
    progress finish on their own (their last check-in then finds no monitor, which they log).
    """
    if await deployed(client, name) is None:
        return False
    try:
        await client.get_schedule_handle(schedule_id(name)).delete()
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
    monitor = client.get_workflow_handle_for(MonitorWorkflow.run, monitor_workflow_id(name))
    try:
        description = await monitor.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return True
        raise
    if description.status is not WorkflowExecutionStatus.RUNNING:
        return True
    marker = await description.memo_value(MEMO_SCHEDULED_AGENT, None)
    if not isinstance(marker, dict) or marker.get("schedule_id") != schedule_id(name):
        return True  # a monitor of the same slug that someone made for something else: theirs
    try:
        await monitor.execute_update(
            MonitorWorkflow.delete,
            DeleteRequest(reason=f"scheduled agent {name} deleted"),
            rpc_timeout=DELETE_TIMEOUT,
        )
    except Exception:  # no worker answered (or the monitor refused): stop it regardless
        with contextlib.suppress(RPCError):
            await monitor.terminate(f"scheduled agent {name} deleted")
    return True
