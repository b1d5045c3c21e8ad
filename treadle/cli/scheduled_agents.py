"""`starter.py schedule ...`: scheduled agents, an agent task on a Temporal Schedule watched by
its own cron monitor.

    python starter.py schedule create NAME TASK --cron EXPR [--timezone TZ] | --every DURATION
                      [run options: --model --workspace --config ...] [--overlap skip|buffer|allow]
                      [--catchup-window 5m] [--jitter 0s] [--margin 5] [--max-runtime MINUTES]
    python starter.py schedule create NAME MESSAGE --thread THREAD_ID (--cron ... | --every ...)
                      [--overlap ...] [--catchup-window ...] [--jitter ...] [--margin ...]
                      [--max-runtime MINUTES]   # each slot: MESSAGE to the thread, its answer
    python starter.py schedule list [--json]
    python starter.py schedule show NAME [--json]
    python starter.py schedule pause|unpause NAME [--note TEXT]
    python starter.py schedule trigger NAME
    python starter.py schedule delete NAME

The schedule (``treadle-agent-NAME``, on the Web UI's Schedules page) starts its runs on
starter.py's ``--task-queue``, where the monitor (``monitor-NAME``, see ``monitors show NAME``)
lives too; a worker must poll it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.errors import ThreadUnavailable
from treadle import agent_schedules
from treadle.agent_schedules import DeployedSchedule, ScheduleConflict
from treadle.cli import shell
from treadle.cli.exits import UsageError
from treadle.cli.monitors import format_view
from treadle.cli.tables import table
from treadle.cli.workspaces import make_workspace
from workflows import cron
from workflows.agent.events import approval_commands
from workflows.agent.models import TASK_QUEUE, AgentInput, AgentStatus
from workflows.agent.workflow import AgentWorkflow
from workflows.base import Frozen, describe_errors
from workflows.monitors.models import (
    Health,
    MonitorView,
    ViewRequest,
    check_slug,
    monitor_workflow_id,
)
from workflows.monitors.workflow import MonitorWorkflow
from workflows.scheduled.models import (
    DEFAULT_CATCHUP_WINDOW,
    DEFAULT_MARGIN_MINUTES,
    MIN_CATCHUP_WINDOW,
    AgentSchedule,
    Overlap,
    ThreadMessage,
    agent_run_id,
    format_duration,
    parse_duration,
    schedule_id,
)

__all__ = ["RunningSlot", "ScheduleListing", "format_schedule", "register"]

ANSWER_TIMEOUT = timedelta(seconds=10)
LIST_ANSWER_TIMEOUT = timedelta(seconds=5)


class Planned(Protocol):
    """What starter.py's ``build_input`` returns: the run, and whether to make its workspace."""

    @property
    def input(self) -> AgentInput: ...

    @property
    def create_workspace(self) -> bool: ...


AddRunOptions = Callable[[argparse.ArgumentParser], None]
BuildInput = Callable[[argparse.Namespace, str], Planned]


