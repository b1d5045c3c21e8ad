"""What `schedule list` and `schedule show` report: a row per scheduled agent, its running
slots, and `schedule show`'s text."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from treadle.cli.monitors import format_view
from treadle.cli.tables import table
from treadle.client import RunningSlot as SlotRun
from treadle.client import ScheduleListing
from treadle.client.schedules import DeployedSchedule
from treadle.workflows.monitors.models import MonitorView
from treadle.workflows.scheduled.models import AgentSchedule, format_duration

__all__ = [
    "RunningSlot",
    "ScheduleListing",
    "format_listings",
    "format_schedule",
    "format_time",
    "format_times",
    "monitor_settings",
    "policies",
]


class RunningSlot(SlotRun):
    """A slot still running, as `schedule show` reports it: with the commands that decide
    its agent run's pending approvals."""

    commands: tuple[str, ...] = ()
    """Approve / reject / modify commands for each pending call, spelled for this shell."""


def format_listings(listings: list[ScheduleListing]) -> str:
    """`schedule list` as a table."""
    rows = [("NAME", "SCHEDULE", "STATE", "NEXT RUN", "LAST RUN", "HEALTH", "TASK")]
    for r in listings:
        health = "? (no answer)" if r.health is None else r.health.value
        if r.consecutive_failures:
            health += f" ({r.consecutive_failures} failed in a row)"
        task = r.task if len(r.task) <= 50 else r.task[:49] + "…"
        if r.thread_id is not None:
            task = f"to thread {r.thread_id}: {task}"
        state = r.state + (f", {r.running} running" if r.running else "")
        rows.append(
            (
                r.name,
                r.schedule,
                state,
                format_time(r.next_run),
                format_time(r.last_run),
                health,
                task,
            )
        )
    return table(rows)


def format_schedule(
    deployed: DeployedSchedule, view: MonitorView | None, running: list[RunningSlot]
) -> str:
    """`schedule show` as text: the schedule, its running slots (with approval commands), its
    recent slots, then the monitor as `monitors show` prints it."""
    plan = deployed.schedule
    state = "paused" if deployed.paused else "active"
    if deployed.paused and deployed.note:
        state += f" ({deployed.note})"
    lines = [
        *_target_lines(plan),
        f"  schedule:    {plan.describe()}; {policies(plan)}",
        f"  state:       {state}",
        f"  task queue:  {deployed.task_queue}",
        f"  next runs:   {format_times(deployed.next_runs[:3])}",
        f"  slots:       {deployed.started} started, {deployed.skipped_overlap} skipped "
        f"(overlap), {deployed.missed_catchup} missed (catch-up window)",
    ]
    if view is None:
        lines.append(f"  monitor:     {plan.name} did not answer; is a worker polling its queue?")
    for slot in running:
        step = f", step {slot.status.step}" if slot.status is not None else ""
        lines += ["", f"running: {slot.agent_run_id} ({slot.state}{step})"]
        if slot.status is not None:
            for pending in slot.status.pending_approvals:
                if pending.decision is None:
                    arguments = json.dumps(pending.arguments)[:200]
                    lines.append(f"  waiting for approval: {pending.tool} {arguments}")
        lines += [f"    {command}" for command in slot.commands]
    if deployed.recent:
        # A slot that sends to a thread starts no run: its own workflow holds the answer.
        column = "AGENT RUN" if plan.message is None else "SLOT"
        rows = [("SCHEDULED", "STARTED", column)]
        for recent in deployed.recent[:5]:
            run = recent.agent_run_id if plan.message is None else recent.workflow_id
            rows.append((format_time(recent.scheduled_at), format_time(recent.started_at), run))
        lines += ["", table(rows)]
    if view is not None:
        lines += ["", "monitor " + format_view(view)]
    return "\n".join(lines)


def _target_lines(plan: AgentSchedule) -> list[str]:
    """`schedule show`'s head: what each slot does."""
    if plan.message is not None:
        return [
            f"{plan.name}: scheduled message to thread {plan.message.thread_id}",
            f"  message:     {plan.message.text}",
            f"  thread:      {plan.message.thread_id} (its own model, workspace and config)",
        ]
    lines = [f"{plan.name}: scheduled agent", f"  task:        {plan.task}"]
    if plan.agent is not None:
        lines += [
            f"  model:       {plan.agent.model} (task type {plan.agent.task_type})",
            f"  workspace:   {plan.agent.workspace}",
        ]
    return lines


def policies(plan: AgentSchedule) -> str:
    return (
        f"overlap {plan.overlap.value}, catch-up window {format_duration(plan.catchup_window)}, "
        f"jitter {format_duration(plan.jitter)}"
    )


def monitor_settings(plan: AgentSchedule) -> str:
    runtime = (
        f"max runtime {plan.max_runtime_minutes} min"
        if plan.max_runtime_minutes
        else "no max runtime"
    )
    return f"margin {plan.margin_minutes} min, {runtime}"


def format_time(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_times(values: tuple[datetime, ...]) -> str:
    return ", ".join(format_time(v) for v in values) or "-"
