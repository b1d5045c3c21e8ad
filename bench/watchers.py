"""What live views of a run cost the server, two ways: measured beside them, and attributed.

``bench.cpu --watchers N`` runs the same Treadle run alone and followed by N live views
(``watch_events``, as the CLI and the browser page read it; one process, one client), alternated,
and prints each one's CPU a step for the server and the worker. On this shared 2-core machine
that difference moves from one run of the benchmark to the next by more than the 10% the target
allows.

So it also counts what the views send the server (a client interceptor: stream polls, which are
queries the server routes to the run's worker, and ``describe`` calls), and measures what one
of each costs, one after the other with nothing else running, the processes' idle CPU over as
long taken out: a poll of an open run (``CALLS`` on a run parked on an approval), a
``describe``, and a poll of a closed run (``CLOSED_CALLS``: its worker replays the whole run to
answer, and a view's last poll is one, since the ``ended`` event is published in the task that
closes the run). The views' share of the work a step is then their calls a run times each
call's cost, divided by the run's steps: a figure the views' own CPU on the same cores does not
move, since nothing but those calls reaches the server or the worker from a view.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowHandle,
)
from temporalio.contrib.workflow_streams import PollInput, PollResult

from bench.suite import Bench, cpu_seconds, start_agent
from treadle.stream import watch_events
from treadle.workflows.agent.messages.events import (
    EVENTS_TOPIC,
    OFFSET_QUERY,
    POLL_QUERY,
    TOKENS_TOPIC,
)
from treadle.workflows.agent.messages.models import AgentConfig, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

CALLS = 200
"""Calls of each kind timed on the parked run: each costs the server a millisecond or two, so
the total stands well above the idle CPU taken out."""

CLOSED_CALLS = 20
"""Polls of a closed run timed: each is a replay of the whole run by its worker."""

SETTLE_SECONDS = 20.0
"""The longest wait for views of a parked run to fall quiet (they take a second or two)."""

QUIET_SECONDS = 10.0
"""How long the views of a parked run are measured, and as long unwatched
(``bench.cpu --quiet-seconds``)."""

STEP_ITEMS = 7
"""What a caught-up view's poll brings back while the run works: a step's events."""


class Counting(Interceptor):
    """Counts the calls a client sends the server for views: stream polls and describes."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.described_since_poll = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        counter = self

        class Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                poll = input.query == POLL_QUERY
                counter.counts["poll" if poll else f"query {input.query}"] += 1
                if poll:
                    counter.described_since_poll = 0
                return await super().query_workflow(input)

            async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
                counter.counts["describe"] += 1
                counter.described_since_poll += 1
                return await super().describe_workflow(input)

        return Outbound(next)


def counting_client(client: Client, counter: Counting) -> Client:
    """A client on ``client``'s connection and converter with ``counter`` as its last
    interceptor."""
    config = client.config()
    config["interceptors"] = [*config["interceptors"], counter]
    return Client(**config)


