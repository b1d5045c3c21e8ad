"""``treadle.client`` from Python, as a program uses it: ``AgentClient`` against the real dev
server, the harness's worker and the scripted model; its typed answers and its typed errors.

``agents`` is an ``AgentClient`` on the harness's client and task queue, reading the test
workers' store; ``track`` registers a run the client started so the harness replays it at the
end of the test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.harness import TEST_STORE, Harness
from treadle.client import AgentClient


@pytest.fixture
def agents(harness: Harness) -> AgentClient:
    """The client a Python program would make, on the harness's server and task queue."""
    return AgentClient(harness.client, task_queue=harness.task_queue, store=str(TEST_STORE))


@pytest.fixture
def track(harness: Harness) -> Callable[[str], str]:
    """``track(run_id)``: the harness replays the run through today's code once it ends."""

    def tracked(run_id: str) -> str:
        harness.handles.append(harness.client.get_workflow_handle(run_id))
        return run_id

    return tracked
