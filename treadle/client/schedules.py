"""Scheduled agents from the client's side (``AgentClient.schedules``): an agent task, or a
message to a thread, on a Temporal Schedule watched by its own cron monitor: create, list,
show, pause, unpause, trigger, delete.

The schedule and its monitor themselves are made (idempotently, together) by
``treadle.agent_schedules``; this module is what a person or program asks of them, with typed
answers and the client's errors.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client, ScheduleHandle
from temporalio.service import RPCError, RPCStatusCode

from treadle import agent_schedules
from treadle.activities.errors import ThreadUnavailable as ThreadTurnUnavailable
from treadle.agent_schedules import CreateAction, DeployedSchedule
from treadle.client.errors import (
    ScheduleConflict,
    ScheduleNotFound,
    TemporalRefused,
    ThreadUnavailable,
)
from treadle.client.workdirs import make_workspace
from treadle.workflows.agent.messages.models import AgentStatus
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import Frozen
from treadle.workflows.monitors.models import (
    Health,
    MonitorView,
    ViewRequest,
    monitor_workflow_id,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow
from treadle.workflows.scheduled.models import AgentSchedule, agent_run_id

__all__ = [
    "CreateAction",
    "DeployedSchedule",
    "RunningSlot",
    "ScheduleClient",
    "ScheduleCreated",
    "ScheduleListing",
    "ScheduleShown",
]

ANSWER_TIMEOUT = timedelta(seconds=10)
LIST_ANSWER_TIMEOUT = timedelta(seconds=5)

_Call = Callable[[ScheduleHandle], Awaitable[None]]


class ScheduleCreated(Frozen):
    """A scheduled agent created (or found as asked: ``UNCHANGED``), as deployed."""

    action: CreateAction
    deployed: DeployedSchedule


class ScheduleListing(Frozen):
    """One scheduled agent in a list; health is empty when the monitor did not answer."""

    name: str
    schedule: str
    state: str
    task_queue: str
    next_run: datetime | None = None
    last_run: datetime | None = None
    running: int = 0
    health: Health | None = None
    consecutive_failures: int | None = None
    task: str
    """The run's task, or the message sent to ``thread_id``."""
    thread_id: str | None = None
    """The thread each slot sends its message to; None when slots start runs."""


class RunningSlot(Frozen):
    """A slot still running, and the agent run it works through."""

    workflow_id: str
    agent_run_id: str
    """The slot's child run, or the thread it sent its message to."""
    state: str
    """The agent run's state, ``starting`` before it began (``not found``: a thread that is
    gone), ``?`` when it did not answer."""
    status: AgentStatus | None = None


class ScheduleShown(Frozen):
    """One scheduled agent: as deployed, its monitor (``None``: it did not answer), and the
    slots still running."""

    deployed: DeployedSchedule
    monitor: MonitorView | None = None
    running: tuple[RunningSlot, ...] = ()


