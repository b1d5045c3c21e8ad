"""What durability costs: the same agent work as Temporal workflows and as a plain asyncio loop.

    python -m bench.agent_overhead [--runs 20] [--steps 5] [--address HOST:PORT]

Both sides use the same scripted model server (real HTTP, OpenAI protocol) and the same tool
code writing real files. The plain loop keeps everything in memory (a crash loses it all); the
workflow side persists every step in the dev server's SQLite history. Prints per-step latency,
throughput and their ratio, plus the worker's memory per cached run. Nothing is asserted: the
machines are shared and noisy, so read the ratio, measured in one process and one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from bench.local_server import dev_server_config
from bench.scripts import write_script
from treadle.activities.model.activity import ModelActivities, ProviderSettings, http_client
from treadle.activities.tools.builtin import execute_tool
from treadle.cli.worker import build_worker
from treadle.connection import connect
from treadle.devserver import DevServer
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentResult,
    ModelRequest,
    ToolOutcome,
    ToolPolicy,
    Turn,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.memory import AgentMemory
from treadle.workflows.agent.workflow import AgentWorkflow

DEFAULT_CONFIG = AgentConfig()


def _rss_kib() -> int:
    """Current resident memory of this process (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def plain_loop(models: ModelActivities, model: str, task: str, workspace: Path) -> int:
    """The baseline: the same plan -> act -> observe loop with nothing persisted."""
    memory = AgentMemory(task=task)
    policy = ToolPolicy()
    tools = tuple(n for n in TOOLS if n != "run_command")
    while True:
        memory.enter(State.PLANNING)
        memory.step += 1
        response = await models.complete(
            ModelRequest(model=model, messages=memory.build_messages(), tools=tools),
            read_timeout=60,
        )
        if not response.tool_calls:
            return memory.step
        outcomes = []
        for call in response.tool_calls:
            result = await execute_tool(workspace, call.name, call.arguments, policy)
            outcomes.append(ToolOutcome(call=call, result=result))
        memory.enter(State.OBSERVING)
        memory.history = (*memory.history, Turn(step=memory.step, outcomes=tuple(outcomes)))


async def _start(
    client: Client,
    task_queue: str,
    model: str,
    task: str,
    workspace: Path,
    config: AgentConfig = DEFAULT_CONFIG,
) -> WorkflowHandle[Any, AgentResult]:
    """One run of the benchmark's model on the worker's queue, working in ``workspace``."""
    return await client.start_workflow(
        AgentWorkflow.run,
        AgentInput(task=task, model=model, workspace=str(workspace), config=config),
        id=f"bench-{uuid.uuid4().hex[:10]}",
        task_queue=task_queue,
    )


async def _memory_per_waiting_run(
    client: Client, task_queue: str, model: str, tmp: Path, count: int
) -> float:
    """Park ``count`` runs in WaitingForHuman (cached on this worker); RSS growth per run."""
    config = AgentConfig(require_approval=("write_file",))
    before = _rss_kib()
    handles = [
        await _start(client, task_queue, model, f"park {i}", tmp / f"park{i}", config)
        for i in range(count)
    ]
    for handle in handles:
        while (await handle.query(AgentWorkflow.state)).state is not State.WAITING_FOR_HUMAN:
            await asyncio.sleep(0.05)
    grown = _rss_kib() - before
    for handle in handles:
        await handle.cancel()
    return grown / count


async def bench(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="treadle-bench-"))
    steps_per_run = args.steps + 1  # tool steps plus the answering step
    with ScriptedModelServer(keep_requests=64) as model_server:
        name = f"bench-{uuid.uuid4().hex[:6]}"
        model_server.add_model(name, write_script(args.steps))
        model = f"openai:{name}"
        settings = ProviderSettings.from_env({"OPENAI_BASE_URL": model_server.base_url})

        async with http_client() as http:
            models = ModelActivities(settings, http)
            await plain_loop(models, model, "warm-up", tmp / "warm")
            start = time.perf_counter()
            await plain_loop(models, model, "single", tmp / "plain-single")
            plain_single = time.perf_counter() - start
            start = time.perf_counter()
            await asyncio.gather(
                *(
                    plain_loop(models, model, f"task {i}", tmp / f"plain{i}")
                    for i in range(args.runs)
                )
            )
            plain = time.perf_counter() - start

        if args.address:
            server_cm = None
            address = args.address
        else:
            server_cm = DevServer.ensure(dev_server_config(tmp / "bench.sqlite"))
            address = (await server_cm.__aenter__()).address
        try:
            client = await connect(address=address, namespace="default")
            task_queue = f"bench-{uuid.uuid4().hex[:6]}"
            async with (
                http_client() as http,
                build_worker(client, task_queue=task_queue, settings=settings, http=http),
            ):
                run = partial(_start, client, task_queue, model)
                await (await run("warm-up", tmp / "wwarm")).result()
                start = time.perf_counter()
                await (await run("single", tmp / "wf-single")).result()
                durable_single = time.perf_counter() - start
                start = time.perf_counter()
                handles = await asyncio.gather(
                    *(run(f"task {i}", tmp / f"wf{i}") for i in range(args.runs))
                )
                results: list[AgentResult] = await asyncio.gather(*(h.result() for h in handles))
                durable = time.perf_counter() - start
                per_waiting_run = await _memory_per_waiting_run(
                    client, task_queue, model, tmp, args.waiting
                )
            assert all(r.steps == steps_per_run for r in results), results
            history_events = [len((await h.fetch_history()).events) for h in handles[:3]]
        finally:
            if server_cm is not None:
                await server_cm.__aexit__(None, None, None)

    total_steps = args.runs * steps_per_run
    one = steps_per_run
    print(f"each step: 1 model call (HTTP) + 1 tool call (a file write); {one} steps per run")
    print(f"{'':28}{'plain asyncio':>15}{'Temporal':>12}{'ratio':>8}")
    print(
        f"{'1 run, ms per step':28}{plain_single / one * 1000:>15.1f}"
        f"{durable_single / one * 1000:>12.1f}{durable_single / plain_single:>7.1f}x"
    )
    print(
        f"{f'{args.runs} concurrent runs, steps/s':28}{total_steps / plain:>15.0f}"
        f"{total_steps / durable:>12.0f}{plain / durable:>7.2f}x"
    )
    print(f"history events per run: {statistics.mean(history_events):.0f}")
    print(
        f"worker memory per run cached while waiting for approval ({args.waiting} runs): "
        f"{per_waiting_run:.0f} KiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--waiting", type=int, default=200, help="runs parked for memory")
    parser.add_argument("--steps", type=int, default=5, help="tool steps per run")
    parser.add_argument("--address", help="use this Temporal server instead of a fresh dev server")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
