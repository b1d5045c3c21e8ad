"""`treadle monitors ...` and `treadle serve` (the HTTP ping service).

    treadle monitors create nightly --cron '30 2 * * *' --timezone America/New_York
    treadle monitors create sync --interval 15 --margin 2 --max-runtime 10
    treadle monitors list [--json]
    treadle monitors show SLUG [--json]
    treadle monitors checkin SLUG --status in_progress|ok|error [--output T]
    treadle monitors pause|resume|disable|delete SLUG
    treadle serve [--host 127.0.0.1] [--port 8780]

Monitors live on the task queue given with the command line's ``--task-queue`` (a worker must poll
it); ``list`` shows the monitors of that task queue. Check-ins are signals, accepted without a
worker; ``show``, ``pause``, ``resume``, ``disable`` and ``delete`` need the monitor's worker to
answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from treadle.cli.a2a_server import cmd_serve_a2a
from treadle.cli.defaults import DEFAULT_MODEL
from treadle.cli.exits import UsageError
from treadle.cli.mcp_server import cmd_serve_mcp
from treadle.cli.serving import listening, serve_until_interrupted
from treadle.cli.tables import table
from treadle.web.events import running_monitors_query
from treadle.web.ping import DEFAULT_PORT, MonitorService
from treadle.workflows import cron
from treadle.workflows.base import Frozen, describe_errors
from treadle.workflows.monitors.models import (
    MEMO_NAME,
    MEMO_SCHEDULE,
    MONITOR_ID_PREFIX,
    REPORTED_STATUSES,
    CheckIn,
    CheckInSignal,
    CheckInSource,
    CheckInStatus,
    CronSchedule,
    DeleteRequest,
    Health,
    IntervalSchedule,
    MonitorConfig,
    MonitorInput,
    MonitorStatus,
    MonitorView,
    StatusChange,
    ViewRequest,
    check_slug,
    monitor_workflow_id,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow

ANSWER_TIMEOUT = timedelta(seconds=10)
LIST_ANSWER_TIMEOUT = timedelta(seconds=5)
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


def register(subparsers: Any) -> None:
    """Add the `monitors` and `serve` commands; each leaf sets `handler`."""
    monitors = subparsers.add_parser(
        "monitors",
        help="cron monitors: create, list, show, checkin, pause, resume, disable, delete",
        description=__doc__.split("\n\n")[0],
    )
    sub = monitors.add_subparsers(dest="monitors_command", required=True, metavar="COMMAND")

    create = sub.add_parser("create", help="create a monitor; prints its ping key and curl line")
    create.add_argument("slug", help="3-50 of a-z 0-9 - _, a letter first")
    schedule = create.add_mutually_exclusive_group(required=True)
    schedule.add_argument("--cron", metavar="EXPR", help="5-field cron expression")
    schedule.add_argument("--interval", type=int, metavar="MINUTES", help="a run every N minutes")
    create.add_argument("--timezone", metavar="TZ", help="IANA time zone of --cron (default UTC)")
    create.add_argument("--name", help="human-readable name (default: the slug)")
    create.add_argument(
        "--margin", type=int, default=5, metavar="MINUTES", help="grace before missed (default 5)"
    )
    create.add_argument(
        "--max-runtime", type=int, metavar="MINUTES", help="in_progress longer than this: timeout"
    )
    create.add_argument(
        "--url", default=DEFAULT_URL, help=f"where `serve` is reachable (default {DEFAULT_URL})"
    )
    create.add_argument("--json", action="store_true")
    create.set_defaults(handler=cmd_create)

    listing = sub.add_parser("list", help="monitors on --task-queue with health and next run")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_list)

    show = sub.add_parser("show", help="health, next run, ping key, stats, recent check-ins")
    show.add_argument("slug")
    show.add_argument("--limit", type=int, default=20, help="recent check-ins shown (default 20)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_show)

    checkin = sub.add_parser("checkin", help="report a run by hand (source manual)")
    checkin.add_argument("slug")
    checkin.add_argument("--status", required=True, choices=[s.value for s in REPORTED_STATUSES])
    checkin.add_argument("--output", help="the run's output (kept up to 10 KiB)")
    checkin.add_argument("--exit-code", type=int)
    checkin.add_argument("--duration", type=float, metavar="SECONDS")
    checkin.add_argument("--json", action="store_true")
    checkin.set_defaults(handler=cmd_checkin)

    for name, help_text in (
        ("pause", "stop expecting runs (check-ins are still recorded)"),
        ("resume", "expect runs again, from the next scheduled one"),
        ("disable", "stop expecting runs and refuse check-ins"),
        ("delete", "stop monitoring; the monitor's workflow completes"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("slug")
        p.add_argument("--json", action="store_true")
        p.set_defaults(handler=cmd_delete if name == "delete" else cmd_set_status)

    serve = subparsers.add_parser(
        "serve",
        help="a service: the monitors' HTTP ping service (default), or Treadle as an MCP server",
    )
    serve.add_argument(
        "service",
        nargs="?",
        choices=("monitors", "mcp", "a2a"),
        default="monitors",
        help="monitors: pings and the live event stream; mcp: an MCP server (stdio, or --http); "
        "a2a: an A2A agent",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"default {DEFAULT_PORT} (mcp --http: 8767, a2a: 8768)",
    )
    serve.add_argument("--http", action="store_true", help="mcp: streamable HTTP, not stdio")
    serve.add_argument("--token", help="mcp --http, a2a: access token (required beyond loopback)")
    serve.add_argument(
        "--model",
        help=f"mcp, a2a: the model of a run started without one (provider:model; default "
        f"{DEFAULT_MODEL}, on the demo's task queue the demo's scripted model)",
    )
    serve.add_argument(
        "--cors-origin", action="append", default=[], metavar="URL",
        help="mcp --http, a2a: an origin allowed cross-origin access; repeatable",
    )  # fmt: skip
    serve.set_defaults(handler=cmd_serve)


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


async def cmd_create(client: Client, args: argparse.Namespace) -> int:
    config = _config(args)
    handle = await _start(client, config, args.task_queue)
    now = datetime.now(UTC)
    next_expected = config.schedule.next_after(now, anchor=now)
    url = f"{args.url.rstrip('/')}/ping/{config.ping_key}"
    if args.json:
        _print_json(
            {
                "slug": config.slug,
                "workflow_id": handle.id,
                "ping_key": config.ping_key,
                "ping_url": url,
                "schedule": config.schedule.describe(),
                "next_expected": next_expected.isoformat(),
            }
        )
        return 0
    runtime = (
        f", max runtime {config.max_runtime_minutes} min" if config.max_runtime_minutes else ""
    )
    print(
        f"Created monitor {config.slug} ({config.schedule.describe()}, margin "
        f"{config.margin_minutes} min{runtime})\n"
        f"Next run expected: {_when(next_expected, config.schedule)}\n"
        f"Ping key: {config.ping_key}\n"
        f"Report a run:  curl -fsS -m 10 --retry 3 -o /dev/null {url}\n"
        f"Start, then the result by exit code:\n"
        f"  curl -fsS -m 10 -o /dev/null {url}/start; YOUR_JOB; "
        f'curl -fsS -m 10 -o /dev/null "{url}?exit_code=$?"'
    )
    return 0


async def cmd_list(client: Client, args: argparse.Namespace) -> int:
    executions = [
        e
        async for e in client.list_workflows(
            running_monitors_query(args.task_queue), rpc_timeout=ANSWER_TIMEOUT
        )
    ]
    listings = sorted(
        await asyncio.gather(*(_listing(client, e) for e in executions)), key=lambda r: r.slug
    )
    if args.json:
        _print_json([r.model_dump(mode="json") for r in listings])
        return 0
    if not listings:
        print(f"No monitors on task queue {args.task_queue!r}.")
        return 0
    rows = [("SLUG", "NAME", "SCHEDULE", "STATUS", "HEALTH", "FAILS", "NEXT EXPECTED", "LAST")]
    for r in listings:
        rows.append(
            (
                r.slug,
                r.name,
                r.schedule,
                r.status or "?",
                r.health or "? (no answer)",
                "-" if r.consecutive_failures is None else str(r.consecutive_failures),
                _when(r.next_expected),
                _when(r.last_checkin_at),
            )
        )
    print(table(rows, strip="end"))
    return 0


async def cmd_show(client: Client, args: argparse.Namespace) -> int:
    if not 0 <= args.limit <= 500:
        raise UsageError("--limit must be between 0 and 500")
    handle = await _running(client, args.slug)
    try:
        view = await handle.query(
            MonitorWorkflow.view,
            ViewRequest(recent=args.limit, as_of=datetime.now(UTC)),
            rpc_timeout=ANSWER_TIMEOUT,
        )
    except RPCError as exc:
        raise UsageError(_no_answer(args.slug, exc)) from exc
    if args.json:
        print(view.model_dump_json(indent=2))
    else:
        print(format_view(view))
    return 0


async def cmd_checkin(client: Client, args: argparse.Namespace) -> int:
    try:
        body = CheckInSignal(
            status=CheckInStatus(args.status),
            source=CheckInSource.MANUAL,
            output=args.output,
            exit_code=args.exit_code,
            duration_seconds=args.duration,
            sent_at=datetime.now(UTC),
        )
    except (ValidationError, ValueError) as exc:
        raise UsageError(f"invalid check-in: {_brief(exc)}") from exc
    handle = await _running(client, args.slug)
    await handle.signal(MonitorWorkflow.checkin, body, rpc_timeout=ANSWER_TIMEOUT)
    if args.json:
        _print_json(
            {"monitor": args.slug, "status": body.status.value, "sent_at": _iso(body.sent_at)}
        )
    else:
        print(f"Sent {body.status.value} check-in to monitor {args.slug}.")
    return 0


async def cmd_set_status(client: Client, args: argparse.Namespace) -> int:
    status = {
        "pause": MonitorStatus.PAUSED,
        "resume": MonitorStatus.ACTIVE,
        "disable": MonitorStatus.DISABLED,
    }[args.monitors_command]
    handle = await _running(client, args.slug)
    view = await _update(handle, args.slug, MonitorWorkflow.set_status, StatusChange(status=status))
    if args.json:
        print(view.model_dump_json(indent=2))
    elif status is MonitorStatus.ACTIVE:
        print(f"Resumed monitor {args.slug}; next run expected: {_when(view.next_expected)}")
    else:
        print(f"{'Paused' if status is MonitorStatus.PAUSED else 'Disabled'} monitor {args.slug}.")
    return 0


async def cmd_delete(client: Client, args: argparse.Namespace) -> int:
    handle = await _running(client, args.slug)
    view = await _update(handle, args.slug, MonitorWorkflow.delete, DeleteRequest())
    try:  # the workflow completes right after answering
        await asyncio.wait_for(handle.result(), ANSWER_TIMEOUT.total_seconds())
    except TimeoutError as exc:
        raise UsageError(f"monitor {args.slug!r} accepted the delete but has not finished") from exc
    if args.json:
        print(view.model_dump_json(indent=2))
    else:
        print(
            f"Deleted monitor {args.slug} ({view.total_checkins} check-ins, "
            f"{view.total_failures} failures)."
        )
    return 0


async def cmd_serve(client: Client, args: argparse.Namespace) -> int:
    if args.service == "mcp":
        return await cmd_serve_mcp(client, args)
    if args.service == "a2a":
        return await cmd_serve_a2a(client, args)
    port = DEFAULT_PORT if args.port is None else args.port
    service = MonitorService(client, task_queue=args.task_queue)
    await listening(service.start(args.host, port), args.host, port)
    return await serve_until_interrupted(
        f"Monitor HTTP service on {service.url} (namespace {client.namespace}): "
        f"pings at {service.url}/ping/KEY, events at {service.url}/monitors/events; Ctrl-C to stop",
        service.close,
        "Monitor HTTP service stopped.",
    )


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


class MonitorListing(Frozen):
    """One row of `monitors list`; the status fields are empty when the monitor did not answer
    (no worker polls its task queue)."""

    slug: str
    name: str
    schedule: str
    answered: bool
    status: MonitorStatus | None = None
    health: Health | None = None
    next_expected: datetime | None = None
    last_checkin_at: datetime | None = None
    consecutive_failures: int | None = None


def _config(args: argparse.Namespace) -> MonitorConfig:
    """The monitor described by `create`'s flags, with a fresh ping key."""
    try:
        check_slug(args.slug)
        if args.cron is not None:
            schedule: CronSchedule | IntervalSchedule = CronSchedule(
                expression=cron.check_cron(args.cron),
                timezone=cron.check_timezone(args.timezone or "UTC").key,
            )
        else:
            if args.timezone is not None:
                raise UsageError("--timezone goes with --cron; an interval needs none")
            schedule = IntervalSchedule(minutes=args.interval)
        return MonitorConfig(
            slug=args.slug,
            name=args.name or "",
            schedule=schedule,
            margin_minutes=args.margin,
            max_runtime_minutes=args.max_runtime,
            # The secret is made here, by the client: never with randomness in workflow code.
            ping_key=f"{args.slug}.{secrets.token_urlsafe(24)}",
        )
    except (ValidationError, ValueError) as exc:
        raise UsageError(_brief(exc)) from exc


