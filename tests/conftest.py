"""Session-wide fixtures: one real Temporal dev server per session, a client, one scripted model
server (a real HTTP server speaking the OpenAI and Anthropic protocols), the conversation store
every worker shares, and the ``harness`` (a fresh task queue and worker per test).

Each room (tests/loop, tests/tools, ...) has a conftest.py of its own for its fixtures; the
harness and the helpers every room uses live in tests/support.

``--temporal-address HOST:PORT`` runs the suite against an existing server instead.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.support.harness import (
    TEST_STORE,
    Harness,
    replay_finished,
    scripted_worker,
    test_server_binary,
)
from tests.support.processes import free_port
from treadle.activities.model.activity import http_client
from treadle.connection import connect, data_converter
from treadle.devserver import TIMER_TICK, TIMER_TICK_KEY, DevServer, DevServerConfig
from treadle.home import HOME_ENV
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages import search_attributes

# Property tests assert behaviour, never durations: no example may fail for taking longer than
# hypothesis's default 200 ms on a busy machine (that failed as "Flaky" in full runs).
settings.register_profile("treadle", deadline=None)
settings.load_profile("treadle")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--temporal-address",
        default=None,
        help="use the Temporal server at HOST:PORT instead of starting a dev server",
    )


@pytest.fixture(scope="session", autouse=True)
def no_encryption_keys() -> Iterator[None]:
    """A developer's TREADLE_ENCRYPTION_KEYS must not encrypt the suite's runs (the replay checks
    read histories with the plain converter); tests of encryption pass their own keys."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TREADLE_ENCRYPTION_KEYS", raising=False)
        yield


@pytest.fixture(scope="session")
async def temporal_address(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    existing = request.config.getoption("--temporal-address")
    if existing:
        yield existing
        return
    config = DevServerConfig(
        ip="127.0.0.1",
        port=free_port(),
        ui_port=free_port(),
        db_filename=str(tmp_path_factory.mktemp("temporal") / "dev.sqlite"),  # its log's place
        # In memory: the same server and SQLite, a third less of its CPU (measured: 52 -> 31 s
        # over tests/loop and tests/approvals), and the suite is CPU-bound on two cores. No test
        # restarts this server; those that test a restart start their own, with a file.
        in_memory=True,
        namespace="default",
        log_level="error",
        search_attributes={
            name: kind.name.title() for name, kind in search_attributes.REQUIRED.items()
        },
        dynamic_config={
            "system.forceSearchAttributesCacheRefreshOnRead": True,
            TIMER_TICK_KEY: TIMER_TICK,  # as temporal-dev.yaml: what a user's server runs with
        },
    )
    async with DevServer.ensure(config) as server:
        yield server.address


@pytest.fixture(scope="session")
async def client(temporal_address: str) -> Client:
    return await connect(address=temporal_address, namespace="default")


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def _test_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every client, worker and worker process of the session shares one store (External
    Storage reads what the conversation store wrote), out of the repository; removed at the end.
    Treadle's data directory (``TREADLE_HOME``: default workspaces, the demo's) is a temporary
    one too, so no test writes into the checkout."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TREADLE_STORE", str(TEST_STORE))
        patch.setenv(HOME_ENV, str(tmp_path_factory.mktemp("treadle-home")))
        yield
    shutil.rmtree(TEST_STORE, ignore_errors=True)


@pytest.fixture
async def harness(
    request: pytest.FixtureRequest,
    client: Client,
    model_server: ScriptedModelServer,
    tmp_path: Path,
) -> AsyncIterator[Harness]:
    """A running worker on a task queue of its own; every finished run is replay-checked."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    h = Harness(client, task_queue, model_server, workspace)
    async with http_client() as http, scripted_worker(client, task_queue, model_server, http):
        yield h
    await replay_finished(request, h)


@pytest.fixture(scope="module")
async def time_skipping() -> AsyncIterator[WorkflowEnvironment]:
    """Temporal's time-skipping test server, one per test module. It cannot register custom
    search attributes, so agent runs on it set ``search_attributes=False``. Its client has
    Treadle's data converter, as every client a Treadle worker is built on."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=test_server_binary(), data_converter=data_converter(os.environ)
    )
    async with env:
        yield env