def register(subparsers: Any, *, add_run_options: AddRunOptions, build_input: BuildInput) -> None:
    """Add the `schedule` command. ``add_run_options`` and ``build_input`` are starter.py's, so
    a scheduled run takes exactly the options `run` takes and is checked the same way."""
    schedule = subparsers.add_parser(
        "schedule",
        help="scheduled agents: create, list, show, pause, unpause, trigger, delete",
        description=__doc__.split("\n\n")[0],
    )
    sub = schedule.add_subparsers(dest="schedule_command", required=True, metavar="COMMAND")

    create = sub.add_parser(
        "create", help="schedule an agent task and the cron monitor that watches it"
    )
    create.add_argument("name", help="3-50 of a-z 0-9 - _, a letter first (also the monitor's)")
    add_run_options(create)
    create.add_argument(
        "--thread",
        metavar="THREAD_ID",
        help="send TASK as the next message to this running thread each slot, and wait for its "
        "answer, instead of starting a run (the thread keeps its own model, workspace and "
        "config: the run options are refused)",
    )
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="5-field cron expression, e.g. '0 2 * * *'")
    when.add_argument(
        "--every", metavar="DURATION", help="a run every DURATION, whole minutes: 15m, 2h, 1d"
    )
    create.add_argument("--timezone", metavar="TZ", help="IANA time zone of --cron (default UTC)")
    create.add_argument(
        "--overlap",
        choices=[o.value for o in Overlap],
        default=Overlap.SKIP.value,
        help="a slot that comes while a run is still going: skip it (default), buffer it "
        "until the run ends, or allow it to run alongside",
    )
    create.add_argument(
        "--catchup-window",
        metavar="DURATION",
        default=format_duration(DEFAULT_CATCHUP_WINDOW),
        help="after the server was down, run slots missed by less than this "
        f"(default {format_duration(DEFAULT_CATCHUP_WINDOW)}; at least 10s)",
    )
    create.add_argument(
        "--jitter",
        metavar="DURATION",
        default="0s",
        help="start each run up to this much after its slot, at random (default 0s)",
    )
    create.add_argument(
        "--margin",
        type=int,
        default=DEFAULT_MARGIN_MINUTES,
        metavar="MINUTES",
        help=f"how late a run may start before the monitor says missed "
        f"(default {DEFAULT_MARGIN_MINUTES})",
    )
    create.add_argument(
        "--max-runtime",
        type=int,
        metavar="MINUTES",
        help="a run in progress longer than this is a timeout in the monitor (default: none)",
    )
    create.add_argument("--json", action="store_true")
    run_defaults = _run_defaults(add_run_options)
    create.set_defaults(
        handler=cmd_create, check=lambda args: _check_create(args, build_input, run_defaults)
    )

    listing = sub.add_parser("list", help="scheduled agents with state, next run and health")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_list)

    show = sub.add_parser(
        "show", help="schedule, monitor health and check-ins, runs waiting for approval"
    )
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_show)

    for name, text in (
        ("pause", "pause the schedule (the monitor keeps watching: it reports missed runs)"),
        ("unpause", "unpause the schedule"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("name")
        p.add_argument("--note", help="why (shown by schedule show and in the Web UI)")
        p.set_defaults(handler=cmd_pause)

    trigger = sub.add_parser("trigger", help="start a run now (the overlap policy applies)")
    trigger.add_argument("name")
    trigger.set_defaults(handler=cmd_trigger)

    delete = sub.add_parser("delete", help="delete the schedule and its monitor")
    delete.add_argument("name")
    delete.set_defaults(handler=cmd_delete)


# --------------------------------------------------------------------------------------------
# Checking `create` before anything connects
# --------------------------------------------------------------------------------------------


def _run_defaults(add_run_options: AddRunOptions) -> dict[str, Any]:
    """The run options' defaults, TASK aside: what `create --thread` must be left with."""
    probe = argparse.ArgumentParser(add_help=False)
    add_run_options(probe)
    defaults = vars(probe.parse_args(["TASK"]))
    defaults.pop("task")
    return defaults


def _check_create(
    args: argparse.Namespace, build_input: BuildInput, run_defaults: dict[str, Any]
) -> None:
    """Turn `create`'s options into an ``AgentSchedule`` (``args.plan``), or a UsageError."""
    name = _name(args.name)
    if args.thread is not None:
        given = [
            "--" + dest.replace("_", "-")
            for dest, default in run_defaults.items()
            if getattr(args, dest) != default
        ]
        if given:
            raise UsageError(
                f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'} with a new run, not "
                "with --thread: the thread keeps the model, workspace and config it was "
                "started with"
            )
    try:
        if args.cron is not None:
            expression = cron.check_cron(args.cron)
            timezone = cron.check_timezone(args.timezone or "UTC").key
            every_minutes = None
        else:
            if args.timezone is not None:
                raise UsageError("--timezone goes with --cron; an interval needs none")
            expression, timezone = None, "UTC"
            every_minutes = _whole_minutes(args.every)
        catchup = parse_duration(args.catchup_window)
        jitter = parse_duration(args.jitter)
        if catchup < MIN_CATCHUP_WINDOW:
            raise ValueError(
                f"--catchup-window {args.catchup_window}: at least "
                f"{format_duration(MIN_CATCHUP_WINDOW)} (Temporal's minimum)"
            )
    except ValueError as exc:  # cron.ScheduleError, a bad duration
        raise UsageError(str(exc)) from exc
    target: dict[str, Any]
    if args.thread is not None:
        try:
            target = {"message": ThreadMessage(thread_id=args.thread, text=args.task)}
        except ValidationError as exc:
            raise UsageError(f"invalid message: {_options(exc)}") from exc
        args.make_workspace = False
    else:
        planned = build_input(args, schedule_id(name))
        target = {"agent": planned.input}
        args.make_workspace = planned.create_workspace
    try:
        args.plan = AgentSchedule(
            name=name,
            cron=expression,
            timezone=timezone,
            every_minutes=every_minutes,
            overlap=Overlap(args.overlap),
            catchup_window_seconds=int(catchup.total_seconds()),
            jitter_seconds=int(jitter.total_seconds()),
            margin_minutes=args.margin,
            max_runtime_minutes=args.max_runtime,
            **target,
        )
    except ValidationError as exc:
        raise UsageError(f"invalid schedule: {_options(exc)}") from exc


_FLAGS = {
    "catchup_window_seconds": "--catchup-window",
    "jitter_seconds": "--jitter",
    "margin_minutes": "--margin",
    "max_runtime_minutes": "--max-runtime",
    "every_minutes": "--every",
    "thread_id": "--thread",
    "text": "TASK",
}


def _options(exc: ValidationError) -> str:
    """The first problem, named by the flag that caused it."""
    text = describe_errors(exc, root=None, limit=1)
    for field, flag in _FLAGS.items():
        text = text.replace(f"{field}:", f"{flag}:", 1)
    return text


def _whole_minutes(text: str) -> int:
    seconds = int(parse_duration(text).total_seconds())
    if seconds < 60 or seconds % 60:
        raise ValueError(
            f"--every {text}: use whole minutes, at least 1m (the schedule's monitor counts "
            "in minutes)"
        )
    return seconds // 60


def _name(name: str) -> str:
    try:
        return check_slug(name)
    except ValueError as exc:
        raise UsageError(str(exc).replace("slug", "name", 1)) from exc


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


async def cmd_create(client: Client, args: argparse.Namespace) -> int:
    plan: AgentSchedule = args.plan
    if args.make_workspace and plan.agent is not None:
        await asyncio.to_thread(make_workspace, Path(plan.agent.workspace))
    try:
        action = await agent_schedules.create(client, plan, args.task_queue)
        deployed = await agent_schedules.deployed(client, plan.name)
    except (ScheduleConflict, ThreadUnavailable) as exc:
        raise UsageError(str(exc)) from exc
    if deployed is None:
        raise UsageError(f"scheduled agent {plan.name!r} was deleted while being created")
    if args.json:
        _print_json(
            {
                "name": plan.name,
                "action": action.value,
                "schedule_id": plan.schedule_id,
                "monitor": monitor_workflow_id(plan.name),
                "task_queue": deployed.task_queue,
                "thread_id": None if plan.message is None else plan.message.thread_id,
                "next_runs": [t.isoformat() for t in deployed.next_runs],
            }
        )
        return 0
    head = "Created" if action is agent_schedules.CreateAction.CREATED else "Unchanged:"
    if plan.message is not None:
        target = f"  thread:    {plan.message.thread_id} (each slot sends it TASK, and waits)\n"
    else:
        target = f"  workspace: {plan.agent.workspace if plan.agent else '-'}\n"
    print(
        f"{head} scheduled agent {plan.name}: {plan.describe()}\n"
        f"  schedule:  {plan.schedule_id} ({_policies(plan)}), task queue {deployed.task_queue}\n"
        f"  monitor:   {plan.name} ({_monitor_settings(plan)})\n"
        f"{target}"
        f"  next runs: {_times(deployed.next_runs[:3])}\n"
        f"Show it:  {shell.starter('schedule', 'show', plan.name, **_where(client, args))}"
    )
    return 0


class ScheduleListing(Frozen):
    """One row of `schedule list`; health is empty when the monitor did not answer."""

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


async def cmd_list(client: Client, args: argparse.Namespace) -> int:
    found = await agent_schedules.list_deployed(client)
    views = await asyncio.gather(
        *(_view(client, d.schedule.name, LIST_ANSWER_TIMEOUT, 0) for d in found)
    )
    listings = [_listing(d, v) for d, v in zip(found, views, strict=True)]
    if args.json:
        _print_json([row.model_dump(mode="json") for row in listings])
        return 0
    if not listings:
        print(f"No scheduled agents in namespace {client.namespace}.")
        return 0
    rows = [("NAME", "SCHEDULE", "STATE", "NEXT RUN", "LAST RUN", "HEALTH", "TASK")]
    for r in listings:
        health = "? (no answer)" if r.health is None else r.health.value
        if r.consecutive_failures:
            health += f" ({r.consecutive_failures} failed in a row)"
        task = r.task if len(r.task) <= 50 else r.task[:49] + "…"
        if r.thread_id is not None:
            task = f"to thread {r.thread_id}: {task}"
        state = r.state + (f", {r.running} running" if r.running else "")
        rows.append((r.name, r.schedule, state, _time(r.next_run), _time(r.last_run), health, task))
    print(table(rows))
    return 0


class RunningSlot(Frozen):
    """A slot still running, as `schedule show` reports it."""

    workflow_id: str
    agent_run_id: str
    """The slot's child run, or the thread it sent its message to."""
    state: str
    """The agent run's state, ``starting`` before it began (``not found``: a thread that is
    gone), ``?`` when it did not answer."""
    status: AgentStatus | None = None
    commands: tuple[str, ...] = ()
    """Approve / reject / modify commands for each pending call, spelled for this shell."""


async def cmd_show(client: Client, args: argparse.Namespace) -> int:
    deployed = await _deployed(client, args.name)
    view, running = await asyncio.gather(
        _view(client, deployed.schedule.name, ANSWER_TIMEOUT, 10),
        asyncio.gather(
            *(
                _running(client, wid, _run_of(deployed, wid), _connection_options(client, args))
                for wid in deployed.running
            )
        ),
    )
    if args.json:
        _print_json(
            {
                "deployed": deployed.model_dump(mode="json"),
                "monitor": None if view is None else view.model_dump(mode="json"),
                "running": [slot.model_dump(mode="json") for slot in running],
            }
        )
        return 0
    print(format_schedule(deployed, view, list(running)))
    return 0


async def cmd_pause(client: Client, args: argparse.Namespace) -> int:
    deployed = await _deployed(client, args.name)
    handle = client.get_schedule_handle(deployed.schedule.schedule_id)
    if args.schedule_command == "pause":
        note = args.note or "paused with starter.py schedule pause"
        await handle.pause(note=note)
        print(
            f"Paused scheduled agent {args.name} ({note}). Its monitor keeps watching and "
            f"reports missed runs; to silence it too: "
            f"{shell.starter('monitors', 'pause', args.name, **_where(client, args))}"
        )
    else:
        note = args.note or "unpaused with starter.py schedule unpause"
        await handle.unpause(note=note)
        print(f"Unpaused scheduled agent {args.name} ({note}).")
    return 0


async def cmd_trigger(client: Client, args: argparse.Namespace) -> int:
    deployed = await _deployed(client, args.name)
    await client.get_schedule_handle(deployed.schedule.schedule_id).trigger()
    print(
        f"Triggered scheduled agent {args.name} (overlap {deployed.schedule.overlap.value}"
        + (
            ": skipped if a run is still going)"
            if deployed.schedule.overlap is Overlap.SKIP
            else ")"
        )
        + f"; follow it: {shell.starter('schedule', 'show', args.name, **_where(client, args))}"
    )
    return 0


async def cmd_delete(client: Client, args: argparse.Namespace) -> int:
    _name(args.name)
    try:
        deleted = await agent_schedules.delete(client, args.name)
    except ScheduleConflict as exc:
        raise UsageError(str(exc)) from exc
    if not deleted:
        raise UsageError(f"no scheduled agent {args.name!r} in namespace {client.namespace}")
    print(f"Deleted scheduled agent {args.name} and its monitor.")
    return 0


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


async def _deployed(client: Client, name: str) -> DeployedSchedule:
    _name(name)
    try:
        deployed = await agent_schedules.deployed(client, name)
    except ScheduleConflict as exc:
        raise UsageError(str(exc)) from exc
    if deployed is None:
        raise UsageError(
            f"no scheduled agent {name!r} in namespace {client.namespace} "
            "(see: starter.py schedule list)"
        )
    return deployed


async def _view(client: Client, name: str, timeout: timedelta, recent: int) -> MonitorView | None:
    """The monitor's view; None when it is gone or no worker answers."""
    handle = client.get_workflow_handle_for(MonitorWorkflow.run, monitor_workflow_id(name))
    try:
        view: MonitorView = await handle.query(
            MonitorWorkflow.view,
            ViewRequest(recent=recent, as_of=datetime.now(UTC)),
            rpc_timeout=timeout,
        )
    except RPCError:
        return None
    return view


def _run_of(deployed: DeployedSchedule, workflow_id: str) -> str:
    """The agent run a slot works through: its child run, or the schedule's thread."""
    message = deployed.schedule.message
    return agent_run_id(workflow_id) if message is None else message.thread_id


async def _running(
    client: Client, workflow_id: str, run_id: str, connection: list[str]
) -> RunningSlot:
    """A running slot's agent run (``run_id``): its state, and the commands for its pending
    approvals (with ``connection``'s options, so they reach the same server)."""
    handle = client.get_workflow_handle(run_id)
    try:
        status: AgentStatus = await handle.query(
            AgentWorkflow.state, rpc_timeout=LIST_ANSWER_TIMEOUT
        )
    except RPCError as exc:
        state = "?"
        if exc.status is RPCStatusCode.NOT_FOUND:
            state = "starting" if run_id == agent_run_id(workflow_id) else "not found"
        return RunningSlot(workflow_id=workflow_id, agent_run_id=run_id, state=state)
    commands = tuple(
        shell.connected(shell.runnable(command), connection)
        for pending in status.pending_approvals
        if pending.decision is None
        for command in approval_commands(run_id, pending.call_id)
    )
    return RunningSlot(
        workflow_id=workflow_id,
        agent_run_id=run_id,
        state=status.state.value,
        status=status,
        commands=commands,
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
        f"  schedule:    {plan.describe()}; {_policies(plan)}",
        f"  state:       {state}",
        f"  task queue:  {deployed.task_queue}",
        f"  next runs:   {_times(deployed.next_runs[:3])}",
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
            rows.append((_time(recent.scheduled_at), _time(recent.started_at), run))
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


def _policies(plan: AgentSchedule) -> str:
    return (
        f"overlap {plan.overlap.value}, catch-up window {format_duration(plan.catchup_window)}, "
        f"jitter {format_duration(plan.jitter)}"
    )


def _monitor_settings(plan: AgentSchedule) -> str:
    runtime = (
        f"max runtime {plan.max_runtime_minutes} min"
        if plan.max_runtime_minutes
        else "no max runtime"
    )
    return f"margin {plan.margin_minutes} min, {runtime}"


def _where(client: Client, args: argparse.Namespace) -> dict[str, str | None]:
    """Connection options for printed commands, so they reach the same server and queue: the
    profile the command was given, and what was given beside it (or, without a profile, the
    namespace it reached)."""
    profile = getattr(args, "profile", None)
    return {
        "profile": profile,
        "address": args.address,
        "namespace": args.namespace if profile else client.namespace,
        "task_queue": None if args.task_queue == TASK_QUEUE else args.task_queue,
    }


def _connection_options(client: Client, args: argparse.Namespace) -> list[str]:
    """``_where`` as the options of a printed approval command (task queue aside)."""
    where = _where(client, args)
    return shell.connection_options(where["address"], where["namespace"], where["profile"])


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _times(values: tuple[datetime, ...]) -> str:
    return ", ".join(_time(v) for v in values) or "-"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))
