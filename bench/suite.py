"""Treadle's benchmark suite: one command, a fresh dev server, one table.

    .venv/bin/python -m bench.suite [--quick] [--json FILE]
        [--rows step,recovery,replay,parked,throughput,chain,actions,growth,loop]

Every figure is a ratio against a baseline measured in the same run, or a count (events, bytes,
MB of RSS, seconds to recover). The baseline of a step is the bare Temporal floor
(``bench/floor.py``): a minimal workflow looping a model call over HTTP and a file write
against the same dev server and the same scripted model server, with no other logic. Rows:

- ``step``: ms per step of one run at a time, Treadle (defaults, as ``worker.py`` runs them, and
  without token streaming) against the floor; history events per step of both.
- ``recovery``: a ``worker.py`` process killed with SIGKILL while a run is inside a model call,
  and while a run waits for approval, with the defaults (and, in full, with the knobs as they
  were before); seconds from the replacement ``worker.py`` polling to the retry running, and
  from an approval sent after the kill to the run moving on.
- ``replay``: replaying a recorded run after a cache miss (temporalio's ``Replayer``): the
  longest run of a chain that continued as new at the default bound, per step and whole,
  against a floor history of as many steps.
- ``parked``: runs parked on approvals in one ``worker.py``: its RSS before and after 1,000
  in the default cache (a sample approved must finish), then 10,000 with the cache holding a
  tenth of them, every one approved: evicted runs are replayed on demand and finish.
- ``throughput``: steps/s with 1, 2 and 4 ``worker.py`` processes on one task queue, the ratio to
  one, and the CPU the server, the workers and the machine spent, to show where the bottleneck is.
- ``chain``: history per step through continue-as-new chains of 200 and 2,000 steps, the bytes of
  their first and last hand-over, and the store's growth after 3,000 write steps against the
  content written (``bench/chain.py``).
- ``actions``: Temporal Cloud's billable actions per step and dollars per 1,000 steps at list
  price, Treadle at defaults against the floor, model calls of 3 s and 10 s with whole and with
  streamed replies (``bench/actions.py``, which also measures other heartbeat timeouts).
- ``growth``: a ``worker.py`` process's CPU per step over windows of a 1,000-step run whose
  every step reads a new 20 KB file, the last window against the first (``bench/chain.py``).
- ``loop``: the longest a model call late in a 20 MB conversation, and a 1 MB tool output
  stored through the door, hold the event loop activities' heartbeats share (``bench/loop.py``).

Nothing is asserted: the machine is shared and noisy, so read the ratios. ``--quick`` runs small
counts (the smoke test uses it); the full suite takes a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.worker import Replayer, Worker

from bench.floor import FloorActivities, FloorInput, FloorWorkflow
from bench.local_server import dev_server_config
from bench.scripts import write_script
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.cli.worker import STICKY_QUEUE_TIMEOUT_SECONDS, build_worker
from treadle.connection import connect
from treadle.devserver import DevServer
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import workflow_runner
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentResult,
    ApproveSignal,
    RunStatus,
)
from treadle.workflows.agent.messages.search_attributes import start_attributes
from treadle.workflows.agent.workflow import AgentWorkflow

ROOT = Path(__file__).resolve().parents[1]

ROWS = ("step", "recovery", "replay", "parked", "throughput", "chain", "actions", "growth", "loop")
SUGGESTED_EVENTS = 4096
"""Temporal suggests continue-as-new at this many events: a run's history grows no further."""
BEFORE_HEARTBEAT_SECONDS = 15.0
BEFORE_STICKY_SECONDS = 10.0
"""The knobs before they were chosen for recovery (the SDK's sticky timeout): the comparison row."""
CPUS = os.cpu_count() or 1

# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table; ``values`` are its raw numbers for --json."""

    row: str
    measure: str
    treadle: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    met: str = ""
    values: dict[str, float] = field(default_factory=dict)


COLUMNS = ("row", "measure", "treadle", "baseline", "ratio", "target", "met")


