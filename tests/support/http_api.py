"""Runs over the HTTP API, as the API's tests start and wait for them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from tests.support.harness import Harness


def run_body(harness: Harness, model: str, task: str = "Write the notes.", **extra: Any) -> Any:
    return {"task": task, "model": model, "workspace": str(harness.workspace), **extra}


async def until_state(http: httpx.AsyncClient, run_id: str, state: str) -> dict[str, Any]:
    """The run's status (GET /v1/runs/{id}) once it is in ``state``."""
    status: dict[str, Any] = {}
    for _ in range(600):
        response = await http.get(f"/v1/runs/{run_id}")
        if response.status_code == 200:
            status = response.json()
            if status["state"] == state:
                return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {state}: {status.get('state')}")


async def started(http: httpx.AsyncClient, body: Any, track: Callable[[str], str]) -> str:
    response = await http.post("/v1/runs", json=body)
    assert response.status_code == 201, response.text
    return track(response.json()["id"])