async def _start(
    client: Client, config: MonitorConfig, task_queue: str
) -> WorkflowHandle[Any, Any]:
    try:
        return await client.start_workflow(
            MonitorWorkflow.run,
            MonitorInput(config=config),
            id=monitor_workflow_id(config.slug),
            task_queue=task_queue,
            memo=config.memo(),
            static_summary=f"cron monitor {config.slug}: {config.schedule.describe()}",
            # A slug names one running monitor; a deleted monitor's slug may be used again.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
    except WorkflowAlreadyStartedError as exc:
        raise UsageError(f"monitor {config.slug!r} already exists") from exc


async def _running(client: Client, slug: str) -> WorkflowHandle[Any, Any]:
    """The running monitor called ``slug``, or a one-line usage error."""
    try:
        check_slug(slug)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    handle = client.get_workflow_handle_for(MonitorWorkflow.run, monitor_workflow_id(slug))
    try:
        description = await handle.describe(rpc_timeout=ANSWER_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise UsageError(f"no monitor {slug!r} in namespace {client.namespace}") from exc
        raise
    if description.status is not WorkflowExecutionStatus.RUNNING:
        raise UsageError(f"no monitor {slug!r} in namespace {client.namespace} (it was deleted)")
    return handle


async def _update(
    handle: WorkflowHandle[Any, Any], slug: str, update: Any, arg: BaseModel
) -> MonitorView:
    try:
        view: MonitorView = await handle.execute_update(update, arg, rpc_timeout=ANSWER_TIMEOUT)
    except WorkflowUpdateFailedError as exc:
        reason = getattr(exc.cause, "message", str(exc.cause))
        raise UsageError(f"monitor {slug!r} refused: {reason}") from exc
    except RPCError as exc:
        raise UsageError(_no_answer(slug, exc)) from exc
    return view


async def _listing(client: Client, execution: WorkflowExecution) -> MonitorListing:
    workflow_id = execution.id
    slug = workflow_id.removeprefix(MONITOR_ID_PREFIX)
    memo = await execution.memo()
    name, schedule = str(memo.get(MEMO_NAME, slug)), str(memo.get(MEMO_SCHEDULE, "?"))
    handle = client.get_workflow_handle_for(MonitorWorkflow.run, workflow_id)
    try:
        view = await handle.query(
            MonitorWorkflow.view,
            ViewRequest(recent=0, as_of=datetime.now(UTC)),
            rpc_timeout=LIST_ANSWER_TIMEOUT,
        )
    except RPCError:
        return MonitorListing(slug=slug, name=name, schedule=schedule, answered=False)
    return MonitorListing(
        slug=slug,
        name=view.name,
        schedule=view.schedule_text,
        answered=True,
        status=view.status,
        health=view.health,
        next_expected=view.next_expected,
        last_checkin_at=view.last_checkin_at,
        consecutive_failures=view.consecutive_failures,
    )


def _no_answer(slug: str, exc: RPCError) -> str:
    if exc.status is RPCStatusCode.DEADLINE_EXCEEDED:
        return f"monitor {slug!r} did not answer; is a worker polling its task queue?"
    return f"monitor {slug!r}: {exc.message}"


def format_view(view: MonitorView) -> str:
    """`monitors show` as text."""
    runtime = f", max runtime {view.max_runtime_minutes} min" if view.max_runtime_minutes else ""
    health = view.health.value
    if view.consecutive_failures:
        health += f" ({view.consecutive_failures} consecutive failures)"
    expected = _when(view.next_expected, view.schedule)
    if view.missed_after is not None:
        expected += f"; missed after {_when(view.missed_after)}"
    lines = [
        f"{view.slug}: {view.name}" if view.name != view.slug else view.slug,
        f"  schedule:      {view.schedule_text}, margin {view.margin_minutes} min{runtime}",
        f"  status:        {view.status.value}",
        f"  health:        {health}",
        f"  next expected: {expected}",
        f"  last check-in: {_when(view.last_checkin_at)}",
        f"  ping key:      {view.ping_key}",
        f"  check-ins:     {view.total_checkins} total, {view.total_failures} failed, "
        f"{view.refused_total} refused",
    ]
    if view.open_run is not None:
        lines.append(
            f"  running:       #{view.open_run.id} since {_when(view.open_run.started_at)}"
        )
    stats = [("STATS", "OK", "ERROR", "MISSED", "TIMEOUT", "P50", "P95", "UPTIME")]
    for w in (view.stats.day, view.stats.week, view.stats.month):
        stats.append(
            (
                w.window,
                str(w.success),
                str(w.failure),
                str(w.missed),
                str(w.timeout),
                _seconds(w.p50_seconds),
                _seconds(w.p95_seconds),
                "-" if w.uptime_percent is None else f"{w.uptime_percent:g}%",
            )
        )
    lines += ["", table(stats, strip="end")]
    if view.recent:
        rows: list[tuple[str, ...]] = [
            ("ID", "STATUS", "SOURCE", "AT", "DURATION", "EXIT", "OUTPUT"),
            *(_checkin_row(c) for c in view.recent),
        ]
        lines += ["", table(rows, strip="end")]
    for refusal in view.refusals[-5:]:
        lines.append(f"refused {_when(refusal.at)}: {refusal.reason}")
    return "\n".join(lines)


def _checkin_row(c: CheckIn) -> tuple[str, ...]:
    output = (c.output or "").replace("\n", " ")
    if len(output) > 70:
        output = output[:69] + "…"
    return (
        f"#{c.id}",
        c.status.value,
        c.source.value,
        _when(c.started_at or c.created_at),
        _seconds(c.duration_seconds),
        "-" if c.exit_code is None else str(c.exit_code),
        output,
    )


def _when(moment: datetime | None, schedule: CronSchedule | IntervalSchedule | None = None) -> str:
    """UTC; for a cron schedule in another zone, its wall-clock time there too."""
    if moment is None:
        return "-"
    text = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(schedule, CronSchedule) and schedule.timezone != "UTC":
        local = moment.astimezone(cron.check_timezone(schedule.timezone))
        text += f" ({local:%H:%M %Z} in {schedule.timezone})"
    return text


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}s" if value < 120 else f"{value / 60:.1f}m"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _brief(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return describe_errors(exc, root=None, limit=1)
    return str(exc)


__all__ = ["MonitorListing", "format_view", "register"]
