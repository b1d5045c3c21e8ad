"""Periodic jobs: runs with Temporal's retries, the ledger, the built-in jobs, their
schedules and the ``jobs`` commands."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from tests.support.jobs import JobsEnv, jobs_worker


@pytest.fixture
async def env(client: Client, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[JobsEnv]:
    """The test jobs' worker on a task queue of its own, and what the test started on it."""
    async with jobs_worker(client, monkeypatch) as jobs_env:
        yield jobs_env
