"""Checking `schedule create` before anything connects: its options become an
``AgentSchedule`` (``args.plan``) or a ``UsageError`` naming the flag at fault."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from treadle.cli.exits import UsageError
from treadle.workflows import cron
from treadle.workflows.agent.messages.models import AgentInput
from treadle.workflows.base import describe_errors
from treadle.workflows.monitors.models import check_slug
from treadle.workflows.scheduled.models import (
    MIN_CATCHUP_WINDOW,
    AgentSchedule,
    Overlap,
    ThreadMessage,
    format_duration,
    parse_duration,
    schedule_id,
)

__all__ = ["AddRunOptions", "BuildInput", "Planned", "check_create", "check_name", "run_defaults"]


class Planned(Protocol):
    """What the command line's ``build_input`` returns: the run, and whether to make its
    workspace."""

    @property
    def input(self) -> AgentInput: ...

    @property
    def create_workspace(self) -> bool: ...


AddRunOptions = Callable[[argparse.ArgumentParser], None]
BuildInput = Callable[[argparse.Namespace, str], Planned]


def run_defaults(add_run_options: AddRunOptions) -> dict[str, Any]:
    """The run options' defaults, TASK aside: what `create --thread` must be left with."""
    probe = argparse.ArgumentParser(add_help=False)
    add_run_options(probe)
    defaults = vars(probe.parse_args(["TASK"]))
    defaults.pop("task")
    return defaults


def check_create(
    args: argparse.Namespace, build_input: BuildInput, run_defaults: dict[str, Any]
) -> None:
    """Turn `create`'s options into an ``AgentSchedule`` (``args.plan``), or a UsageError."""
    name = check_name(args.name)
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


def check_name(name: str) -> str:
    try:
        return check_slug(name)
    except ValueError as exc:
        raise UsageError(str(exc).replace("slug", "name", 1)) from exc
