"""Temporal Cloud billable actions per agent step: Treadle against the bare Temporal floor.

    .venv/bin/python -m bench.actions [--steps 6] [--model-seconds 3,10]
                                      [--heartbeat-timeout SECONDS ...] [--json FILE]

A step is one model call that asks for a tool (``write_file``, as the suite's steps do) and that
tool's call; a run is ``--steps`` of them and the model's answer, whose call counts as a step too
(so a run of 6 tool steps is 7 steps, and what a run pays once, its start, is spread over them as
a bill spreads it). Each model call takes ``--model-seconds``: a *whole* reply comes after that
long, a *streamed* one is generated over that long (the scripted model paces its chunks), so a
Treadle run at defaults publishes live tokens (signals). The floor (``bench/floor.py`` in its own
process, the SDK's defaults: no heartbeat, no streaming) asks for whole replies, so one floor run
per duration serves both rows.

What is counted is what Temporal Cloud bills (``bench/billing.py``): from the run's **history**
(starts, activity attempts with their retries, timers, signals, updates, upserts, markers, child
starts) and from the **server's own request counters**, read before and after each run, one run
at a time so the difference is the run's: the heartbeats that reached it (no history holds them)
and queries. The dev server's own ``action`` counter, less the ``TemporalChangeVersion`` upserts
it counts and Cloud does not, is printed beside the count as a check (``server's check``); the
dollars are worked from the count, at ``PRICE_PER_MILLION_ACTIONS_USD``. The suite's ``actions``
rows are the defaults' cases (``bench.suite --rows actions``, with issue 39's targets).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError
from temporalio.client import WorkflowHandle

from bench.billing import (
    PRICE_PER_MILLION_ACTIONS_USD,
    PRICE_SOURCE,
    Kind,
    Tally,
    count_history,
    read_counters,
    run_histories,
)
from bench.cpu import start_floor_worker
from bench.floor import FloorInput, FloorResult, FloorWorkflow
from bench.suite import (
    CPUS,
    Bench,
    Row,
    WorkerProcess,
    bench_setup,
    new_id,
    start_agent,
    verdict,
)
from treadle.scripted_model.openai_chat import completion, completion_chunks
from treadle.scripted_model.script import Turn
from treadle.workflows.agent.messages.models import AgentConfig, RunStatus

DEFAULT_STEPS = 6
DEFAULT_SECONDS = (3.0, 10.0)
FLOOR = "floor (asks for whole replies)"
TREADLE = "treadle (defaults)"

COLUMNS = (Kind.ACTIVITY, Kind.HEARTBEAT, Kind.SIGNAL, Kind.TIMER)
"""The kinds the table shows alone; the rest are its ``other`` column."""

REPLY = "Here is what I will do next, and why. " + "word " * 290
"""The text before each tool call (~1,500 characters, a word a chunk when streamed)."""

# ----------------------------------------------------------------------------------------------
# The runs
# ----------------------------------------------------------------------------------------------


def paced(turn: dict[str, Any], seconds: float, streamed: bool) -> dict[str, Any]:
    """``turn`` answered after ``seconds`` (whole), or streamed over ``seconds``: its chunks
    (as the scripted server frames them) spread evenly."""
    if not streamed:
        return {**turn, "delay": seconds}
    whole = completion("m", 0, Turn.model_validate(turn), {"messages": []})
    gaps = len(completion_chunks(whole, Turn.model_validate(turn), include_usage=True)) - 1
    return {**turn, "chunk_delay": seconds / max(1, gaps)}


def step_turns(steps: int, seconds: float, streamed: bool) -> list[dict[str, Any]]:
    """``steps`` replies that each write a new file, then the answer; each call ``seconds``."""
    usage = {"prompt_tokens": 2000, "completion_tokens": 400}
    turns = [
        {
            # Each reply its own, or the stuck detector sees the model repeat itself.
            "content": f"Step {i}: {REPLY}",
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": f"f{i}.txt", "content": "x" * 200}}
            ],
            "usage": usage,
        }
        for i in range(steps)
    ]
    turns.append({"content": f"Done. {REPLY}", "usage": usage})
    return [paced(turn, seconds, streamed) for turn in turns]


@dataclass
class Measured:
    """One run's billable actions: the count, and the server's own ``action`` counter."""

    seconds: float
    """How long each model call took."""
    streamed: bool | None
    """Whether the replies were streamed (``None``: a floor run, not yet put in a case)."""
    side: str
    steps: int
    """Model calls: the tool steps and the answer."""
    tally: Tally
    server_actions: dict[str, float]
    wall_seconds: float

    @property
    def case(self) -> str:
        reply = {None: "", False: ", whole", True: ", streamed"}[self.streamed]
        return f"{self.seconds:g} s{reply}"

    def per_step(self, kind: Kind) -> float:
        return self.tally.actions[kind] / self.steps

    @property
    def other(self) -> float:
        return sum(self.per_step(kind) for kind in Kind if kind not in COLUMNS)

    @property
    def total(self) -> float:
        return self.tally.total / self.steps

    @property
    def dollars_per_1000_steps(self) -> float:
        return self.total * 1000 * PRICE_PER_MILLION_ACTIONS_USD / 1e6

    @property
    def server_check(self) -> float:
        """The server's own ``action`` counter a step, less the ``TemporalChangeVersion``
        upserts it counts and Cloud does not bill: equal to ``total`` when both agree."""
        return (sum(self.server_actions.values()) - self.tally.exempt_upserts) / self.steps


async def measured(
    bench: Bench,
    http: httpx.AsyncClient,
    seconds: float,
    streamed: bool | None,
    side: str,
    steps: int,
    run: Callable[[], Awaitable[WorkflowHandle[Any, Any]]],
) -> Measured:
    """Run one workflow alone and count what it is billed."""
    if bench.metrics_url is None:
        raise RuntimeError("the dev server has no metrics port")
    before = await read_counters(http, bench.metrics_url, "default")
    began = time.perf_counter()
    handle = await run()
    wall = time.perf_counter() - began
    tally = Tally()
    run_id = handle.first_execution_run_id or handle.run_id or ""
    for events in await run_histories(bench.client, handle.id, run_id):
        tally.add(count_history(events))
    # Read after the histories: the server counts a run's last actions after it ended.
    after = await read_counters(http, bench.metrics_url, "default")
    server = after.since(before)
    tally.actions[Kind.HEARTBEAT] += round(server.heartbeats)
    tally.actions[Kind.QUERY] += round(server.queries)
    measured_run = Measured(seconds, streamed, side, steps, tally, dict(server.actions), wall)
    print(
        f"[{measured_run.case}, {side}: {measured_run.total:.2f} actions a step, {wall:.0f} s]",
        file=sys.stderr,
        flush=True,
    )
    return measured_run


async def floor_run(
    bench: Bench, task_queue: str, steps: int, seconds: float
) -> WorkflowHandle[Any, Any]:
    model = f"floor-{uuid.uuid4().hex[:8]}"
    # The floor carries no conversation, so its model takes turns in arrival order.
    bench.models.add_model(model, step_turns(steps, seconds, streamed=False), order="arrival")
    handle: WorkflowHandle[Any, FloorResult] = await bench.client.start_workflow(
        FloorWorkflow.run,
        FloorInput(model=model, task="Write the files.", workspace=bench.workspace("floor")),
        id=new_id("floor"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.steps != steps + 1:
        raise RuntimeError(f"the floor run took {result.steps} steps, not {steps + 1}")
    return handle


async def treadle_run(
    bench: Bench, task_queue: str, steps: int, seconds: float, streamed: bool, config: AgentConfig
) -> WorkflowHandle[Any, Any]:
    model = f"actions-{uuid.uuid4().hex[:8]}"
    bench.models.add_model(model, step_turns(steps, seconds, streamed))
    handle = await start_agent(bench, task_queue, model, config)
    result = await handle.result()
    if result.status is not RunStatus.DONE or result.steps != steps + 1:
        raise RuntimeError(
            f"the Treadle run ended {result.status.value} after {result.steps} steps "
            f"(expected done after {steps + 1}): {result.error}"
        )
    return handle


@contextlib.asynccontextmanager
async def floor_worker(bench: Bench, task_queue: str) -> AsyncIterator[None]:
    process = await start_floor_worker(bench, task_queue)
    try:
        yield
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


async def measure_all(
    bench: Bench, steps: int, durations: Sequence[float], heartbeat_timeouts: Sequence[float]
) -> list[Measured]:
    """Every case, one run at a time: per duration a floor run (whole replies), then Treadle
    with whole and with streamed replies, at defaults and with each heartbeat timeout given."""
    calls = steps + 1
    tq, fq = f"bench-actions-{uuid.uuid4().hex[:6]}", f"bench-actions-floor-{uuid.uuid4().hex[:6]}"
    base = AgentConfig(max_steps=steps + 5)
    configs = [(TREADLE, base)] + [
        (
            f"treadle, heartbeat_timeout {timeout:g} s",
            base.model_copy(update={"heartbeat_timeout_seconds": timeout}),
        )
        for timeout in heartbeat_timeouts
    ]
    results: list[Measured] = []
    worker = await WorkerProcess.start(bench, tq)
    try:
        async with floor_worker(bench, fq), httpx.AsyncClient(timeout=30) as http:
            for seconds in durations:
                run = functools.partial(floor_run, bench, fq, steps, seconds)
                floor = await measured(bench, http, seconds, None, FLOOR, calls, run)
                for streamed in (False, True):
                    results.append(dataclasses.replace(floor, streamed=streamed))
                    for side, config in configs:
                        run = functools.partial(
                            treadle_run, bench, tq, steps, seconds, streamed, config
                        )
                        results.append(
                            await measured(bench, http, seconds, streamed, side, calls, run)
                        )
    finally:
        await worker.stop()
    return results


TARGETS = {(10.0, False): 3.0, (10.0, True): 5.0}
"""Issue 39's targets at defaults, actions a step: whole replies of 10 s as the peers' (Pydantic
AI 3.0, the OpenAI Agents SDK 2.0, the floor 2.0), streamed ones at most 5.0."""


async def row_actions(bench: Bench) -> list[Row]:
    """The suite's ``actions`` rows: Treadle at defaults against the floor, a row a case."""
    steps, durations = (2, (3.0,)) if bench.quick else (DEFAULT_STEPS, DEFAULT_SECONDS)
    results = await measure_all(bench, steps, durations, ())
    floors = {m.case: m for m in results if m.side == FLOOR}
    rows = []
    for m in results:
        if m.side == FLOOR:
            continue
        floor = floors[m.case]
        target = TARGETS.get((m.seconds, bool(m.streamed)))
        kinds = ", ".join(f"{kind.value} {m.per_step(kind):.2f}" for kind in COLUMNS)
        rows.append(
            Row(
                "actions",
                f"Temporal Cloud actions per step, model calls of {m.case} ({kinds}, other "
                f"{m.other:.2f}); ${m.dollars_per_1000_steps:.2f} per 1,000 steps (the floor "
                f"${floor.dollars_per_1000_steps:.2f})",
                f"{m.total:.2f}",
                f"{floor.total:.2f}",
                f"{m.total / floor.total:.2f}x",
                "" if target is None else f"<= {target:g}",
                "" if target is None else verdict(m.total <= target),
                {
                    "actions_per_step": m.total,
                    "floor_actions_per_step": floor.total,
                    "dollars_per_1000_steps": m.dollars_per_1000_steps,
                    "floor_dollars_per_1000_steps": floor.dollars_per_1000_steps,
                    **{kind.value: m.per_step(kind) for kind in Kind},
                },
            )
        )
    return rows


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------