def render(rows: Sequence[Row]) -> str:
    cells = [list(COLUMNS)] + [[str(getattr(r, c)) for c in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    right = {2, 3, 4}
    lines = []
    for line in cells:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "yes" if ok else "NO"


# ----------------------------------------------------------------------------------------------
# Processes: worker.py as a user runs it, and what /proc says about processes
# ----------------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (its children not included), to the nanosecond:
    the kernel's CPU clock of the process (``clock_getcpuclockid``: every thread's run time,
    those that have ended too). ``/proc``'s ticks are 10 ms, about half a millisecond a step
    in a 21-step rep: coarser than the differences measured."""
    try:
        return time.clock_gettime_ns(_process_cpu_clock(pid)) / 1e9
    except OSError:  # EINVAL: no such process (ended), or a kernel without process clocks
        return sum(cpu_times(pid))


def _process_cpu_clock(pid: int) -> int:
    """The clock id glibc's ``clock_getcpuclockid(pid)`` returns: the whole process's
    scheduler run time (``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``)."""
    return ((~pid) << 3) | 2


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process so far: system is the kernel's work for it
    (system calls: files, sockets, waking threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    parts = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    total = sum(parts[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (total - idle) / tick, total / tick


class WorkerProcess:
    """``worker.py`` in its own process, with flags as a user would pass them."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path, spawned: float) -> None:
        self.process = process
        self.log = log
        self.spawned = spawned
        self.ready = 0.0

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(
        cls, bench: Bench, task_queue: str, *flags: str, launcher: Sequence[str] = ()
    ) -> WorkerProcess:
        """``launcher``: arguments of the interpreter before ``worker.py`` (``bench.profiled``)."""
        log = bench.tmp / f"worker-{uuid.uuid4().hex[:6]}.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TEMPORAL_", "OTEL_", "TREADLE_"))
        }
        env["OPENAI_BASE_URL"] = bench.models.base_url
        env["OPENAI_API_KEY"] = "bench"
        with log.open("wb") as out:
            spawned = time.time()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                *launcher,
                str(ROOT / "worker.py"),
                "--address",
                bench.address,
                "--namespace",
                "default",
                "--task-queue",
                task_queue,
                "--store",
                str(bench.store),
                "--log-level",
                "WARNING",
                *flags,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        worker = cls(process, log, spawned)
        bench.workers.append(worker)
        deadline = time.monotonic() + 120
        while "Worker polling" not in log.read_text(errors="replace"):
            if process.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker.py did not start:\n{log.read_text(errors='replace')}")
            await asyncio.sleep(0.02)
        worker.ready = time.time()
        return worker

    def kill(self) -> float:
        """SIGKILL: no graceful shutdown, the server is not told."""
        self.process.send_signal(signal.SIGKILL)
        return time.time()

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.send_signal(signal.SIGKILL)
                await self.process.wait()


# ----------------------------------------------------------------------------------------------
# Shared set-up and helpers
# ----------------------------------------------------------------------------------------------


@dataclass
class Bench:
    quick: bool
    tmp: Path
    address: str
    server_pid: int
    client: Client
    models: ScriptedModelServer
    settings: ProviderSettings
    store: Path
    metrics_url: str | None = None
    """The dev server's Prometheus metrics (``bench.actions`` reads its request counters)."""
    workers: list[WorkerProcess] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    shared: dict[str, float] = field(default_factory=dict)

    def workspace(self, name: str) -> str:
        path = self.tmp / "ws" / f"{name}-{uuid.uuid4().hex[:12]}"
        path.mkdir(parents=True)
        return str(path)


def new_id(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:10]}"


async def start_agent(
    bench: Bench,
    task_queue: str,
    model: str,
    config: AgentConfig,
    task_timeout: timedelta | None = None,
) -> WorkflowHandle[Any, AgentResult]:
    agent_input = AgentInput(
        task="Write the files.",
        model=f"openai:{model}",
        workspace=bench.workspace("agent"),
        config=config,
    )
    return await bench.client.start_workflow(
        AgentWorkflow.run,
        agent_input,
        id=new_id("agent"),
        search_attributes=start_attributes(agent_input),  # as Treadle's clients start runs
        task_queue=task_queue,
        task_timeout=task_timeout,
    )


