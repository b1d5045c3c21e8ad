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
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from temporalio.client import Client

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
    monitor_settings,
    policies,
)
from treadle.client import AgentClient, ScheduleClient, ScheduleNotFound
from treadle.client import RunningSlot as SlotRun
from treadle.client.schedules import CreateAction
from treadle.workflows.agent.messages.events import approval_commands
from treadle.workflows.agent.messages.models import TASK_QUEUE
from treadle.workflows.monitors.models import monitor_workflow_id
from treadle.workflows.scheduled.models import (
    DEFAULT_CATCHUP_WINDOW,
    DEFAULT_MARGIN_MINUTES,
    AgentSchedule,
    Overlap,
    format_duration,
)

T = TypeVar("T")

__all__ = [
    "cmd_create",
    "cmd_delete",
    "cmd_list",
    "cmd_pause",
    "cmd_show",
    "cmd_trigger",
    "register",
]


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
    created = await _schedules(client, args).create(plan, create_workspace=args.make_workspace)
    deployed = created.deployed
    if args.json:
        _print_json(
            {
                "name": plan.name,
                "action": created.action.value,
                "schedule_id": plan.schedule_id,
                "monitor": monitor_workflow_id(plan.name),
                "task_queue": deployed.task_queue,
                "thread_id": None if plan.message is None else plan.message.thread_id,
                "next_runs": [t.isoformat() for t in deployed.next_runs],
            }
        )
        return 0
    head = "Created" if created.action is CreateAction.CREATED else "Unchanged:"
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
    listings = await _schedules(client, args).list()
    if args.json:
        _print_json([row.model_dump(mode="json") for row in listings])
        return 0
    if not listings:
        print(f"No scheduled agents in namespace {client.namespace}.")
        return 0
    print(format_listings(listings))
    return 0


async def cmd_show(client: Client, args: argparse.Namespace) -> int:
    check_name(args.name)
    shown = await _found(_schedules(client, args).show(args.name))
    connection = _connection_options(client, args)
    running = [_with_commands(slot, connection) for slot in shown.running]
    if args.json:
        _print_json(
            {
                "deployed": shown.deployed.model_dump(mode="json"),
                "monitor": None if shown.monitor is None else shown.monitor.model_dump(mode="json"),
                "running": [slot.model_dump(mode="json") for slot in running],
            }
        )
        return 0
    print(format_schedule(shown.deployed, shown.monitor, running))
    return 0


async def cmd_pause(client: Client, args: argparse.Namespace) -> int:
    check_name(args.name)
    schedules = _schedules(client, args)
    if args.schedule_command == "pause":
        note = args.note or "paused with treadle schedule pause"
        await _found(schedules.pause(args.name, note))
        print(
            f"Paused scheduled agent {args.name} ({note}). Its monitor keeps watching and "
            f"reports missed runs; to silence it too: "
            f"{shell.starter('monitors', 'pause', args.name, **_where(client, args))}"
        )
    else:
        note = args.note or "unpaused with treadle schedule unpause"
        await _found(schedules.unpause(args.name, note))
        print(f"Unpaused scheduled agent {args.name} ({note}).")
    return 0


async def cmd_trigger(client: Client, args: argparse.Namespace) -> int:
    check_name(args.name)
    deployed = await _found(_schedules(client, args).trigger(args.name))
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
    await _schedules(client, args).delete(args.name)
    print(f"Deleted scheduled agent {args.name} and its monitor.")
    return 0


def _schedules(client: Client, args: argparse.Namespace) -> ScheduleClient:
    return AgentClient(client, task_queue=args.task_queue).schedules


async def _found(asking: Awaitable[T]) -> T:
    """What ``asking`` answers; a scheduled agent that is not there says where to look."""
    try:
        return await asking
    except ScheduleNotFound as exc:
        raise UsageError(f"{exc} (see: treadle schedule list)") from exc


def _with_commands(slot: SlotRun, connection: list[str]) -> RunningSlot:
    """A running slot with the commands that decide its pending approvals, spelled with
    ``connection``'s options so they reach the same server."""
    commands = tuple(
        shell.connected(shell.runnable(command), connection)
        for pending in (slot.status.pending_approvals if slot.status is not None else ())
        if pending.decision is None
        for command in approval_commands(slot.agent_run_id, pending.call_id)
    )
    return RunningSlot(**dict(slot), commands=commands)


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
