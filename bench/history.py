"""History that stays small: bytes of Temporal history per agent step, with and without the
conversation store, whatever the size of the context.

    python -m bench.history [--steps 40] [--calls 100] [--long-steps 10000] [--stream-steps 4]

Everything runs against a fresh dev server, a real worker and the scripted model server (real
HTTP). Printed, all measured in this one run:

1. history bytes per step when every tool returns 2 KB and when it returns 50 KB, and when
   every step writes a 2 KB or a 50 KB file (the model's arguments), with the store (model
   calls carry references, long argument values travel as markers) and without it (the
   baseline: every call carries the whole conversation and every argument inline);
2. a 100-model-call conversation of ~200k tokens: total history, with and without the store;
3. a long productive run through continue-as-new: steps, runs in the chain, the largest single
   run's history, and the store's bytes (which grow with the conversation, not its square);
4. what live token streaming costs: history per step when each reply (1.5 KB of text and a
   tool call) is generated over ~9 s, streamed to the run's stream and not.

Nothing is asserted; the README quotes the table.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from bench.local_server import dev_server_config
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.cli.worker import build_worker
from treadle.connection import connect
from treadle.devserver import DevServer
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult
from treadle.workflows.agent.messages.progress import ProgressConfig
from treadle.workflows.agent.workflow import AgentWorkflow


def _script(steps: int, files: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "read_file", "arguments": {"path": f"f{i % files}.txt"}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 20},
        }
        for i in range(steps)
    ]
    turns.append(
        {"content": "read them all", "usage": {"prompt_tokens": 1000, "completion_tokens": 5}}
    )
    return turns


def _big_writes(steps: int, size: int) -> list[dict[str, Any]]:
    """Each step writes a file of ``size`` characters, each its own (a new file is progress)."""
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": f"w{i}.txt", "content": f"{i} " + "x" * (size - 3)},
                }
            ],
            "usage": {"prompt_tokens": 1000, "completion_tokens": size // 4},
        }
        for i in range(steps)
    ]
    turns.append({"content": "wrote them all"})
    return turns


def _writes(steps: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": f"w{i}.txt", "content": str(i)}}
            ]
        }
        for i in range(steps)
    ]
    turns.append({"content": "wrote them all"})
    return turns


async def _history(client: Client, workflow_id: str, run_id: str | None = None) -> tuple[int, int]:
    """(events, bytes) of one run's history."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    return len(history.events), sum(e.ByteSize() for e in history.events)


async def _per_step(client: Client, workflow_id: str, steps: int) -> str:
    """A run's history per step (its ``steps`` tool steps and the answer): bytes and events."""
    events, size_bytes = await _history(client, workflow_id)
    return f"{size_bytes / (steps + 1) / 1024:.1f} KiB ({events / (steps + 1):.1f} events)"


async def _chain(client: Client, workflow_id: str) -> list[tuple[int, int]]:
    """(events, bytes) of every run of a continue-as-new chain."""
    runs = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        runs.append(await _history(client, workflow_id, execution.run_id))
    return runs


async def _run(
    client: Client,
    task_queue: str,
    model: str,
    workspace: Path,
    steps: int,
    **config: Any,
) -> tuple[WorkflowHandle[Any, Any], AgentResult]:
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentInput(
            task="Read the files.",
            model=model,
            workspace=str(workspace),
            # Reading the same files again is not progress, and that is not what is measured.
            config=AgentConfig(
                max_steps=steps + 5,
                max_observation_chars=60_000,
                progress=ProgressConfig(progress_window=1000, max_recent_actions=1000),
                **config,
            ),
        ),
        id=f"bench-{uuid.uuid4().hex[:10]}",
        task_queue=task_queue,
    )
    while True:
        try:
            return handle, await handle.result()
        except RPCError as exc:  # an overloaded dev server's long poll gave up: poll again
            if exc.status is not RPCStatusCode.DEADLINE_EXCEEDED:
                raise


def _blob_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        config = dev_server_config(tmp / "dev.sqlite")
        async with DevServer.ensure(config) as server:
            with ScriptedModelServer(keep_requests=64) as models:
                await _measure(args, tmp, server.address, models)