async def run_floor(bench: Bench, task_queue: str, steps: int) -> WorkflowHandle[Any, Any]:
    """One floor run of ``steps`` tool steps and an answer, with a model of its own."""
    name = f"floor-{uuid.uuid4().hex[:8]}"
    bench.models.add_model(name, write_script(steps), order="arrival")
    handle = await bench.client.start_workflow(
        FloorWorkflow.run,
        FloorInput(model=name, task="Write the files.", workspace=bench.workspace("floor")),
        id=new_id("floor"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.steps != steps + 1:
        raise RuntimeError(f"the floor run took {result.steps} steps, not {steps + 1}")
    return handle


def floor_worker(bench: Bench, task_queue: str, http: Any) -> Worker:
    activities = FloorActivities(bench.models.base_url, http)
    return Worker(
        bench.client,
        task_queue=task_queue,
        workflows=[FloorWorkflow],
        activities=[activities.model_call, activities.write_file],
    )


@contextlib.asynccontextmanager
async def side_by_side(bench: Bench, task_queue: str, floor_queue: str) -> AsyncIterator[None]:
    """A Treadle worker (as worker.py builds it, with the store) and a floor worker, in this
    process, sharing one HTTP client: the two sides of a ratio."""
    async with (
        http_client() as http,
        build_worker(
            bench.client,
            task_queue=task_queue,
            settings=bench.settings,
            http=http,
            store=FileBlobStore(bench.store),
        ),
        floor_worker(bench, floor_queue, http),
    ):
        yield


def event_seconds(event: Any) -> float:
    return float(event.event_time.ToMicroseconds()) / 1e6


def model_schedules(history: WorkflowHistory) -> list[int]:
    """Indexes of the model calls' ActivityTaskScheduled events (the first activity's type)."""
    scheduled = [
        i
        for i, e in enumerate(history.events)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    if not scheduled:
        return []
    model = history.events[scheduled[0]].activity_task_scheduled_event_attributes.activity_type
    return [
        i
        for i in scheduled
        if history.events[i].activity_task_scheduled_event_attributes.activity_type.name
        == model.name
    ]


def events_per_step(history: WorkflowHistory) -> float:
    """Events from one model call's scheduling to the next's, the median over the run: a step
    in steady state. What a run pays once (its start and end, the listing of its worker's tools)
    is ``events_once``."""
    calls = model_schedules(history)
    if len(calls) < 2:
        return float(len(history.events))
    return float(statistics.median(b - a for a, b in itertools.pairwise(calls)))


def events_once(history: WorkflowHistory) -> float:
    """The events a run has beyond its steps at the steady-state cost."""
    steps = len(model_schedules(history)) - 1  # the last call answers: it is not a step
    return len(history.events) - steps * events_per_step(history)


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout: float, what: str, every: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        await asyncio.sleep(every)


# ----------------------------------------------------------------------------------------------
# 1. Orchestration cost per step
# ----------------------------------------------------------------------------------------------


async def row_step(bench: Bench) -> list[Row]:
    steps = 5 if bench.quick else 20
    runs = 2 if bench.quick else 5
    model = f"step-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(steps))
    tq, fq = f"bench-step-{uuid.uuid4().hex[:6]}", f"bench-floor-{uuid.uuid4().hex[:6]}"
    variants = {
        "defaults": AgentConfig(max_steps=steps + 5),
        "no streaming": AgentConfig(max_steps=steps + 5, stream_tokens=False),
    }
    times: dict[str, list[float]] = {"floor": [], **{k: [] for k in variants}}
    last: dict[str, WorkflowHandle[Any, Any]] = {}
    async with side_by_side(bench, tq, fq):
        for i in range(runs + 1):  # the first round warms both up and is not counted
            start = time.perf_counter()
            last["floor"] = await run_floor(bench, fq, steps)
            if i:
                times["floor"].append(time.perf_counter() - start)
            for name, config in variants.items():
                start = time.perf_counter()
                handle = await start_agent(bench, tq, model, config)
                result = await handle.result()
                if result.status is not RunStatus.DONE or result.steps != steps + 1:
                    raise RuntimeError(f"treadle run ended {result.status} after {result.steps}")
                if i:
                    times[name].append(time.perf_counter() - start)
                last[name] = handle
    per_step = {k: statistics.median(v) / (steps + 1) * 1000 for k, v in times.items()}
    histories = {k: await h.fetch_history() for k, h in last.items()}
    events = {k: events_per_step(h) for k, h in histories.items()}
    once = {k: events_once(h) for k, h in histories.items()}
    bench.shared["events_per_step"] = events["defaults"]
    how = f"1 run at a time, {steps + 1} steps, median of {runs}"
    rows = []
    for name in variants:
        ratio = per_step[name] / per_step["floor"]
        rows.append(
            Row(
                "step",
                f"ms per step, treadle {name} ({how})",
                f"{per_step[name]:.1f}",
                f"{per_step['floor']:.1f}",
                f"{ratio:.2f}x",
                "<= 1.15x",
                verdict(ratio <= 1.15),
                {"treadle_ms": per_step[name], "floor_ms": per_step["floor"], "ratio": ratio},
            )
        )
    for name in variants:
        rows.append(
            Row(
                "step",
                f"history events per step, treadle {name} (steady state: median gap between "
                "model calls)",
                f"{events[name]:.1f}",
                f"{events['floor']:.1f}",
                f"{events[name] / events['floor']:.2f}x",
                "<= 14",
                verdict(events[name] <= 14),
                {"treadle_events": events[name], "floor_events": events["floor"]},
            )
        )
    rows.append(
        Row(
            "step",
            "events a run pays once, treadle defaults (start, end, tool listing)",
            f"{once['defaults']:.0f}",
            f"{once['floor']:.0f}",
            values={"treadle_events": once["defaults"], "floor_events": once["floor"]},
        )
    )
    return rows


# ----------------------------------------------------------------------------------------------
# 2. Recovery after SIGKILL
# ----------------------------------------------------------------------------------------------


def first_after(history: WorkflowHistory, index: int, kind: int) -> Any:
    for event in history.events[index + 1 :]:
        if event.event_type == kind:
            return event
    raise RuntimeError(f"no event of type {kind} after event {index + 1}")


def sticky_flags(sticky: float | None) -> tuple[str, ...]:
    return () if sticky is None else ("--sticky-queue-timeout", str(sticky))


async def recover_model_call(
    bench: Bench, heartbeat: float | None, sticky: float | None
) -> tuple[float, float, float, float]:
    """Kill the worker inside a model call (``None``: the defaults). Seconds: replacement
    ready (polling) -> retry started, kill -> retry started, the retry's completion -> the
    run's next workflow task, and the replacement's own start-up."""
    tq = f"bench-rec-{uuid.uuid4().hex[:6]}"
    model = f"slow-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(1, delay=4.0))
    flags = sticky_flags(sticky)
    first = await WorkerProcess.start(bench, tq, *flags)
    config = AgentConfig(max_steps=5)
    if heartbeat is not None:
        config = config.model_copy(update={"heartbeat_timeout_seconds": heartbeat})
    handle = await start_agent(bench, tq, model, config)

    async def called() -> bool:
        return len(bench.models.requests_for(model)) >= 1

    await wait_for(called, 60, "the first model call")

    async def beaten() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return bool(pending) and pending[0].HasField("last_heartbeat_time")

    # Mid-call, just after the server heard a heartbeat: the heartbeat timeout runs from that
    # beat, not from the attempt's start, which is the realistic case and the slower one.
    await wait_for(beaten, 30, "the model call's first heartbeat", every=0.02)
    killed = first.kill()
    await first.process.wait()
    replacement = await WorkerProcess.start(bench, tq, *flags)
    result = await asyncio.wait_for(handle.result(), 120)
    if result.status is not RunStatus.DONE:
        raise RuntimeError(f"the killed run ended {result.status}: {result.error}")
    history = await handle.fetch_history()
    calls = model_schedules(history)
    started = first_after(history, calls[0], EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    attempt = started.activity_task_started_event_attributes.attempt
    if attempt < 2:
        raise RuntimeError("the model call was not retried: the kill came too late")
    retry_start = event_seconds(started)
    completed = first_after(history, calls[0], EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    index = list(history.events).index(completed)
    next_task = first_after(history, index, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)
    await replacement.stop()
    return (
        retry_start - replacement.ready,
        retry_start - killed,
        event_seconds(next_task) - event_seconds(completed),
        replacement.ready - replacement.spawned,
    )


async def recover_approval(bench: Bench, sticky: float | None) -> float:
    """Kill the worker holding a run parked on approval, start another, approve: seconds from
    the signal to the approved tool's scheduling."""
    tq = f"bench-rec-{uuid.uuid4().hex[:6]}"
    model = f"appr-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(1))
    flags = sticky_flags(sticky)
    first = await WorkerProcess.start(bench, tq, *flags)
    config = AgentConfig(require_approval=("write_file",), max_steps=5)
    handle = await start_agent(bench, tq, model, config)

    async def parked() -> bool:
        return (await handle.query(AgentWorkflow.state)).state.value == "WaitingForHuman"

    await wait_for(parked, 60, "the run to wait for approval")
    first.kill()
    await first.process.wait()
    replacement = await WorkerProcess.start(bench, tq, *flags)
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    result = await asyncio.wait_for(handle.result(), 120)
    if result.status is not RunStatus.DONE:
        raise RuntimeError(f"the approved run ended {result.status}: {result.error}")
    history = await handle.fetch_history()
    signalled = next(
        i
        for i, e in enumerate(history.events)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )
    tool = first_after(history, signalled, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    await replacement.stop()
    return event_seconds(tool) - event_seconds(history.events[signalled])


async def row_recovery(bench: Bench) -> list[Row]:
    defaults = AgentConfig().heartbeat_timeout_seconds, STICKY_QUEUE_TIMEOUT_SECONDS
    settings: list[tuple[str, float | None, float | None]] = [("defaults", None, None)]
    if not bench.quick:
        settings.append(("before", BEFORE_HEARTBEAT_SECONDS, BEFORE_STICKY_SECONDS))
    rows = []
    for label, heartbeat, sticky in settings:
        shown = (heartbeat or defaults[0], sticky or defaults[1])
        how = f"heartbeat_timeout_seconds={shown[0]:g}, --sticky-queue-timeout {shown[1]:g}"
        from_start, from_kill, moved_on, startup = await recover_model_call(
            bench, heartbeat, sticky
        )
        approval = await recover_approval(bench, sticky)
        rows += [
            Row(
                "recovery",
                f"s, replacement up -> model call retried ({label}: {how})",
                f"{from_start:.2f}",
                target="<= 2 s",
                met=verdict(from_start <= 2),
                values={"seconds": from_start, "heartbeat": shown[0], "sticky": shown[1]},
            ),
            Row(
                "recovery",
                f"s, SIGKILL -> model call retried ({label}; replacement up in {startup:.1f} s)",
                f"{from_kill:.2f}",
                values={"seconds": from_kill, "startup": startup},
            ),
            Row(
                "recovery",
                f"s, retried call done -> run's next workflow task ({label})",
                f"{moved_on:.2f}",
                values={"seconds": moved_on},
            ),
            Row(
                "recovery",
                f"s, approve signal after the kill -> tool scheduled ({label})",
                f"{approval:.2f}",
                target="<= 2 s",
                met=verdict(approval <= 2),
                values={"seconds": approval, "sticky": shown[1]},
            ),
        ]
    return rows


# ----------------------------------------------------------------------------------------------
# 3. Replay after a cache miss
# ----------------------------------------------------------------------------------------------


async def time_replay(replayer: Replayer, history: WorkflowHistory, repeats: int) -> float:
    await replayer.replay_workflow(history)  # warm: imports, the sandbox's first module copies
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await replayer.replay_workflow(history)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def row_replay(bench: Bench) -> list[Row]:
    # Full: long enough that the chain holds a run grown to the default bound and past it.
    steps = 10 if bench.quick else 150
    bound = AgentConfig().continue_as_new_after_events or SUGGESTED_EVENTS
    tq, fq = f"bench-rep-{uuid.uuid4().hex[:6]}", f"bench-rfloor-{uuid.uuid4().hex[:6]}"
    model = f"rep-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(steps))
    async with side_by_side(bench, tq, fq):
        handle = await start_agent(bench, tq, model, AgentConfig(max_steps=steps + 5))
        result = await handle.result()
        if result.status is not RunStatus.DONE:
            raise RuntimeError(f"the recorded run ended {result.status}: {result.error}")
        histories = []
        async for execution in bench.client.list_workflows(f"WorkflowId = '{handle.id}'"):
            run = bench.client.get_workflow_handle(handle.id, run_id=execution.run_id)
            histories.append(await run.fetch_history())
        history = max(histories, key=lambda h: len(h.events))
        run_steps = len(model_schedules(history))
        floor = await run_floor(bench, fq, run_steps - 1)
        floor_history = await floor.fetch_history()
    repeats = 2 if bench.quick else 3
    treadle = await time_replay(
        Replayer(
            workflows=WORKFLOWS,
            data_converter=bench.client.data_converter,
            workflow_runner=workflow_runner(),
        ),
        history,
        repeats,
    )
    base = await time_replay(
        Replayer(workflows=[FloorWorkflow], data_converter=bench.client.data_converter),
        floor_history,
        repeats,
    )
    per_step, floor_step = treadle / run_steps * 1000, base / run_steps * 1000
    step_events = max(events_per_step(history), 1)
    full_steps = SUGGESTED_EVENTS / step_events
    full = per_step * full_steps / 1000
    # The longest run whose replay takes a second: what continue_as_new_after_events should be.
    second_steps = 1000 / per_step
    chain = f"{len(histories)} run(s) in the chain" if len(histories) > 1 else "1 run"
    grown = len(history.events) >= bound  # the run reached the bound: it is a full run
    return [
        Row(
            "replay",
            f"ms per step, replay of a {run_steps}-step run "
            f"({len(history.events)} events; {chain})",
            f"{per_step:.2f}",
            f"{floor_step:.2f}",
            f"{per_step / floor_step:.2f}x",
            values={"treadle_ms": per_step, "floor_ms": floor_step, "steps": run_steps},
        ),
        Row(
            "replay",
            f"s, replay of that run (whole history, {len(history.events)} events"
            + (f": continue_as_new_after_events={bound} bounds every run)" if grown else ")"),
            f"{treadle:.2f}",
            f"{base:.2f}",
            f"{treadle / base:.2f}x",
            "<= 1 s" if grown else "",
            verdict(treadle <= 1) if grown else "",
            values={"treadle_s": treadle, "floor_s": base, "bound": bound},
        ),
        Row(
            "replay",
            f"s, replay of a run grown to Temporal's suggestion, by the per-step cost "
            f"(~{full_steps:.0f} steps to {SUGGESTED_EVENTS} events; "
            "continue_as_new_after_events=None)",
            f"{full:.2f}",
            values={"seconds": full, "steps": full_steps},
        ),
        Row(
            "replay",
            "steps (events) a run may grow to for a 1 s replay: continue_as_new_after_events",
            f"{second_steps:.0f} ({second_steps * step_events:.0f})",
            values={"steps": second_steps, "events": second_steps * step_events},
        ),
    ]


# ----------------------------------------------------------------------------------------------
# 4. Parked runs
# ----------------------------------------------------------------------------------------------


@dataclass
class Parked:
    """What parking ``runs`` on approvals in one worker.py did to it."""

    runs: int
    cache: int
    idle_mb: float
    parked_mb: float
    park_seconds: float
    approved: int
    done: int
    approve_seconds: float
    end_mb: float


async def park(bench: Bench, count: int, cache: int, *, approve_all: bool) -> Parked:
    """``count`` runs parked on approval in one worker.py holding at most ``cache`` of them;
    then every one approved (``approve_all``: all of them must be replayed on demand when the
    cache is smaller) or a sample, and the approved runs counted as they finish."""
    tq = f"bench-park-{uuid.uuid4().hex[:6]}"
    model = f"park-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(1))
    worker = await WorkerProcess.start(bench, tq, "--max-cached-workflows", str(cache))
    await asyncio.sleep(1.0)
    idle = rss_mb(worker.pid)
    config = AgentConfig(require_approval=("write_file",), max_steps=5)
    start = time.perf_counter()
    handles: list[WorkflowHandle[Any, AgentResult]] = []
    for first in range(0, count, 50):
        handles += await asyncio.gather(
            *(start_agent(bench, tq, model, config) for _ in range(first, min(count, first + 50)))
        )
    in_queue = f"TaskQueue = '{tq}'"

    async def counted(query: str) -> int:
        return (await bench.client.count_workflows(f"{in_queue} AND {query}")).count

    async def none_failed() -> None:
        ended = await counted("ExecutionStatus != 'Running' AND AgentState != 'Done'")
        if ended:
            raise RuntimeError(f"{ended} run(s) ended without finishing; see {worker.log}")

    async def all_parked() -> bool:
        await none_failed()
        return await counted("AgentState = 'WaitingForHuman'") >= count

    await wait_for(all_parked, 60 + count * 0.5, f"{count} runs to park", every=0.5)
    parked_in = time.perf_counter() - start
    print(f"[parked: {count} runs parked in {parked_in:.0f} s]", file=sys.stderr, flush=True)
    await asyncio.sleep(2.0)  # let the last workflow tasks settle
    parked = rss_mb(worker.pid)
    chosen = handles if approve_all else handles[:: max(1, count // (5 if bench.quick else 20))]
    start = time.perf_counter()
    for first in range(0, len(chosen), 100):
        await asyncio.gather(
            *(h.signal(AgentWorkflow.approve, ApproveSignal()) for h in chosen[first : first + 100])
        )

    async def all_done() -> bool:
        await none_failed()
        return await counted("AgentState = 'Done'") >= len(chosen)

    await wait_for(all_done, 60 + len(chosen) * 0.5, f"{len(chosen)} approved runs", every=0.5)
    approved_in = time.perf_counter() - start
    done = await counted("AgentState = 'Done'")
    end = rss_mb(worker.pid)
    await worker.stop()
    return Parked(count, cache, idle, parked, parked_in, len(chosen), done, approved_in, end)


async def row_parked(bench: Bench) -> list[Row]:
    """1,000 runs in the default cache (the memory target), then ten times as many as the
    cache holds, every one approved: eviction and replay on demand."""
    default_cache = 1000
    scenarios = (
        [(50, 50, False), (200, 20, True)]
        if bench.quick
        else [
            (1000, default_cache, False),
            (10_000, default_cache, True),
        ]
    )
    rows = []
    for count, cache, approve_all in scenarios:
        got = await park(bench, count, cache, approve_all=approve_all)
        label = f"{count} runs, cache {cache}"
        per_run = (got.parked_mb - got.idle_mb) / min(count, cache) * 1024
        memory_target = count == cache and count >= 1000
        rows += [
            Row(
                "parked",
                f"worker RSS MB, {label}, all parked (idle worker {got.idle_mb:.0f} MB; "
                f"parked in {got.park_seconds:.0f} s)",
                f"{got.parked_mb:.0f}",
                f"{got.idle_mb:.0f}",
                f"{got.parked_mb / got.idle_mb:.2f}x",
                "<= 300 MB" if memory_target else "",
                verdict(got.parked_mb <= 300) if memory_target else "",
                {
                    "rss_mb": got.parked_mb,
                    "idle_mb": got.idle_mb,
                    "runs": count,
                    "cache": cache,
                    "park_seconds": got.park_seconds,
                },
            ),
            Row(
                "parked",
                f"KiB per cached parked run ({label})",
                f"{per_run:.0f}",
                values={"kib_per_run": per_run},
            ),
            Row(
                "parked",
                f"approved runs finished / approved ({label}; "
                f"{'every one' if approve_all else 'a sample'}, in {got.approve_seconds:.0f} s)",
                f"{got.done}/{got.approved}",
                target="all" if approve_all else "",
                met=verdict(got.done == got.approved),
                values={
                    "done": got.done,
                    "approved": got.approved,
                    "approve_seconds": got.approve_seconds,
                },
            ),
        ]
        if approve_all:
            rows.append(
                Row(
                    "parked",
                    f"worker RSS MB after approving them all ({label})",
                    f"{got.end_mb:.0f}",
                    values={"rss_mb": got.end_mb},
                )
            )
    return rows


# ----------------------------------------------------------------------------------------------
# 5. Throughput with N workers
# ----------------------------------------------------------------------------------------------


async def row_throughput(bench: Bench) -> list[Row]:
    counts = (1, 2) if bench.quick else (1, 2, 4)
    runs, steps = (8, 3) if bench.quick else (40, 5)
    model = f"tput-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(steps))
    rows = []
    base = 0.0
    for n in counts:
        tq = f"bench-tput-{uuid.uuid4().hex[:6]}"
        workers = [await WorkerProcess.start(bench, tq) for _ in range(n)]
        warm = await start_agent(bench, tq, model, AgentConfig(max_steps=steps + 5))
        await warm.result()
        pids = [w.pid for w in workers]
        server0, workers0 = cpu_seconds(bench.server_pid), sum(map(cpu_seconds, pids))
        me0, (busy0, total0) = cpu_seconds(os.getpid()), machine_busy()
        start = time.perf_counter()
        handles = await asyncio.gather(
            *(start_agent(bench, tq, model, AgentConfig(max_steps=steps + 5)) for _ in range(runs))
        )
        results = await asyncio.gather(*(h.result() for h in handles))
        wall = time.perf_counter() - start
        if any(r.status is not RunStatus.DONE for r in results):
            raise RuntimeError("a throughput run did not finish")
        server = (cpu_seconds(bench.server_pid) - server0) / wall / CPUS
        worker_cpu = (sum(map(cpu_seconds, pids)) - workers0) / wall / CPUS
        me = (cpu_seconds(os.getpid()) - me0) / wall / CPUS
        busy1, total1 = machine_busy()
        machine = (busy1 - busy0) / (total1 - total0)
        for worker in workers:
            await worker.stop()
        rate = runs * (steps + 1) / wall
        base = base or rate
        rows.append(
            Row(
                "throughput",
                f"steps/s, {n} worker.py ({runs} runs x {steps + 1} steps); CPU of {CPUS} cores: "
                f"server {server:.0%}, workers {worker_cpu:.0%}, bench+model {me:.0%}, "
                f"other processes {max(0.0, machine - server - worker_cpu - me):.0%}",
                f"{rate:.1f}",
                f"{base:.1f}",
                f"{rate / base:.2f}x",
                values={
                    "workers": n,
                    "steps_per_s": rate,
                    "ratio": rate / base,
                    "server_cpu": server,
                    "workers_cpu": worker_cpu,
                    "bench_cpu": me,
                    "machine_busy": machine,
                },
            )
        )
    return rows


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Bench], Awaitable[list[Row]]]] = {
    "step": row_step,
    "recovery": row_recovery,
    "replay": row_replay,
    "parked": row_parked,
    "throughput": row_throughput,
    "chain": lambda bench: _chain_rows(bench),
    "actions": lambda bench: _actions_rows(bench),
    "growth": lambda bench: _growth_rows(bench),
    "loop": lambda bench: _loop_rows(bench),
}


async def _chain_rows(bench: Bench) -> list[Row]:
    from bench.chain import row_chain  # it builds on this module's Bench and Row

    return await row_chain(bench)


async def _actions_rows(bench: Bench) -> list[Row]:
    from bench.actions import row_actions  # it builds on this module's Bench and Row

    return await row_actions(bench)


async def _growth_rows(bench: Bench) -> list[Row]:
    from bench.chain import row_growth

    return await row_growth(bench)


async def _loop_rows(bench: Bench) -> list[Row]:
    from bench.loop import row_loop

    return await row_loop(bench)


@contextlib.asynccontextmanager
async def bench_setup(
    quick: bool, tmp: Path, timer_shift: str | None = None
) -> AsyncIterator[Bench]:
    async with DevServer.ensure(dev_server_config(tmp / "dev.sqlite", timer_shift)) as server:
        if server.pid is None:
            raise RuntimeError("the suite needs a dev server of its own")
        with ScriptedModelServer(keep_requests=256) as models:
            store = tmp / "store"
            client = await connect(address=server.address, namespace="default", store=store)
            bench = Bench(
                quick=quick,
                tmp=tmp,
                address=server.address,
                server_pid=server.pid,
                client=client,
                models=models,
                settings=ProviderSettings.from_env({"OPENAI_BASE_URL": models.base_url}),
                store=store,
                metrics_url=server.config.metrics_url,
            )
            try:
                yield bench
            finally:
                for worker in bench.workers:
                    if worker.process.returncode is None:
                        worker.process.send_signal(signal.SIGKILL)
                        await worker.process.wait()


async def main_async(args: argparse.Namespace) -> list[Row]:
    chosen = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(chosen) - set(ROWS))
    if unknown:
        raise SystemExit(f"unknown row(s): {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    rows: list[Row] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="treadle-suite-") as tmp_dir:
        async with bench_setup(args.quick, Path(tmp_dir)) as bench:
            for name in ROWS:
                if name in chosen:
                    begun = time.perf_counter()
                    rows += await RUNNERS[name](bench)
                    print(f"[{name}: {time.perf_counter() - begun:.0f} s]", file=sys.stderr)
    load = os.getloadavg()[0]
    print(
        f"Treadle benchmark suite{' (--quick)' if args.quick else ''}: fresh dev server, "
        f"{CPUS} CPUs, load average {load:.1f} at the end, {time.perf_counter() - started:.0f} s"
    )
    print("baseline: the bare Temporal floor (bench/floor.py) or the row's own reference")
    print(render(rows))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"quick": args.quick, "cpus": CPUS, "rows": [asdict(r) for r in rows]}, indent=2
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke test)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated: {ROWS}")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
