"""No effect twice: runs that each append one line with ``run_command``, on one worker loaded
past its cores, and across SIGKILLs of their worker.

    python -m bench.effects [--runs 50] [--rounds 2] [--burners 12] [--killed 10]

The probe of issue 39, as it was run when a 1 s heartbeat timeout let a busy worker's finished
command run again (4 of 50 files held two lines):

1. **Busy**: ``--runs`` runs start at once on one ``treadle worker``, each told by the scripted
   model to append one line to its own file with ``run_command``, then to answer. ``--burners``
   processes spin on the CPU beside them (the load average is printed: the probe wants it at
   10 or more). Repeated ``--rounds`` times.
2. **Killed**: ``--killed`` runs whose command sleeps a second after appending; their worker
   is SIGKILLed while the commands run, once, and a new worker finishes them.

Printed per round: files with exactly one line, with none, with more (a repeated effect: the
figure that must be 0), runs whose model read "outcome unknown", model tries lost to a worker
(made again, no try spent), and the load. Nothing is asserted; the exit code is 1 when a file
holds more than one line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from bench.suite import Bench, WorkerProcess, bench_setup, model_schedules
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult
from treadle.workflows.agent.workflow import AgentWorkflow

APPEND = "python3 -c \"open('effects.log', 'a').write('once\\n')\""
APPEND_THEN_SLEEP = (
    "python3 -c \"import time; open('effects.log', 'a').write('once\\n'); time.sleep(3)\""
)
CONFIG = AgentConfig(allow_run_command=True, command_allowlist=("python3",), max_steps=4)
BURN = "while True: pass"


@asynccontextmanager
async def burners(count: int) -> AsyncIterator[None]:
    """``count`` processes spinning on the CPU for as long as the block runs."""
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", BURN) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            await proc.wait()


async def start_run(bench: Bench, tq: str, model: str, label: str) -> WorkflowHandle[Any, Any]:
    workspace = bench.workspace(label)
    return await bench.client.start_workflow(
        AgentWorkflow.run,
        AgentInput(
            task="Append once.", model=f"openai:{model}", workspace=workspace, config=CONFIG
        ),
        id=f"bench-effects-{label}-{uuid.uuid4().hex[:8]}",
        task_queue=tq,
        execution_timeout=timedelta(minutes=30),
    )


def lines_in(handle_workspace: str) -> int:
    log = Path(handle_workspace) / "effects.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


async def tally(bench: Bench, handles: list[WorkflowHandle[Any, Any]]) -> Counter[str]:
    """Wait for every run; count its file's lines, what its model read, its lost tries."""
    counts: Counter[str] = Counter()
    for handle in handles:
        result: AgentResult = await asyncio.wait_for(handle.result(), 1800)
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        run_input = bench.client.data_converter.payload_converter.from_payloads(
            started.input.payloads, [AgentInput]
        )[0]
        lines = lines_in(run_input.workspace)
        counts["runs"] += 1
        counts["done" if result.status.value == "done" else f"ended {result.status.value}"] += 1
        counts["one line" if lines == 1 else "no line" if lines == 0 else "REPEATED"] += 1
        timed_out = [
            e
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
        ]
        counts["activity timeouts"] += len(timed_out)
        counts["model tries made again"] += max(0, len(model_schedules(history)) - 2)
        unknown = [
            e
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and b"outcome unknown"
            in e.activity_task_completed_event_attributes.result.SerializeToString()
        ]
        counts["told outcome unknown"] += len(unknown)
    return counts


def report(title: str, counts: Counter[str], load: tuple[float, float]) -> None:
    order = ["runs", "done", "one line", "no line", "REPEATED", "told outcome unknown",
             "model tries made again", "activity timeouts"]  # fmt: skip
    shown = ", ".join(f"{key} {counts[key]}" for key in order if key in counts or key == "REPEATED")
    others = ", ".join(f"{k} {v}" for k, v in counts.items() if k not in order)
    print(f"{title}: {shown}{'; ' + others if others else ''}; load {load[0]:.1f}-{load[1]:.1f}")


async def busy_round(bench: Bench, runs: int, burn: int, label: str) -> Counter[str]:
    tq = f"bench-effects-{uuid.uuid4().hex[:6]}"
    model = f"append-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(
        model,
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": APPEND}}]},
            {"content": "appended"},
        ],
    )
    worker = await WorkerProcess.start(bench, tq)
    loads: list[float] = []
    async with burners(burn):
        await asyncio.sleep(5)  # the burners raise the load before the runs start
        handles = await asyncio.gather(
            *(start_run(bench, tq, model, f"{label}{i}") for i in range(runs))
        )

        async def sample() -> None:
            while True:
                loads.append(os.getloadavg()[0])
                await asyncio.sleep(1)

        sampler = asyncio.create_task(sample())
        try:
            counts = await tally(bench, list(handles))
        finally:
            sampler.cancel()
    await worker.stop()
    report(f"busy round {label}", counts, (min(loads, default=0), max(loads, default=0)))
    return counts


async def killed_round(bench: Bench, runs: int) -> Counter[str]:
    tq = f"bench-effects-kill-{uuid.uuid4().hex[:6]}"
    model = f"append-kill-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(
        model,
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": APPEND_THEN_SLEEP}}]},
            {"content": "appended"},
        ],
    )
    first = await WorkerProcess.start(bench, tq)
    handles = await asyncio.gather(*(start_run(bench, tq, model, f"k{i}") for i in range(runs)))
    deadline = time.monotonic() + 120
    while sum(lines_in(w) for w in _workspaces(bench, "k")) < max(1, runs // 2):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    first.kill()
    await first.process.wait()
    second = await WorkerProcess.start(bench, tq)
    counts = await tally(bench, list(handles))
    await second.stop()
    load = os.getloadavg()[0]
    report("killed round", counts, (load, load))
    return counts


def _workspaces(bench: Bench, label: str) -> list[str]:
    root = bench.tmp / "ws"
    return [str(p) for p in root.glob(f"{label}*") if p.is_dir()]


async def run(args: argparse.Namespace) -> int:
    repeated = 0
    with tempfile.TemporaryDirectory(prefix="treadle-effects-") as tmp_dir:
        async with bench_setup(False, Path(tmp_dir)) as bench:
            for index in range(args.rounds):
                counts = await busy_round(bench, args.runs, args.burners, f"b{index}-")
                repeated += counts["REPEATED"]
            if args.killed:
                repeated += (await killed_round(bench, args.killed))["REPEATED"]
    print(f"files holding a repeated effect: {repeated}")
    return 1 if repeated else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--burners", type=int, default=12, help="CPU-spinning processes beside")
    parser.add_argument("--killed", type=int, default=10, help="runs across a SIGKILL (0: none)")
    started = time.perf_counter()
    code = asyncio.run(run(parser.parse_args()))
    print(f"({time.perf_counter() - started:.0f} s)")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
