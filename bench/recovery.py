"""Recovery counted from the SIGKILL, with a standby worker already polling.

    python -m bench.recovery [--reps 3] [--heartbeat SECONDS ...]

Two ``treadle worker`` processes poll one task queue. A run's model call (the scripted model
answers a few seconds after the call's first heartbeat) is found on whichever worker took it
(the pending activity's worker identity holds its PID); that worker is killed with SIGKILL just
after the server heard its heartbeat (the slowest case: the heartbeat timeout runs from the last
beat), and a new standby is started for the next rep. Printed: seconds from the kill to the
call's next try starting (its ``ActivityTaskStarted`` event: a try is an activity of its own),
and for a run parked on an approval whose worker is killed and approved as soon as it is dead
(``--approve-at-kill``: in the same instant), seconds from the kill to the approved tool's
scheduling. Each heartbeat timeout given is measured in turn (default: the runs' default, 9 s,
and the fast-recovery setting, 3 s), with what it costs: heartbeats a second of a running call,
and Temporal Cloud actions of a 10 s model call. Nothing is asserted.
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
from treadle.activities.heartbeat import beat_interval
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
    # Answers well after the call's first beat (two thirds of its heartbeat timeout, or less).
    first_beat = beat_interval(config.heartbeat_timeout_seconds)
    bench.models.add_model(model, write_script(1, delay=first_beat + 4.0))
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
    schedules = model_schedules(history)
    if len(schedules) < 3:  # the lost try, the one made again, the answer
        raise RuntimeError("the model call was not made again: the kill came too late")
    started = first_after(history, schedules[1], EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    workers.remove(victim)
    if verbose:
        timeline["retry started (event)"] = event_seconds(started)
        timeline["last heartbeat heard"] = beat.ToMicroseconds() / 1e6
        for what, at in sorted(timeline.items(), key=lambda item: item[1]):
            print(f"  {at - killed:+7.3f} s  {what}", file=sys.stderr)
    return event_seconds(started) - killed


async def retry_timeline(handle: WorkflowHandle[Any, Any]) -> dict[str, float]:
    """When the server saw the killed try time out and the next one start, as the pending
    activity shows it (a new activity id; polled every 10 ms until it starts)."""
    seen: dict[str, float] = {}
    first: str | None = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pending = (await handle.describe()).raw_description.pending_activities
        if pending and first is None:
            first = pending[0].activity_id
        if not pending or pending[0].activity_id == first:
            await asyncio.sleep(0.01)
            continue
        info = pending[0]
        seen.setdefault("next try seen by describe", time.time())
        if info.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            seen["next try started (server)"] = info.last_started_time.ToMicroseconds() / 1e6
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
    """A replacement's own cost, ``count`` times each, interleaved: importing the worker alone
    (a fresh interpreter, wall and CPU), and ``worker.py`` from spawn to "Worker polling"
    (wall, and the process's CPU when it polls)."""
    imports: list[tuple[float, float]] = []
    starts: list[tuple[float, float]] = []
    tq = f"bench-start-{uuid.uuid4().hex[:6]}"
    for _ in range(count):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import treadle.cli.worker", cwd=ROOT
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

    print(line("import treadle.cli.worker (fresh interpreter)", imports))
    print(line("treadle worker spawned -> polling", starts))


async def run(args: argparse.Namespace) -> None:
    timeouts = args.heartbeat or [AgentConfig().heartbeat_timeout_seconds, FAST_RECOVERY_SECONDS]
    flags = () if args.sticky is None else ("--sticky-queue-timeout", str(args.sticky))
    task_timeout = None if args.task_timeout is None else timedelta(seconds=args.task_timeout)
    retries: dict[float, list[float]] = {timeout: [] for timeout in timeouts}
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
                for timeout in (*timeouts, None):
                    while len(workers) < 2:  # the one that will be killed and a standby
                        workers.append(await WorkerProcess.start(bench, tq, *flags))
                    await asyncio.sleep(0.5)  # both polling
                    if timeout is None:
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
                        config = AgentConfig(max_steps=5, heartbeat_timeout_seconds=timeout)
                        retries[timeout].append(
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

    for timeout, values in retries.items():
        every = beat_interval(timeout)
        beats = int(CALL_SECONDS // every) if every < CALL_SECONDS else 0
        print(
            f"heartbeat_timeout_seconds={timeout:g}: a running call beats every {every:.2f} s "
            f"({1 / every:.2f} heartbeat RPCs a second); a {CALL_SECONDS:g} s model call costs "
            f"{1 + beats} Temporal Cloud actions (its attempt and {beats} beat(s))"
        )
        print(f"  SIGKILL -> the model call's next try started on the standby: {spread(values)}")
    when = "in the same instant" if args.approve_at_kill else "once it is dead"
    print(f"SIGKILL, approve {when} -> approved tool scheduled: {spread(approvals)}")


FAST_RECOVERY_SECONDS = 3.0
"""The documented fast-recovery setting (docs/reliability.md), measured beside the default."""
CALL_SECONDS = 10.0
"""The model call whose Temporal Cloud cost is printed for each setting."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--heartbeat",
        type=float,
        action="append",
        metavar="SECONDS",
        help="a heartbeat_timeout_seconds to measure (repeatable; default: the runs' default "
        f"and {FAST_RECOVERY_SECONDS:g})",
    )
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