class ScheduleClient:
    """Scheduled agents of the client's namespace."""

    def __init__(self, client: Client, *, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def create(
        self,
        plan: AgentSchedule,
        *,
        task_queue: str | None = None,
        create_workspace: bool = False,
    ) -> ScheduleCreated:
        """Create the schedule and its monitor (``UNCHANGED`` when both exist as asked);
        ``ScheduleConflict`` when the name is taken by something else, ``ThreadUnavailable``
        when the plan sends to a thread that does not run or is no thread. Runs start on
        ``task_queue`` (default: the client's), where the monitor lives too."""
        if create_workspace and plan.agent is not None:
            await asyncio.to_thread(make_workspace, Path(plan.agent.workspace))
        try:
            action = await agent_schedules.create(
                self._client, plan, task_queue or self._task_queue
            )
            deployed = await agent_schedules.deployed(self._client, plan.name)
        except agent_schedules.ScheduleConflict as exc:
            raise ScheduleConflict(str(exc)) from exc
        except ThreadTurnUnavailable as exc:
            raise ThreadUnavailable(str(exc)) from exc
        if deployed is None:
            raise ScheduleNotFound(f"scheduled agent {plan.name!r} was deleted while being created")
        return ScheduleCreated(action=action, deployed=deployed)

    async def get(self, name: str) -> DeployedSchedule:
        """The scheduled agent ``name`` as its Temporal Schedule holds it (edits in the Web UI
        included); ``ScheduleNotFound`` without one."""
        try:
            deployed = await agent_schedules.deployed(self._client, name)
        except agent_schedules.ScheduleConflict as exc:
            raise ScheduleConflict(str(exc)) from exc
        if deployed is None:
            raise ScheduleNotFound(
                f"no scheduled agent {name!r} in namespace {self._client.namespace}"
            )
        return deployed

    async def list(self) -> builtins.list[ScheduleListing]:
        """Every scheduled agent of the namespace, by name, with its monitor's health."""
        found = await agent_schedules.list_deployed(self._client)
        views = await asyncio.gather(
            *(self.monitor(d.schedule.name, recent=0, timeout=LIST_ANSWER_TIMEOUT) for d in found)
        )
        return [_listing(d, v) for d, v in zip(found, views, strict=True)]

    async def show(self, name: str) -> ScheduleShown:
        """The scheduled agent, its monitor's view (ten recent check-ins) and its running
        slots with their agent runs' status (what waits for approval)."""
        deployed = await self.get(name)
        view, running = await asyncio.gather(
            self.monitor(name, recent=10),
            asyncio.gather(*(self._running(deployed, wid) for wid in deployed.running)),
        )
        return ScheduleShown(deployed=deployed, monitor=view, running=tuple(running))

    async def monitor(
        self, name: str, *, recent: int = 10, timeout: timedelta = ANSWER_TIMEOUT
    ) -> MonitorView | None:
        """The scheduled agent's monitor's view; ``None`` when it is gone or no worker answers."""
        handle = self._client.get_workflow_handle_for(
            MonitorWorkflow.run, monitor_workflow_id(name)
        )
        try:
            view: MonitorView = await handle.query(
                MonitorWorkflow.view,
                ViewRequest(recent=recent, as_of=datetime.now(UTC)),
                rpc_timeout=timeout,
            )
        except RPCError:
            return None
        return view

    async def pause(self, name: str, note: str | None = None) -> DeployedSchedule:
        """Pause the schedule (its monitor keeps watching: it reports the runs it misses)."""
        deployed = await self.get(name)
        await self._schedule_call(
            deployed, lambda h: h.pause(note=note or "paused with treadle schedule pause")
        )
        return deployed

    async def unpause(self, name: str, note: str | None = None) -> DeployedSchedule:
        """Unpause the schedule."""
        deployed = await self.get(name)
        await self._schedule_call(
            deployed, lambda h: h.unpause(note=note or "unpaused with treadle schedule unpause")
        )
        return deployed

    async def trigger(self, name: str) -> DeployedSchedule:
        """Start a slot now (the schedule's overlap policy applies)."""
        deployed = await self.get(name)
        await self._schedule_call(deployed, lambda h: h.trigger())
        return deployed

    async def delete(self, name: str) -> None:
        """Delete the schedule, then stop its monitor (runs in progress finish on their own);
        ``ScheduleNotFound`` when there is none."""
        try:
            deleted = await agent_schedules.delete(self._client, name)
        except agent_schedules.ScheduleConflict as exc:
            raise ScheduleConflict(str(exc)) from exc
        if not deleted:
            raise ScheduleNotFound(
                f"no scheduled agent {name!r} in namespace {self._client.namespace}"
            )

    async def _schedule_call(self, deployed: DeployedSchedule, call: _Call) -> None:
        handle = self._client.get_schedule_handle(deployed.schedule.schedule_id)
        try:
            await call(handle)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise ScheduleNotFound(
                    f"no scheduled agent {deployed.schedule.name!r} in namespace "
                    f"{self._client.namespace}"
                ) from exc
            raise TemporalRefused(f"Temporal refused the request: {exc.message}") from exc

    async def _running(self, deployed: DeployedSchedule, workflow_id: str) -> RunningSlot:
        """A running slot's agent run (its child run, or the schedule's thread) and its state."""
        message = deployed.schedule.message
        run_id = agent_run_id(workflow_id) if message is None else message.thread_id
        handle = self._client.get_workflow_handle(run_id)
        try:
            status: AgentStatus = await handle.query(
                AgentWorkflow.state, rpc_timeout=LIST_ANSWER_TIMEOUT
            )
        except RPCError as exc:
            state = "?"
            if exc.status is RPCStatusCode.NOT_FOUND:
                state = "starting" if run_id == agent_run_id(workflow_id) else "not found"
            return RunningSlot(workflow_id=workflow_id, agent_run_id=run_id, state=state)
        return RunningSlot(
            workflow_id=workflow_id, agent_run_id=run_id, state=status.state.value, status=status
        )


def _listing(deployed: DeployedSchedule, view: MonitorView | None) -> ScheduleListing:
    plan = deployed.schedule
    return ScheduleListing(
        name=plan.name,
        schedule=plan.describe(),
        state="paused" if deployed.paused else "active",
        task_queue=deployed.task_queue,
        next_run=deployed.next_runs[0] if deployed.next_runs else None,
        last_run=deployed.recent[0].started_at if deployed.recent else None,
        running=len(deployed.running),
        health=None if view is None else view.health,
        consecutive_failures=None if view is None else view.consecutive_failures,
        task=plan.task,
        thread_id=None if plan.message is None else plan.message.thread_id,
    )