async def watched(
    bench: Bench,
    worker_pid: int,
    tq: str,
    model: str,
    steps: int,
    reps: int,
    watchers: int,
    quiet_seconds: float = QUIET_SECONDS,
) -> dict[str, float]:
    """The same Treadle run alone and followed by ``watchers`` live views, interleaved: CPU per
    step of server and worker, the calls the views sent a run, what each call costs, and the
    views' share of the server's CPU a step that those calls make."""
    config = AgentConfig(max_steps=steps + 5, stream_tokens=False)
    counter = Counting()
    views_client = counting_client(bench.client, counter)
    cpu: dict[int, list[tuple[float, float]]] = {0: [], watchers: []}
    sent: list[Counter[str]] = []
    ended: list[WorkflowHandle[Any, Any]] = []

    async def follow(workflow_id: str) -> None:
        async for _ in watch_events(views_client, workflow_id):
            pass

    async def run_with(count: int) -> None:
        handle = await start_agent(bench, tq, model, config)
        views = [asyncio.create_task(follow(handle.id)) for _ in range(count)]
        result = await handle.result()
        await asyncio.gather(*views)
        if result.status is not RunStatus.DONE:
            raise RuntimeError(f"a watched run ended {result.status}")
        ended.append(handle)

    for rep in range(reps + 1):  # the first round warms up and is not counted
        for count in cpu:
            counter.counts.clear()
            worker, server = await busy(worker_pid, bench.server_pid, partial(run_with, count))
            if rep:
                cpu[count].append((worker, server))
                if count:
                    sent.append(Counter(counter.counts))
    per_step = steps + 1
    out: dict[str, float] = {"watchers": watchers}
    for count, label in ((0, "alone"), (watchers, "watched")):
        out[f"{label}_worker_ms"] = statistics.median(w for w, _ in cpu[count]) / per_step * 1000
        out[f"{label}_server_ms"] = statistics.median(s for _, s in cpu[count]) / per_step * 1000
    for kind in ("poll", "describe"):
        out[f"{kind}s_per_run"] = float(statistics.median(c[kind] for c in sent))
    others = (sum(n for k, n in c.items() if k not in ("poll", "describe")) for c in sent)
    out["other_calls_per_run"] = float(statistics.median(others))
    out.update(await call_costs(bench, worker_pid, tq, model, ended[-1], watchers, quiet_seconds))
    # A view's last poll reads a closed run: the ``ended`` event is published in the run's
    # last workflow task, the one that closes it. One such poll a run for views in one process
    # (``treadle.stream`` shares it); the others read the open run.
    open_polls = max(0.0, out["polls_per_run"] - 1)
    for side in ("server", "worker"):
        out[f"attributed_{side}_ms"] = (
            open_polls * out[f"poll_{side}_ms"]
            + min(1.0, out["polls_per_run"]) * out[f"closed_poll_{side}_ms"]
            + out["describes_per_run"] * out[f"describe_{side}_ms"]
        ) / per_step
    return out


async def busy(
    worker_pid: int, server_pid: int, run: Callable[[], Awaitable[Any]]
) -> tuple[float, float]:
    """CPU seconds the worker and the server spent while ``run()`` ran."""
    w0, s0 = cpu_seconds(worker_pid), cpu_seconds(server_pid)
    await run()
    return cpu_seconds(worker_pid) - w0, cpu_seconds(server_pid) - s0


async def call_costs(
    bench: Bench,
    worker_pid: int,
    tq: str,
    model: str,
    ended: WorkflowHandle[Any, Any],
    watchers: int,
    quiet_seconds: float,
) -> dict[str, float]:
    """CPU milliseconds one call of each kind a view sends costs the server and the worker,
    the idle CPU of as long taken out: a stream poll of an open run (one parked on an
    approval), a ``describe``, and a stream poll of ``ended``, a closed run (its worker replays
    the whole history to answer). And what ``watchers`` views of the parked run cost a second
    (``quiet_cost``)."""
    config = AgentConfig(require_approval=("write_file",), stream_tokens=False)
    handle = await start_agent(bench, tq, model, config)
    try:
        await parked(handle)
        calls = {
            "poll": (await poller(handle), CALLS),
            "describe": (handle.describe, CALLS),
            "closed_poll": (await poller(ended), CLOSED_CALLS),
        }
        out = await quiet_cost(bench, worker_pid, handle, watchers, quiet_seconds)
        for name, (call, times) in calls.items():
            await call()  # warm: the run in the worker's cache, the connection
            start = time.monotonic()
            worker, server = await busy(worker_pid, bench.server_pid, partial(repeat, call, times))
            seconds = time.monotonic() - start
            idle_worker, idle_server = await busy(
                worker_pid, bench.server_pid, partial(asyncio.sleep, seconds)
            )
            out[f"{name}_server_ms"] = max(0.0, server - idle_server) / times * 1000
            out[f"{name}_worker_ms"] = max(0.0, worker - idle_worker) / times * 1000
        return out
    finally:
        await handle.terminate("bench.watchers: measured")


