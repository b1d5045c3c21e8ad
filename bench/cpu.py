"""CPU seconds per step against an honest floor: the measure that stays stable on a busy machine.

    python -m bench.cpu [--steps 20] [--reps 5] [--profile] [--json FILE] [--save-histories DIR]

Two worker processes on one fresh dev server: ``worker.py`` as a user runs it (the defaults,
the conversation store) and the bare Temporal floor in its own process
(``bench/floor_worker.py``: the SDK's default converter, no codec, no External Storage), both
looping the same two activities per step (a model call over HTTP to the same scripted model
server, a file write) and asking for whole replies. Runs alternate (floor, Treadle with whole
replies, Treadle with the defaults), one at a time, and each run's CPU is read from
``/proc/PID/stat`` of its worker and of the dev server: per step, the median over the reps, and
again with the processes' idle CPU (measured first, both workers polling) taken out. Wall time
is printed too, but on a shared machine only the CPU ratios are worth reading; and the part of
each worker's CPU spent in the kernel (system calls), to tell Python's cost from the files'.

``--watchers N``: the same Treadle run alone and with N live views following it (the CLI's
and the browser page's reader), interleaved, CPU per step of the server and the worker; the
calls the views sent, what each kind costs, and what views of a parked run cost a second
(``bench.watchers``).

Replay: the last Treadle run and the last floor run are replayed in this process (Treadle's
``Replayer`` as the suite builds it; the floor's with the SDK's defaults), CPU per step.
``--profile`` adds a cProfile of Treadle's replay (the top functions by cumulative time).
``--profile-worker FILE`` runs ``worker.py`` under cProfile in every thread (``bench.profiled``)
and writes its measured rounds (the warm-up round left out) to FILE, printing the top
functions; the CPU figures of that run are then cProfile's, not the user's.
``--profile-floor FILE`` does the same for the floor's worker, so the two compare function by
function (``python -m bench.profile_compare``).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from bench import watchers
from bench.floor import FloorInput, FloorWorkflow
from bench.floor_worker import READY
from bench.scripts import write_script
from bench.suite import (
    ROOT,
    Bench,
    WorkerProcess,
    bench_setup,
    cpu_seconds,
    cpu_times,
    events_per_step,
    new_id,
    start_agent,
)
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import workflow_runner
from treadle.workflows.agent.messages.models import AgentConfig, RunStatus

IDLE_SECONDS = 3.0


@dataclass
class Sample:
    """One run: CPU seconds of its worker and of the server (to the nanosecond), its wall time,
    and the part of the worker's CPU spent in the kernel for it (``worker_system``: ``/proc``'s
    10 ms ticks, so a share, not a fine figure)."""

    worker: float
    server: float
    wall: float
    worker_system: float = 0.0


async def start_floor_worker(
    bench: Bench, task_queue: str, profile: str | None = None
) -> asyncio.subprocess.Process:
    log = bench.tmp / f"floor-{uuid.uuid4().hex[:6]}.log"
    # bench.profiled runs a script by its path; -m puts the checkout on the path for its imports.
    how = ("-m", "bench.profiled", profile, "bench/floor_worker.py") if profile else ()
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *(how or ("-m", "bench.floor_worker")),
            "--address",
            bench.address,
            "--task-queue",
            task_queue,
            "--model-url",
            bench.models.base_url,
            cwd=ROOT,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    deadline = time.monotonic() + 120
    while READY not in log.read_text(errors="replace"):
        if process.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the floor worker did not start:\n{log.read_text()}")
        await asyncio.sleep(0.02)
    return process


async def measured(worker_pid: int, server_pid: int, run: Callable[[], Any]) -> Sample:
    (_, k0), w0 = cpu_times(worker_pid), cpu_seconds(worker_pid)
    s0, t0 = cpu_seconds(server_pid), time.perf_counter()
    await run()
    wall = time.perf_counter() - t0
    w1, (_, k1) = cpu_seconds(worker_pid), cpu_times(worker_pid)
    return Sample(w1 - w0, cpu_seconds(server_pid) - s0, wall, k1 - k0)


COPIES = 5
"""Replays per measure, through one replayer: what a worker pays once (building the worker,
checking each workflow class in the sandbox) is shared, as in a worker replaying after a cache
miss; what each run pays (its sandbox instance, its activations, its payloads) is not."""


async def replay_seconds(replayer: Replayer, history: WorkflowHistory, repeats: int) -> float:
    """Median process CPU seconds of replaying ``history`` once, ``COPIES`` at a time."""

    async def copies() -> AsyncIterator[WorkflowHistory]:
        for _ in range(COPIES):
            yield history

    async def once() -> float:
        start = time.process_time()
        async with replayer.workflow_replay_iterator(copies()) as results:
            async for result in results:
                if result.replay_failure is not None:
                    raise result.replay_failure
        return (time.process_time() - start) / COPIES

    await once()  # warm: imports, the sandbox's first module copies
    return statistics.median([await once() for _ in range(repeats)])


async def profile_replay(replayer: Replayer, history: WorkflowHistory) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    await replay_seconds(replayer, history, 1)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    return out.getvalue()


async def worker_profile(pid: int, out: Path) -> str:
    """Have ``bench.profiled`` write the worker's profile (``SIGUSR2``); its top functions."""
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    size = -1
    while not out.exists() or out.stat().st_size != size:  # written whole: stable size
        if time.monotonic() > deadline:
            raise RuntimeError(f"the profiled worker wrote no {out}")
        size = out.stat().st_size if out.exists() else -1
        await asyncio.sleep(0.5)
    text = io.StringIO()
    stats = pstats.Stats(str(out), stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(50)
    return text.getvalue()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    steps, reps = args.steps, args.reps
    with tempfile.TemporaryDirectory(prefix="treadle-cpu-") as tmp_dir:
        async with bench_setup(False, Path(tmp_dir), args.timer_shift) as bench:
            plain = await Client.connect(bench.address, namespace="default")
            tq, fq = new_id("cpu"), new_id("cpu-floor")
            flags = () if args.sticky is None else ("--sticky-queue-timeout", str(args.sticky))
            launcher = ("-m", "bench.profiled", args.profile_worker) if args.profile_worker else ()
            treadle = await WorkerProcess.start(bench, tq, *flags, launcher=launcher)
            floor = await start_floor_worker(bench, fq, args.profile_floor)
            try:
                return await measure(bench, plain, treadle, floor, tq, fq, steps, reps, args)
            finally:
                floor.kill()
                await floor.wait()
                await treadle.stop()


async def measure(
    bench: Bench,
    plain: Client,
    treadle: WorkerProcess,
    floor: asyncio.subprocess.Process,
    tq: str,
    fq: str,
    steps: int,
    reps: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    server = bench.server_pid
    pids = {"floor": floor.pid, "whole replies": treadle.pid, "defaults": treadle.pid}
    await asyncio.sleep(1.0)
    idle0 = {p: cpu_seconds(p) for p in (server, floor.pid, treadle.pid)}
    await asyncio.sleep(IDLE_SECONDS)
    idle = {p: (cpu_seconds(p) - idle0[p]) / IDLE_SECONDS for p in idle0}

    model = f"cpu-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(steps))
    configs = {
        "whole replies": AgentConfig(max_steps=steps + 5, stream_tokens=False),
        "defaults": AgentConfig(max_steps=steps + 5),
    }
    samples: dict[str, list[Sample]] = {"floor": [], **{k: [] for k in configs}}
    last: dict[str, Any] = {}
    handles: list[Any] = []

    async def floor_run() -> None:
        name = f"floor-{uuid.uuid4().hex[:8]}"
        bench.models.add_model(name, write_script(steps), order="arrival")
        handle = await plain.start_workflow(
            FloorWorkflow.run,
            FloorInput(model=name, task="Write the files.", workspace=bench.workspace("floor")),
            id=new_id("floor"),
            task_queue=fq,
        )
        result = await handle.result()
        if result.steps != steps + 1:
            raise RuntimeError(f"the floor run took {result.steps} steps")
        last["floor"] = handle

    def treadle_run(name: str) -> Callable[[], Any]:
        async def go() -> None:
            handle = await start_agent(bench, tq, model, configs[name])
            result = await handle.result()
            if result.status is not RunStatus.DONE or result.steps != steps + 1:
                raise RuntimeError(f"treadle run ended {result.status} after {result.steps}")
            last[name] = handle
            handles.append(handle)

        return go

    for rep in range(reps + 1):  # the first round warms every side up and is not counted
        for name in samples:
            go = floor_run if name == "floor" else treadle_run(name)
            sample = await measured(pids[name], server, go)
            if rep:
                samples[name].append(sample)
        if args.profile_worker and rep == 0:
            os.kill(treadle.pid, signal.SIGUSR1)  # bench.profiled: forget the warm-up round
        if args.profile_floor and rep == 0:
            os.kill(floor.pid, signal.SIGUSR1)
        print(f"[cpu: round {rep} of {reps}]", file=sys.stderr, flush=True)
    if args.profile_worker:
        print(await worker_profile(treadle.pid, Path(args.profile_worker)), file=sys.stderr)
    if args.profile_floor:
        print(await worker_profile(floor.pid, Path(args.profile_floor)), file=sys.stderr)

    per_step = steps + 1

    def median(name: str, what: str, net: bool) -> float:
        values = []
        for s in samples[name]:
            value = getattr(s, what)
            if net and what != "wall":
                pid = server if what == "server" else pids[name]
                value -= idle[pid] * s.wall
            values.append(value)
        return float(statistics.median(values)) / per_step * 1000

    figures: dict[str, Any] = {"steps": per_step, "reps": reps, "idle_cpu_per_s": {}}
    figures["idle_cpu_per_s"] = {
        "server": idle[server],
        "floor worker": idle[floor.pid],
        "treadle worker": idle[treadle.pid],
    }
    for name in samples:
        figures[name] = {
            "worker_ms": median(name, "worker", False),
            "server_ms": median(name, "server", False),
            "worker_net_ms": median(name, "worker", True),
            "server_net_ms": median(name, "server", True),
            "wall_ms": median(name, "wall", False),
            "worker_system_ms": median(name, "worker_system", False),
        }
    # Each round's Treadle run against the floor run beside it: the machine drifts less within
    # a round than across a run, so these say how far one run's ratio can be trusted.
    figures["worker_ratio_by_round"] = {
        name: [t.worker / f.worker for t, f in zip(samples[name], samples["floor"], strict=True)]
        for name in configs
    }
    histories = {
        "floor": await plain.get_workflow_handle(last["floor"].id).fetch_history(),
        "whole replies": await last["whole replies"].fetch_history(),
    }
    figures["events_per_step"] = {k: events_per_step(h) for k, h in histories.items()}
    if args.save_histories:
        # The last run of each side, for a profile of its replay or a look in the Web UI's shape.
        out = Path(args.save_histories)
        out.mkdir(parents=True, exist_ok=True)
        for name, history in histories.items():
            (out / f"{name.replace(' ', '-')}.json").write_text(history.to_json())
    # A workflow task the run's worker did not take from its sticky queue in time (or did not
    # complete in time) is handed to the normal queue: a replay, and two more events.
    timed_out = 0
    for handle in handles:
        history = await handle.fetch_history()
        timed_out += sum(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT for e in history.events
        )
    figures["workflow_task_timeouts"] = {"runs": len(handles), "timed_out": timed_out}
    treadle_replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=bench.client.data_converter,
        workflow_runner=workflow_runner(),
    )
    floor_replayer = Replayer(workflows=[FloorWorkflow])
    figures["replay_ms"] = {
        "whole replies": await replay_seconds(treadle_replayer, histories["whole replies"], 3)
        / per_step
        * 1000,
        "floor": await replay_seconds(floor_replayer, histories["floor"], 3) / per_step * 1000,
    }
    if args.profile:
        print(await profile_replay(treadle_replayer, histories["whole replies"]), file=sys.stderr)
    if args.watchers:
        figures["watched"] = await watchers.watched(
            bench, treadle.pid, tq, model, steps, reps, args.watchers, args.quiet_seconds
        )
    return figures


def render(f: dict[str, Any]) -> str:
    floor = f["floor"]
    lines = [
        f"CPU per step (ms; median of {f['reps']} interleaved runs of {f['steps']} steps; "
        "net = idle CPU taken out)",
        f"{'':34}{'worker':>8}{'net':>8}{'server':>8}{'net':>8}{'wall':>8}",
    ]
    for name in ("floor", "whole replies", "defaults"):
        v = f[name]
        lines.append(
            f"{('treadle ' + name) if name != 'floor' else 'floor (own process, SDK defaults)':34}"
            f"{v['worker_ms']:>8.1f}{v['worker_net_ms']:>8.1f}{v['server_ms']:>8.1f}"
            f"{v['server_net_ms']:>8.1f}{v['wall_ms']:>8.1f}"
        )
    for name in ("whole replies", "defaults"):
        v = f[name]
        lines.append(
            f"{'ratio, treadle ' + name:34}"
            f"{v['worker_ms'] / floor['worker_ms']:>7.2f}x"
            f"{v['worker_net_ms'] / floor['worker_net_ms']:>7.2f}x"
            f"{v['server_ms'] / floor['server_ms']:>7.2f}x"
            f"{v['server_net_ms'] / floor['server_net_ms']:>7.2f}x"
            f"{v['wall_ms'] / floor['wall_ms']:>7.2f}x"
        )
    if "worker_ratio_by_round" in f:
        spread = ", ".join(
            f"{name} {min(r):.2f}-{max(r):.2f}x" for name, r in f["worker_ratio_by_round"].items()
        )
        lines.append(f"worker ratio round by round (each against its round's floor): {spread}")
    if "worker_system_ms" in floor:
        kernel = ", ".join(
            f"{name} {f[name]['worker_system_ms']:.1f}"
            for name in ("floor", "whole replies", "defaults")
        )
        lines.append(f"of the worker's CPU, in the kernel (system calls): {kernel}")
    idle = ", ".join(f"{k} {v * 1000:.1f} ms/s" for k, v in f["idle_cpu_per_s"].items())
    lines.append(f"idle CPU: {idle}")
    events = f["events_per_step"]
    lines.append(
        f"history events per step: treadle {events['whole replies']:.1f}, "
        f"floor {events['floor']:.1f}"
    )
    if "workflow_task_timeouts" in f:
        t = f["workflow_task_timeouts"]
        lines.append(
            f"workflow tasks timed out (sticky misses) in treadle's {t['runs']} runs: "
            f"{t['timed_out']}"
        )
    replay = f["replay_ms"]
    lines.append(
        f"replay CPU per step (ms): treadle {replay['whole replies']:.2f}, floor "
        f"{replay['floor']:.2f}, ratio {replay['whole replies'] / replay['floor']:.2f}x"
    )
    if "watched" in f:
        lines.extend(watchers.render(f["watched"]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="tool steps per run")
    parser.add_argument("--reps", type=int, default=5, help="measured runs of each side")
    parser.add_argument("--profile", action="store_true", help="cProfile Treadle's replay")
    parser.add_argument(
        "--profile-worker", metavar="FILE", help="cProfile worker.py's measured rounds into FILE"
    )
    parser.add_argument(
        "--profile-floor", metavar="FILE", help="cProfile the floor worker's measured rounds"
    )
    parser.add_argument("--watchers", type=int, default=0, help="also: a run with N live views")
    parser.add_argument(
        "--quiet-seconds",
        type=float,
        default=watchers.QUIET_SECONDS,
        help="with --watchers: how long the views of a parked run are measured",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--save-histories", metavar="DIR", help="also write the last runs' histories as JSON"
    )
    parser.add_argument(
        "--sticky", type=float, help="worker.py --sticky-queue-timeout (default: its own)"
    )
    parser.add_argument(
        "--timer-shift",
        metavar="DURATION",
        help="the dev server's timer granularity (default: temporal-dev.yaml's; 1s: the server's)",
    )
    args = parser.parse_args()
    figures = asyncio.run(run(args))
    print(render(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
