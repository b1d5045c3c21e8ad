"""Recovery counted from the SIGKILL, with a standby worker already polling.

    python -m bench.recovery [--reps 3] [--heartbeat SECONDS]

Two ``worker.py`` processes poll one task queue. A run's model call (the scripted model answers
after 4 s) is found on whichever worker took it (the pending activity's worker identity holds
its PID); that worker is killed with SIGKILL just after the server heard its heartbeat (the
slower, realistic case: the heartbeat timeout runs from the last beat), and a new standby is
started for the next rep. Printed: seconds from the kill to the retry's start (its
``ActivityTaskStarted`` event), and for a run parked on an approval whose worker is killed and
approved as soon as it is dead (``--approve-at-kill``: in the same instant), seconds from the
kill to the approved tool's scheduling. Also the server load of a running call: heartbeats per
second. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState, TaskQueueKind, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle

from bench.scripts import write_script
from bench.suite import (
    ROOT,
    Bench,
    WorkerProcess,
    bench_setup,
    cpu_seconds,
    event_seconds,
    first_after,
    model_schedules,
    start_agent,
    wait_for,
)
from treadle.activities.heartbeat import MIN_INTERVAL_SECONDS
from treadle.workflows.agent.messages.models import AgentConfig, ApproveSignal, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


def pid_of(identity: str) -> int:
    """The SDK's default worker identity is ``PID@host``."""
    return int(identity.split("@", 1)[0])


async def model_call_retry(
    bench: Bench,
    tq: str,
    workers: list[WorkerProcess],
    config: AgentConfig,
    *,
    verbose: bool = False,
) -> float:
    """Kill the worker inside a model call; seconds from the kill to the retry's start."""
    model = f"slow-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(1, delay=4.0))
    handle = await start_agent(bench, tq, model, config)
    identity = ""

    async def beaten() -> bool:
        nonlocal identity
        pending = (await handle.describe()).raw_description.pending_activities
        if pending and pending[0].HasField("last_heartbeat_time"):
            identity = pending[0].last_worker_identity
            return True
        return False

    await wait_for(beaten, 60, "the model call's first heartbeat", every=0.02)
    victim = next(w for w in workers if w.pid == pid_of(identity))
    beat = (await handle.describe()).raw_description.pending_activities[0].last_heartbeat_time
    killed = victim.kill()
    await victim.process.wait()
    timeline = await retry_timeline(handle) if verbose else {}
    result = await asyncio.wait_for(handle.result(), 120)
    if result.status is not RunStatus.DONE:
        raise RuntimeError(f"the killed run ended {result.status}: {result.error}")
    history = await handle.fetch_history()
    started = first_after(
        history, model_schedules(history)[0], EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    )
    if started.activity_task_started_event_attributes.attempt < 2:
        raise RuntimeError("the model call was not retried: the kill came too late")
    workers.remove(victim)
    if verbose:
        timeline["retry started (event)"] = event_seconds(started)
        timeline["last heartbeat heard"] = beat.ToMicroseconds() / 1e6
        for what, at in sorted(timeline.items(), key=lambda item: item[1]):
            print(f"  {at - killed:+7.3f} s  {what}", file=sys.stderr)
    return event_seconds(started) - killed


async def retry_timeline(handle: WorkflowHandle[Any, Any]) -> dict[str, float]:
    """When the server saw the killed attempt time out and scheduled the next, as the pending
    activity shows it (polled every 10 ms until the next attempt starts)."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pending = (await handle.describe()).raw_description.pending_activities
        if not pending or pending[0].attempt < 2:
            await asyncio.sleep(0.01)
            continue
        info = pending[0]
        if "attempt 2 seen by describe" not in seen:
            seen["attempt 2 seen by describe"] = time.time()
            if info.HasField("next_attempt_schedule_time"):
                due = info.next_attempt_schedule_time
                seen["attempt 2 due (server)"] = due.ToMicroseconds() / 1e6
        if info.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            seen["attempt 2 started (server)"] = info.last_started_time.ToMicroseconds() / 1e6
            break
        await asyncio.sleep(0.01)
    return seen


async def approval_after_kill(
    bench: Bench,
    tq: str,
    workers: list[WorkerProcess],
    *,
    verbose: bool = False,
    task_timeout: timedelta | None = None,
    at_kill: bool = False,
) -> float:
    """Kill the worker caching a run parked on approval and approve as soon as it is dead (its
    process reaped), or with ``at_kill`` in the same instant as the kill, before the process is
    gone: seconds from the kill to the approved tool's scheduling.

    In the same instant the server may hand the signal's workflow task to the dying worker's
    sticky poll before its connection drops; that task then waits out the run's workflow task
    timeout. No person approves within those milliseconds; the option measures that race."""
    model = f"appr-{uuid.uuid4().hex[:6]}"
    bench.models.add_model(model, write_script(1))
    config = AgentConfig(require_approval=("write_file",), max_steps=5)
    handle = await start_agent(bench, tq, model, config, task_timeout)

    async def parked() -> bool:
        return (await handle.query(AgentWorkflow.state)).state.value == "WaitingForHuman"

    await wait_for(parked, 60, "the run to wait for approval")
    history = await handle.fetch_history()
    completed = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]
    identity = completed[-1].workflow_task_completed_event_attributes.identity
    victim = next(w for w in workers if w.pid == pid_of(identity))
    killed = victim.kill()
    if not at_kill:
        await victim.process.wait()
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    await victim.process.wait()
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
    workers.remove(victim)
    if verbose:
        print_trail(history.events[signalled:], killed)
    return event_seconds(tool) - killed


def print_trail(events: Sequence[HistoryEvent], since: float) -> None:
    """The workflow tasks after the kill, each with its queue (sticky or normal), the worker
    that took it and how it timed out: where an approval's time went."""
    for event in events:
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        detail = ""
        if event.HasField("workflow_task_scheduled_event_attributes"):
            queue = event.workflow_task_scheduled_event_attributes.task_queue
            detail = "sticky" if queue.kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY else "normal"
        elif event.HasField("workflow_task_started_event_attributes"):
            detail = event.workflow_task_started_event_attributes.identity
        elif event.HasField("workflow_task_timed_out_event_attributes"):
            detail = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type)
        print(f"  {event_seconds(event) - since:+7.3f} s  {kind} {detail}", file=sys.stderr)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            break