HEADER = (
    "case",
    "side",
    "activity",
    "heartbeats",
    "signals",
    "timers",
    "other",
    "per step",
    "$/1,000 steps",
    "server's check",
)


def table_rows(results: Sequence[Measured]) -> list[list[str]]:
    rows = [list(HEADER)]
    for m in results:
        rows.append(
            [
                m.case,
                m.side,
                *(f"{m.per_step(kind):.2f}" for kind in COLUMNS),
                f"{m.other:.2f}",
                f"{m.total:.2f}",
                f"{m.dollars_per_1000_steps:.2f}",
                f"{m.server_check:.2f}",
            ]
        )
    return rows


def render(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(widths[i]) if i < 2 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    )


def breakdown(results: Sequence[Measured]) -> str:
    """What the ``other`` column and the activity attempts hold, per step, once per side."""
    lines = []
    seen: set[tuple[float, str]] = set()
    for m in results:
        if (m.seconds, m.side) in seen and m.side == FLOOR:
            continue
        seen.add((m.seconds, m.side))
        attempts = ", ".join(
            f"{name} {count / m.steps:.2f}" for name, count in sorted(m.tally.attempts.items())
        )
        others = ", ".join(
            f"{kind.value} {m.per_step(kind):.2f}"
            for kind in Kind
            if kind not in COLUMNS and m.tally.actions[kind]
        )
        signals = ", ".join(
            f"{name} {count / m.steps:.2f}" for name, count in sorted(m.tally.signals.items())
        )
        case = f"{m.seconds:g} s" if m.side == FLOOR else m.case
        lines.append(f"{case}, {m.side}: activity attempts a step: {attempts}")
        if signals:
            lines.append(f"    signals a step: {signals}")
        if others:
            lines.append(f"    other a step: {others}")
        server = ", ".join(
            f"{kind} {value / m.steps:.2f}" for kind, value in sorted(m.server_actions.items())
        )
        lines.append(f"    the server's action counter a step: {server or 'none'}")
    return "\n".join(lines)


