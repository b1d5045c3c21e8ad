"""The bare Temporal floor in a process of its own: what a developer could run without Treadle.

    python -m bench.floor_worker --address HOST:PORT --task-queue Q --model-url URL

The floor's workflow and activities (``bench/floor.py``) on a plain ``Worker``: the SDK's
default data converter, no codec, no External Storage, no interceptors, no plugins, the SDK's
default sandbox. Its CPU is its own, read from ``/proc`` by ``bench.cpu``; the floor of the
suite's ``step`` row shares Treadle's process and converter instead.
"""

from __future__ import annotations

import argparse
import asyncio

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from bench.floor import FloorActivities, FloorWorkflow

READY = "Worker polling"
"""Printed once the worker runs (the line ``bench.suite.WorkerProcess`` waits for)."""


async def serve(address: str, task_queue: str, model_url: str) -> None:
    client = await Client.connect(address, namespace="default")
    async with httpx.AsyncClient(timeout=httpx.Timeout(60)) as http:
        activities = FloorActivities(model_url, http)
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[FloorWorkflow],
            activities=[activities.model_call, activities.write_file],
        )
        async with worker:
            print(READY, flush=True)
            await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--model-url", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.task_queue, args.model_url))


if __name__ == "__main__":
    main()
