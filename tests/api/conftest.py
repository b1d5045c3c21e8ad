"""The HTTP API (``treadle.web.api``) as programs use it: a real uvicorn server on a free
loopback port serving the harness's client and task queue, a real HTTP client (httpx) and a
real Server-Sent Events client (httpx-sse), against the real dev server, a real worker and the
scripted model.

``api`` is the server's base URL; ``http`` an ``httpx.AsyncClient`` on it; ``track(id)``
registers a run the API started, so the harness replays it at the end of the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from tests.support.harness import TEST_STORE, Harness
from treadle.client import AgentClient
from treadle.web import serve
from treadle.web.api import ApiSettings, api_app


@pytest.fixture
async def api(harness: Harness) -> AsyncIterator[str]:
    """The API's base URL, serving the harness's namespace and task queue."""
    agents = AgentClient(harness.client, task_queue=harness.task_queue, store=str(TEST_STORE))
    served = await serve.start(api_app(agents, ApiSettings(task_queue=harness.task_queue)))
    yield served.url
    await served.stop()


@pytest.fixture
async def http(api: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api, timeout=60) as client:
        yield client


@pytest.fixture
def track(harness: Harness) -> Callable[[str], str]:
    """``track(run_id)``: the harness replays the run through today's code once it ends."""

    def tracked(run_id: str) -> str:
        harness.handles.append(harness.client.get_workflow_handle(run_id))
        return run_id

    return tracked