async def _measure(
    args: argparse.Namespace, tmp: Path, address: str, models: ScriptedModelServer
) -> None:
    client = await connect(address=address, namespace="default")
    settings = ProviderSettings.from_env({"OPENAI_BASE_URL": models.base_url})
    rows: list[tuple[str, str, str]] = []
    async with http_client() as http:
        for label, store in (("with store", True), ("without store", False)):
            root = tmp / f"store-{label.replace(' ', '-')}"
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            blobs = FileBlobStore(root) if store else None
            async with build_worker(
                client, task_queue=queue, settings=settings, http=http, store=blobs
            ):
                for size in (2_000, 50_000):
                    ws = tmp / f"ws-{label.replace(' ', '-')}-{size}"
                    ws.mkdir()
                    for i in range(4):
                        (ws / f"f{i}.txt").write_text(f"{i}" * size)
                    name = f"reads-{uuid.uuid4().hex[:6]}"
                    models.add_model(name, _script(args.steps, 4), order="arrival")
                    handle, _ = await _run(client, queue, f"openai:{name}", ws, args.steps)
                    what = f"history per step, tools return {size // 1000} KB"
                    rows.append((what, label, await _per_step(client, handle.id, args.steps)))
                for size in (2_000, 50_000):
                    ws = tmp / f"ws-{label.replace(' ', '-')}-writes-{size}"
                    ws.mkdir()
                    name = f"writes-{uuid.uuid4().hex[:6]}"
                    models.add_model(name, _big_writes(args.steps, size), order="arrival")
                    handle, _ = await _run(client, queue, f"openai:{name}", ws, args.steps)
                    what = f"history per step, each step writes {size // 1000} KB"
                    rows.append((what, label, await _per_step(client, handle.id, args.steps)))
                if not args.calls:
                    continue
                ws = tmp / f"ws-{label.replace(' ', '-')}-conversation"
                ws.mkdir()
                for i in range(4):
                    (ws / f"f{i}.txt").write_text("word " * 1600)  # 8 KB, ~2k tokens
                name = f"conv-{uuid.uuid4().hex[:6]}"
                models.add_model(name, _script(args.calls - 1, 4), order="arrival")
                start = time.perf_counter()
                handle, result = await _run(client, queue, f"openai:{name}", ws, args.calls)
                runs = await _chain(client, handle.id)
                total = sum(b for _, b in runs) / 1024 / 1024
                rows.append(
                    (
                        f"{args.calls}-call conversation (~{args.calls * 2}k tokens)",
                        label,
                        f"{result.status.value}: {total:.2f} MiB of history in {len(runs)} "
                        f"run(s), {time.perf_counter() - start:.0f} s",
                    )
                )
                if store:
                    stored = _blob_bytes(root) / 1024 / 1024
                    rows.append(("store after both", label, f"{stored:.2f} MiB"))
        if args.stream_steps:
            rows.extend(await _streamed(args, tmp, client, settings, http, models))
        if args.long_steps:
            rows.append(await _long_run(args, tmp, client, settings, http, models))
    width = max(len(r[0]) for r in rows)
    for what, label, value in rows:
        print(f"{what:<{width}}  {label:<13}  {value}")


async def _streamed(
    args: argparse.Namespace,
    tmp: Path,
    client: Client,
    settings: ProviderSettings,
    http: Any,
    models: ScriptedModelServer,
) -> list[tuple[str, str, str]]:
    """Slow replies, streamed (token batches are signals) and not, with the store."""
    queue = f"bench-stream-{uuid.uuid4().hex[:6]}"
    rows = []
    async with build_worker(
        client, task_queue=queue, settings=settings, http=http, store=FileBlobStore(tmp / "s")
    ):
        ws = tmp / "ws-stream"
        ws.mkdir()
        (ws / "f0.txt").write_text("0" * 2_000)
        reply = "word " * 298  # ~1,500 characters, one word per chunk
        turns: list[dict[str, Any]] = [
            {
                # Each reply its own, or the stuck detector sees the model repeat itself.
                "content": f"Step {i}: {reply}",
                "tool_calls": [{"name": "read_file", "arguments": {"path": "f0.txt"}}],
                "chunk_delay": 0.03,
            }
            for i in range(args.stream_steps)
        ]
        turns.append({"content": "done"})
        for stream in (True, False):
            name = f"stream-{uuid.uuid4().hex[:6]}"
            models.add_model(name, turns)
            start = time.perf_counter()
            handle, _ = await _run(
                client, queue, f"openai:{name}", ws, args.stream_steps, stream_tokens=stream
            )
            seconds = (time.perf_counter() - start) / (args.stream_steps + 1)
            events, size_bytes = await _history(client, handle.id)
            per_step = size_bytes / (args.stream_steps + 1) / 1024
            rows.append(
                (
                    "history per step, replies of 1.5 KB",
                    "streamed" if stream else "not streamed",
                    f"{per_step:.1f} KiB ({events / (args.stream_steps + 1):.1f} events), "
                    f"{seconds:.1f} s per step",
                )
            )
    return rows


async def _long_run(
    args: argparse.Namespace,
    tmp: Path,
    client: Client,
    settings: ProviderSettings,
    http: Any,
    models: ScriptedModelServer,
) -> tuple[str, str, str]:
    queue = f"bench-long-{uuid.uuid4().hex[:6]}"
    root = tmp / "store-long"
    async with build_worker(
        client, task_queue=queue, settings=settings, http=http, store=FileBlobStore(root)
    ):
        ws = tmp / "ws-long"
        ws.mkdir()
        name = f"long-{uuid.uuid4().hex[:6]}"
        # Compaction shortens the conversation the model sees, so the script cannot count turns.
        models.add_model(name, _writes(args.long_steps), order="arrival")
        start = time.perf_counter()
        handle, result = await _run(client, queue, f"openai:{name}", ws, args.long_steps)
        runs = await _chain(client, handle.id)
    largest = max(runs, key=lambda r: r[1])
    return (
        f"{args.long_steps}-step productive run",
        "with store",
        f"{result.status.value} after {result.steps} steps"
        f"{f' ({result.error})' if result.error else ''}; {len(runs)} runs in the chain; "
        f"largest run {largest[1] / 1024 / 1024:.2f} MiB, {largest[0]} events; store "
        f"{_blob_bytes(root) / 1024 / 1024:.1f} MiB; {time.perf_counter() - start:.0f} s; "
        f"the benchmark's process (worker and model server) peaked at {_peak_mib():.0f} MiB",
    )


def _peak_mib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="steps of the per-step runs")
    parser.add_argument(
        "--calls", type=int, default=100, help="model calls of the conversation (0: skip)"
    )
    parser.add_argument(
        "--long-steps", type=int, default=10_000, help="steps of the long run (0: skip)"
    )
    parser.add_argument(
        "--stream-steps", type=int, default=4, help="steps of the streamed runs (0: skip)"
    )
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