def positive_seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def seconds_list(text: str) -> tuple[float, ...]:
    return tuple(positive_seconds(part) for part in text.split(",") if part.strip())


def heartbeat_timeout(text: str) -> float:
    try:
        return AgentConfig(heartbeat_timeout_seconds=float(text)).heartbeat_timeout_seconds
    except (ValueError, ValidationError) as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a heartbeat_timeout_seconds AgentConfig takes (1 to 3600)"
        ) from exc


async def main_async(args: argparse.Namespace) -> list[Measured]:
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="treadle-actions-") as tmp_dir:
        async with bench_setup(False, Path(tmp_dir)) as bench:
            results = await measure_all(
                bench, args.steps, args.model_seconds, args.heartbeat_timeout
            )
    print(
        f"Temporal Cloud billable actions per step: fresh dev server, {CPUS} CPUs, load average "
        f"{load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end, "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(
        f"a step: one model call asking for write_file and that call; {args.steps} steps and "
        f"the answer a run ({args.steps + 1} model calls), the run's once-only actions spread "
        "over them"
    )
    print(
        f"price: ${PRICE_PER_MILLION_ACTIONS_USD:g} per million actions ({PRICE_SOURCE}); "
        "server's check: the dev server's own action counter, less the patch upserts "
        "Cloud exempts"
    )
    print(render(table_rows(results)))
    print(breakdown(results))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "price_per_million_usd": PRICE_PER_MILLION_ACTIONS_USD,
                    "steps": args.steps,
                    "rows": [
                        {
                            "case": m.case,
                            "side": m.side,
                            "steps": m.steps,
                            "actions": {k.value: v for k, v in m.tally.actions.items() if v},
                            "attempts": dict(m.tally.attempts),
                            "per_step": m.total,
                            "dollars_per_1000_steps": m.dollars_per_1000_steps,
                            "server_actions": m.server_actions,
                            "server_check": m.server_check,
                            "signals": dict(m.tally.signals),
                            "wall_seconds": m.wall_seconds,
                        }
                        for m in results
                    ],
                },
                indent=2,
            )
        )
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help="tool steps a run, before its answer"
    )
    parser.add_argument(
        "--model-seconds",
        type=seconds_list,
        default=DEFAULT_SECONDS,
        metavar="S[,S...]",
        help="how long each model call takes (default 3,10)",
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=heartbeat_timeout,
        action="append",
        default=[],
        metavar="SECONDS",
        help="also measure Treadle with this heartbeat_timeout_seconds (repeatable)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the counts as JSON")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if not args.model_seconds:
        parser.error("--model-seconds needs at least one duration")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