async def startups(bench: Bench, count: int) -> None:
    """A replacement's own cost, ``count`` times each, interleaved: importing ``worker`` alone
    (a fresh interpreter, wall and CPU), and ``worker.py`` from spawn to "Worker polling"
    (wall, and the process's CPU when it polls)."""
    imports: list[tuple[float, float]] = []
    starts: list[tuple[float, float]] = []
    tq = f"bench-start-{uuid.uuid4().hex[:6]}"
    for _ in range(count):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import worker", cwd=ROOT
        )
        await process.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        imports.append((time.perf_counter() - began, cpu))
        worker = await WorkerProcess.start(bench, tq)
        starts.append((worker.ready - worker.spawned, cpu_seconds(worker.pid)))
        await worker.stop()

    def line(what: str, values: list[tuple[float, float]]) -> str:
        walls, cpus = [v[0] for v in values], [v[1] for v in values]
        return (
            f"{what}: wall median {statistics.median(walls):.2f} s (min {min(walls):.2f}, "
            f"max {max(walls):.2f}), CPU median {statistics.median(cpus):.2f} s ({count} starts)"
        )

    print(line("import worker (fresh interpreter)", imports))
    print(line("worker.py spawned -> polling", starts))


async def run(args: argparse.Namespace) -> None:
    config = AgentConfig(max_steps=5)
    if args.heartbeat is not None:
        config = config.model_copy(update={"heartbeat_timeout_seconds": args.heartbeat})
    timeout = config.heartbeat_timeout_seconds
    flags = () if args.sticky is None else ("--sticky-queue-timeout", str(args.sticky))
    task_timeout = None if args.task_timeout is None else timedelta(seconds=args.task_timeout)
    beats = 1 / max(MIN_INTERVAL_SECONDS, timeout / 3)
    retries: list[float] = []
    approvals: list[float] = []
    with tempfile.TemporaryDirectory(prefix="treadle-recovery-") as tmp_dir:
        async with bench_setup(False, Path(tmp_dir), args.timer_shift) as bench:
            if args.startups:
                await startups(bench, args.startups)
                if not args.reps:
                    return
            tq = f"bench-kill-{uuid.uuid4().hex[:6]}"
            workers: list[WorkerProcess] = []
            for rep in range(args.reps):
                for approval in (False, True):
                    while len(workers) < 2:  # the one that will be killed and a standby
                        workers.append(await WorkerProcess.start(bench, tq, *flags))
                    await asyncio.sleep(0.5)  # both polling
                    if approval:
                        approvals.append(
                            await approval_after_kill(
                                bench,
                                tq,
                                workers,
                                verbose=args.verbose,
                                task_timeout=task_timeout,
                                at_kill=args.approve_at_kill,
                            )
                        )
                    else:
                        retries.append(
                            await model_call_retry(bench, tq, workers, config, verbose=args.verbose)
                        )
                print(f"[recovery: rep {rep + 1} of {args.reps}]", file=sys.stderr, flush=True)
            for worker in workers:
                await worker.stop()

    def spread(values: list[float]) -> str:
        return (
            f"median {statistics.median(values):.2f} s "
            f"(min {min(values):.2f}, max {max(values):.2f}; {len(values)} kills: "
            f"{', '.join(f'{v:.2f}' for v in values)})"
        )

    print(
        f"heartbeat_timeout_seconds={timeout:g}: a running call heartbeats every "
        f"{1 / beats:.2f} s ({beats:.1f} heartbeat RPCs per second per running call)"
    )
    print(f"SIGKILL -> model call retried on the standby: {spread(retries)}")
    when = "in the same instant" if args.approve_at_kill else "once it is dead"
    print(f"SIGKILL, approve {when} -> approved tool scheduled: {spread(approvals)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--heartbeat", type=float, help="heartbeat_timeout_seconds of the runs")
    parser.add_argument(
        "--sticky", type=float, help="the workers' --sticky-queue-timeout (default: theirs)"
    )
    parser.add_argument(
        "--task-timeout",
        type=float,
        help="the approval runs' workflow task timeout (start option; default: the server's 10 s)",
    )
    parser.add_argument(
        "--timer-shift",
        metavar="DURATION",
        help="the dev server's timer granularity (history.timerProcessorMaxTimeShift, e.g. "
        "10ms; default: temporal-dev.yaml's 100ms; 1s: the server's own)",
    )
    parser.add_argument(
        "--startups",
        type=int,
        default=0,
        metavar="N",
        help="also measure a replacement's import and start-up, N times (--reps 0: only that)",
    )
    parser.add_argument(
        "--approve-at-kill",
        action="store_true",
        help="send the approval in the same instant as the SIGKILL, not once the worker is dead",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="print each approval's workflow tasks after the kill"
    )
    start = time.perf_counter()
    asyncio.run(run(parser.parse_args()))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
