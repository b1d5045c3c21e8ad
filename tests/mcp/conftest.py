"""MCP servers' tools: the config file, the names the model sees, listing and calling over
stdio and HTTP, failures, and MCP tools inside real runs.

``mcp_harness`` is the room's one fixture of its own; the session's (tests/conftest.py) serve
the rest."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.support.harness import Harness, replay_finished, scripted_worker
from tests.support.mcp_runs import McpHarness
from treadle.activities.mcp import McpActivities, parse_mcp_config
from treadle.activities.model.activity import http_client
from treadle.scripted_model import ScriptedModelServer


@pytest.fixture
def mcp_harness(
    request: pytest.FixtureRequest,
    client: Client,
    model_server: ScriptedModelServer,
    tmp_path: Path,
) -> McpHarness:
    """``async with mcp_harness(entry, ...) as h``: a worker (with the suite's store) whose MCP
    config holds the entries, on a task queue of its own; finished runs are replay-checked at
    the end."""

    @asynccontextmanager
    async def make(*entries: dict[str, Any]) -> AsyncIterator[Harness]:
        task_queue = f"test-mcp-{uuid.uuid4().hex[:12]}"
        workspace = tmp_path / f"workspace-{uuid.uuid4().hex[:6]}"
        workspace.mkdir()
        harness = Harness(client, task_queue, model_server, workspace)
        mcp = McpActivities(parse_mcp_config({"servers": list(entries)}), environ=os.environ)
        async with (
            mcp,
            http_client() as http,
            scripted_worker(client, task_queue, model_server, http, mcp=mcp),
        ):
            yield harness
        await replay_finished(request, harness)

    return make
