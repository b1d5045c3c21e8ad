"""Long chains: history per step across hand-overs, the store's growth against the content
written (issue 22's targets), and a step's worker CPU late in a long conversation against early
in it (issue 39). The suite's ``chain`` and ``growth`` rows:

    .venv/bin/python -m bench.suite --rows chain          # 200-, 2,000-step chains; 3,000 writes
    .venv/bin/python -m bench.suite --quick --rows chain   # small counts
    .venv/bin/python -m bench.suite --rows growth         # 1,000 steps of 20 KB observations
    .venv/bin/python -m bench.suite --quick --rows growth  # 100 steps

``chain``:

1. a run of N steps that each read a new 2 KB file, through its continue-as-new chain (800
   events a run, the default): the history of every run of the chain over the steps, and the
   bytes of the first and the last hand-over (the continue-as-new command's input);
2. a run of 3,000 steps that each write a new 2 KB file: the bytes the store gained (the
   conversation store and External Storage's blobs) against the content written.

``growth``: one run of 1,000 steps that each read a new 20 KB file (a 20 MB conversation, far
past the model's 128k-token window, so every call late in it is sent a view), on ``worker.py``
in its own process at the defaults (only ``max_observation_chars`` raised, so an observation is
the whole 20 KB). The worker's CPU is read as the run goes (the process's CPU clock, each time
the scripted model has answered another window's worth of calls): CPU per step over each window
of 50 steps, printed, and the row is the last window's against the first's (target: within
1.2x, a model call's work does not grow with the conversation). The machine's load is printed
with it: on a shared machine the ratio is the figure to read, not the milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from pathlib import Path
from typing import Any

from bench.suite import Bench, Row, WorkerProcess, cpu_seconds, verdict
from treadle.activities.model.activity import http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.cli.worker import build_worker
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

FILE_BYTES = 2_000
PER_STEP_TARGET = 4 * 1024


def _reads(steps: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": f"r{i}.txt"}}]}
        for i in range(steps)
    ]
    return [*turns, {"content": "read them all"}]


def _writes(steps: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": f"w{i}.txt", "content": f"{i:06d}" * (FILE_BYTES // 6)},
                }
            ]
        }
        for i in range(steps)
    ]
    return [*turns, {"content": "wrote them all"}]


def _bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


async def _chain(bench: Bench, workflow_id: str) -> list[tuple[int, int | None]]:
    """(history bytes, bytes of its continue-as-new input or None) of every run, first first."""
    runs: list[tuple[int, int | None]] = []
    handle = bench.client.get_workflow_handle(workflow_id)
    first = (await handle.fetch_history()).events[0]
    run_id: str | None = first.workflow_execution_started_event_attributes.first_execution_run_id
    while run_id:
        history = await bench.client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        size = sum(e.ByteSize() for e in history.events)
        last = history.events[-1]
        if last.HasField("workflow_execution_continued_as_new_event_attributes"):
            attributes = last.workflow_execution_continued_as_new_event_attributes
            runs.append((size, attributes.input.ByteSize()))
            run_id = attributes.new_execution_run_id
        else:
            runs.append((size, None))
            run_id = None
    return runs


async def _run(
    bench: Bench, queue: str, script: list[dict[str, Any]], workspace: str, steps: int
) -> tuple[str, AgentResult, float]:
    name = f"chain-{uuid.uuid4().hex[:8]}"
    # A view shows the model fewer turns than the conversation holds: answer in arrival order.
    bench.models.add_model(name, script, order="arrival")
    workflow_id = f"bench-chain-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    handle = await bench.client.start_workflow(
        AgentWorkflow.run,
        AgentInput(
            task="Work through the files.",
            model=f"openai:{name}",
            workspace=workspace,
            config=AgentConfig(max_steps=steps + 5, stream_tokens=False),
        ),
        id=workflow_id,
        task_queue=queue,
    )
    result: AgentResult = await handle.result()
    return workflow_id, result, time.perf_counter() - started


async def row_chain(bench: Bench) -> list[Row]:
    lengths = (20, 60) if bench.quick else (200, 2_000)
    write_steps = 60 if bench.quick else 3_000
    rows: list[Row] = []
    queue = f"bench-chain-{uuid.uuid4().hex[:6]}"
    store = bench.tmp / "chain-store"
    async with (
        http_client() as http,
        build_worker(
            bench.client,
            task_queue=queue,
            settings=bench.settings,
            http=http,
            store=FileBlobStore(store),
        ),
    ):
        for steps in lengths:
            workspace = bench.workspace(f"reads-{steps}")
            for i in range(steps):
                Path(workspace, f"r{i}.txt").write_text(f"{i:06d}" * (FILE_BYTES // 6))
            workflow_id, result, seconds = await _run(bench, queue, _reads(steps), workspace, steps)
            runs = await _chain(bench, workflow_id)
            per_step = sum(size for size, _ in runs) / (steps + 1)
            hand_overs = [cost for _, cost in runs if cost is not None]
            rows.append(
                Row(
                    "chain",
                    f"history per step, {steps} steps reading 2 KB, {len(runs)} run(s) "
                    f"({result.status.value}, {seconds:.0f} s)",
                    f"{per_step / 1024:.2f} KiB",
                    target="<= 4 KiB",
                    met="yes" if per_step <= PER_STEP_TARGET else "NO",
                    values={"per_step_bytes": per_step, "runs": len(runs)},
                )
            )
            if hand_overs:
                rows.append(
                    Row(
                        "chain",
                        f"bytes of a hand-over, first and last of {len(hand_overs)} "
                        f"({steps}-step chain)",
                        f"{hand_overs[-1]}",
                        baseline=f"{hand_overs[0]}",
                        ratio=f"{hand_overs[-1] / hand_overs[0]:.2f}x",
                        target="same",
                        met="yes"
                        if abs(hand_overs[-1] - hand_overs[0]) <= hand_overs[0] / 5
                        else "NO",
                        values={"first": hand_overs[0], "last": hand_overs[-1]},
                    )
                )
        external_before = _bytes(bench.store)
        before = _bytes(store)
        workspace = bench.workspace("writes")
        workflow_id, result, seconds = await _run(
            bench, queue, _writes(write_steps), workspace, write_steps
        )
        gained = _bytes(store) - before + _bytes(bench.store) - external_before
        written = write_steps * (FILE_BYTES // 6) * 6
        runs = await _chain(bench, workflow_id)
        allowed = 2 * written + 1024 * write_steps
        rows.append(
            Row(
                "chain",
                f"store bytes after {write_steps} steps writing 2 KB ({len(runs)} run(s), "
                f"{result.status.value}, {seconds:.0f} s) against the content written",
                f"{gained / 1024 / 1024:.2f} MiB",
                baseline=f"{written / 1024 / 1024:.2f} MiB",
                ratio=f"{gained / written:.2f}x",
                target="<= 2x + 1 KB/step",
                met="yes" if gained <= allowed and result.status is RunStatus.DONE else "NO",
                values={"store_bytes": gained, "content_bytes": written},
            )
        )
    return rows


OBSERVATION_BYTES = 20_000
GROWTH_TARGET = 1.2
GROWTH_CONFIG: dict[str, Any] = {}
"""Settings of the growth run beyond the defaults (none: it runs as a user's would)."""


def _observations(steps: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "read_file", "arguments": {"path": f"o{i}.txt"}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 20},
        }
        for i in range(steps)
    ]
    return [*turns, {"content": "read them all"}]


