"""`treadle schedule ...`: scheduled agents, an agent task on a Temporal Schedule watched by
its own cron monitor.

    treadle schedule create NAME TASK --cron EXPR [--timezone TZ] | --every DURATION
                      [run options: --model --workspace --config ...] [--overlap skip|buffer|allow]
                      [--catchup-window 5m] [--jitter 0s] [--margin 5] [--max-runtime MINUTES]
    treadle schedule create NAME MESSAGE --thread THREAD_ID (--cron ... | --every ...)
                      [--overlap ...] [--catchup-window ...] [--jitter ...] [--margin ...]
                      [--max-runtime MINUTES]   # each slot: MESSAGE to the thread, its answer
    treadle schedule list [--json]
    treadle schedule show NAME [--json]
    treadle schedule pause|unpause NAME [--note TEXT]
    treadle schedule trigger NAME
    treadle schedule delete NAME

The schedule (``treadle-agent-NAME``, on the Web UI's Schedules page) starts its runs on
the command line's ``--task-queue``, where the monitor (``monitor-NAME``, see ``monitors show
NAME``) lives too; a worker must poll it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from treadle import agent_schedules
from treadle.activities.errors import ThreadUnavailable
from treadle.agent_schedules import DeployedSchedule, ScheduleConflict
from treadle.cli import shell
from treadle.cli.exits import UsageError
from treadle.cli.scheduled_agents.plan import (
    AddRunOptions,
    BuildInput,
    check_create,
    check_name,
    run_defaults,
)
from treadle.cli.scheduled_agents.report import (
    RunningSlot,
    format_listings,
    format_schedule,
    format_times,
    listing_of,
    monitor_settings,
    policies,
)
from treadle.cli.workspaces import make_workspace
from treadle.workflows.agent.messages.events import approval_commands
from treadle.workflows.agent.messages.models import TASK_QUEUE, AgentStatus
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.monitors.models import MonitorView, ViewRequest, monitor_workflow_id
from treadle.workflows.monitors.workflow import MonitorWorkflow
from treadle.workflows.scheduled.models import (
    DEFAULT_CATCHUP_WINDOW,
    DEFAULT_MARGIN_MINUTES,
    AgentSchedule,
    Overlap,
    agent_run_id,
    format_duration,
)

__all__ = [
    "cmd_create",
    "cmd_delete",
    "cmd_list",
    "cmd_pause",
    "cmd_show",
    "cmd_trigger",
    "register",
]

ANSWER_TIMEOUT = timedelta(seconds=10)
LIST_ANSWER_TIMEOUT = timedelta(seconds=5)


def register(subparsers: Any, *, add_run_options: AddRunOptions, build_input: BuildInput) -> None:
    """Add the `schedule` command. ``add_run_options`` and ``build_input`` are the command line's,
    so a scheduled run takes exactly the options `run` takes and is checked the same way."""
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
    defaults = run_defaults(add_run_options)
    create.set_defaults(
        handler=cmd_create, check=lambda args: check_create(args, build_input, defaults)
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
        f"  schedule:  {plan.schedule_id} ({policies(plan)}), task queue {deployed.task_queue}\n"
        f"  monitor:   {plan.name} ({monitor_settings(plan)})\n"
        f"{target}"
        f"  next runs: {format_times(deployed.next_runs[:3])}\n"
        f"Show it:  {shell.starter('schedule', 'show', plan.name, **_where(client, args))}"
    )
    return 0


async def cmd_list(client: Client, args: argparse.Namespace) -> int:
    found = await agent_schedules.list_deployed(client)
    views = await asyncio.gather(
        *(_view(client, d.schedule.name, LIST_ANSWER_TIMEOUT, 0) for d in found)
    )
    listings = [listing_of(d, v) for d, v in zip(found, views, strict=True)]
    if args.json:
        _print_json([row.model_dump(mode="json") for row in listings])
        return 0
    if not listings:
        print(f"No scheduled agents in namespace {client.namespace}.")
        return 0
    print(format_listings(listings))
    return 0


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
        note = args.note or "paused with treadle schedule pause"
        await handle.pause(note=note)
        print(
            f"Paused scheduled agent {args.name} ({note}). Its monitor keeps watching and "
            f"reports missed runs; to silence it too: "
            f"{shell.starter('monitors', 'pause', args.name, **_where(client, args))}"
        )
    else:
        note = args.note or "unpaused with treadle schedule unpause"
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
    check_name(args.name)
    try:
        deleted = await agent_schedules.delete(client, args.name)
    except ScheduleConflict as exc:
        raise UsageError(str(exc)) from exc
    if not deleted:
        raise UsageError(f"no scheduled agent {args.name!r} in namespace {client.namespace}")
    print(f"Deleted scheduled agent {args.name} and its monitor.")
    return 0


async def _deployed(client: Client, name: str) -> DeployedSchedule:
    check_name(name)
    try:
        deployed = await agent_schedules.deployed(client, name)
    except ScheduleConflict as exc:
        raise UsageError(str(exc)) from exc
    if deployed is None:
        raise UsageError(
            f"no scheduled agent {name!r} in namespace {client.namespace} "
            "(see: treadle schedule list)"
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


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))