async def quiet_cost(
    bench: Bench, worker_pid: int, handle: WorkflowHandle[Any, Any], watchers: int, seconds: float
) -> dict[str, float]:
    """What ``watchers`` views of a run parked on an approval cost the server and the worker a
    second once they have caught up (``seconds`` watched against as long unwatched), and
    the calls they send a second: a run that waits a day for its approval."""
    counter = Counting()
    client = counting_client(bench.client, counter)

    async def follow() -> None:
        async for _ in watch_events(client, handle.id):
            pass

    views = [asyncio.create_task(follow()) for _ in range(watchers)]
    try:
        # Caught up and quiet: two describes in a row without a poll, or (views that poll a
        # quiet run, as Treadle's did before) long enough for their pause to have grown.
        settled_by = time.monotonic() + SETTLE_SECONDS
        while counter.described_since_poll < 2 and time.monotonic() < settled_by:
            await asyncio.sleep(0.05)
        counter.counts.clear()
        worker, server = await busy(worker_pid, bench.server_pid, partial(asyncio.sleep, seconds))
        sent = Counter(counter.counts)
    finally:
        for view in views:
            view.cancel()
        await asyncio.gather(*views, return_exceptions=True)
    idle_worker, idle_server = await busy(
        worker_pid, bench.server_pid, partial(asyncio.sleep, seconds)
    )
    return {
        "quiet_server_ms_per_s": (server - idle_server) / seconds * 1000,
        "quiet_worker_ms_per_s": (worker - idle_worker) / seconds * 1000,
        "quiet_polls_per_s": sent["poll"] / seconds,
        "quiet_describes_per_s": sent["describe"] / seconds,
    }


async def poller(handle: WorkflowHandle[Any, Any]) -> Callable[[], Awaitable[Any]]:
    """A stream poll of ``handle`` as a caught-up view asks it: a step's items back."""
    end: int = await handle.query(OFFSET_QUERY, result_type=int)
    offset = max(0, end - STEP_ITEMS)

    async def poll() -> PollResult:
        result: PollResult = await handle.query(
            POLL_QUERY,
            PollInput(topics=[EVENTS_TOPIC, TOKENS_TOPIC], from_offset=offset),
            result_type=PollResult,
        )
        return result

    return poll


async def repeat(call: Callable[[], Awaitable[Any]], times: int) -> None:
    for _ in range(times):
        await call()


async def parked(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the run waits on its approval: nothing in flight, nothing scheduled."""
    deadline = time.monotonic() + 120
    while not (await handle.query(AgentWorkflow.state)).pending_approvals:
        if time.monotonic() > deadline:
            raise RuntimeError("the run did not ask for its approval")
        await asyncio.sleep(0.2)


def render(w: dict[str, float]) -> list[str]:
    alone = w["alone_server_ms"]
    return [
        f"{w['watchers']:.0f} watchers on one run, CPU per step (ms): server "
        f"{alone:.1f} -> {w['watched_server_ms']:.1f} "
        f"({w['watched_server_ms'] / alone - 1:+.0%}), worker "
        f"{w['alone_worker_ms']:.1f} -> {w['watched_worker_ms']:.1f} "
        f"({w['watched_worker_ms'] / w['alone_worker_ms'] - 1:+.0%}) (measured beside them)",
        f"  their calls a run (counted): {w['polls_per_run']:.0f} stream polls, "
        f"{w['describes_per_run']:.0f} describes, {w['other_calls_per_run']:.0f} other",
        f"  each costs (server, worker, ms): a poll of the open run {w['poll_server_ms']:.2f}, "
        f"{w['poll_worker_ms']:.2f}; of the closed run (a replay) "
        f"{w['closed_poll_server_ms']:.1f}, {w['closed_poll_worker_ms']:.1f}; "
        f"a describe {w['describe_server_ms']:.2f}, {w['describe_worker_ms']:.2f}",
        f"  attributed to the views (their calls times each one's cost): server "
        f"+{w['attributed_server_ms']:.2f} ms a step ({w['attributed_server_ms'] / alone:+.1%}), "
        f"worker +{w['attributed_worker_ms']:.2f} ms "
        f"({w['attributed_worker_ms'] / w['alone_worker_ms']:+.1%})",
        f"  a run parked on its approval, the same views caught up: {w['quiet_polls_per_s']:.1f} "
        f"polls and {w['quiet_describes_per_s']:.1f} describes a second, server "
        f"{w['quiet_server_ms_per_s']:+.2f} ms and worker {w['quiet_worker_ms_per_s']:+.2f} ms of "
        "CPU a second",
    ]