class _Calls:
    """How many calls the scripted model has answered, counted from its recorded requests (it
    keeps the newest few hundred: polled often enough, each new one is seen once)."""

    def __init__(self, bench: Bench, model: str) -> None:
        self.bench = bench
        self.model = model
        self.count = 0
        self._last: object | None = None

    def poll(self) -> int:
        requests = self.bench.models.requests
        seen = next((i for i, r in enumerate(requests) if r is self._last), None)
        new = requests if seen is None else requests[seen + 1 :]
        self.count += sum(1 for r in new if r.model == self.model)
        if requests:
            self._last = requests[-1]
        return self.count


async def row_growth(bench: Bench) -> list[Row]:
    """Worker CPU per step over windows of a long conversation; the last against the first."""
    steps, window = (100, 10) if bench.quick else (1_000, 50)
    queue = f"bench-growth-{uuid.uuid4().hex[:6]}"
    workspace = bench.workspace("growth")
    for i in range(steps):
        Path(workspace, f"o{i}.txt").write_text(f"{i:06d} " * (OBSERVATION_BYTES // 7 + 1))
    name = f"growth-{uuid.uuid4().hex[:8]}"
    bench.models.add_model(name, _observations(steps), order="arrival")
    worker = await WorkerProcess.start(bench, queue)
    loads = [os.getloadavg()[0]]
    try:
        handle = await bench.client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="Read every file.",
                model=f"openai:{name}",
                workspace=workspace,
                config=AgentConfig(
                    max_steps=steps + 5,
                    max_observation_chars=OBSERVATION_BYTES + 1_000,
                    **GROWTH_CONFIG,
                ),
            ),
            id=f"bench-growth-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        calls = _Calls(bench, name)
        # (calls answered, worker CPU seconds) at each window's end; call N+1 is made once step
        # N's work is done, so the CPU read when it arrives is the CPU of steps 1..N.
        marks: list[tuple[int, float]] = [(0, cpu_seconds(worker.pid))]
        started = time.perf_counter()
        result_task = asyncio.ensure_future(handle.result())
        while not result_task.done():
            count = calls.poll()
            if count - 1 >= marks[-1][0] + window:
                marks.append((count - 1, cpu_seconds(worker.pid)))
                loads.append(os.getloadavg()[0])
            await asyncio.wait({result_task}, timeout=0.01)
        result: AgentResult = result_task.result()
        seconds = time.perf_counter() - started
    finally:
        await worker.stop()
    per_step = [
        ((a, b), (cpu_b - cpu_a) / (b - a) * 1000)
        for (a, cpu_a), (b, cpu_b) in itertools.pairwise(marks)
        if b > a
    ]
    ended = ""
    if result.status is not RunStatus.DONE:
        ended = f"; the run ended {result.status.value}: {result.error}"
    print(
        f"worker CPU per step (ms), {steps} steps of {OBSERVATION_BYTES // 1000} KB "
        f"observations, {seconds:.0f} s, load {min(loads):.1f}-{max(loads):.1f}{ended}:"
    )
    for (a, b), ms in per_step:
        print(f"  steps {a + 1:>5}-{b:<5} {ms:7.1f}")
    if len(per_step) < 2:
        return [Row("growth", f"worker CPU per step{ended}", "-", met="NO")]
    first, last = per_step[0][1], per_step[-1][1]
    print(f"  last window / first: {last / first:.2f}x (target <= {GROWTH_TARGET}x)")
    # The first window's early calls are shown the whole conversation, shorter than a view
    # (the 128k-token window fills at about step 25): the second is all views.
    second = per_step[1][1]
    print(f"  last window / second: {last / second:.2f}x")
    return [
        Row(
            "growth",
            f"worker CPU per step, steps {per_step[-1][0][0] + 1}-{per_step[-1][0][1]} against "
            f"1-{per_step[0][0][1]} ({steps} steps of {OBSERVATION_BYTES // 1000} KB "
            f"observations, load {min(loads):.1f}-{max(loads):.1f}{ended})",
            f"{last:.1f} ms",
            f"{first:.1f} ms",
            f"{last / first:.2f}x",
            f"<= {GROWTH_TARGET}x",
            verdict(not ended and last / first <= GROWTH_TARGET),
            {
                "first_ms": first,
                "last_ms": last,
                "ratio": last / first,
                "ratio_to_second": last / per_step[1][1],
                **{f"steps_{a + 1}_{b}_ms": ms for (a, b), ms in per_step},
            },
        )
    ]
