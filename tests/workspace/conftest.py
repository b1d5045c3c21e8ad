"""Durable workspaces: snapshots of a run's workspace in the store, and check-outs of any step.

Runs go through the session's harness (a real dev server, the scripted model server, a worker
whose store is the session's test store, or one with ``--workspace-root``: ``rooted_worker``);
the scale tests drive the snapshotter directly on a directory of their own, counting what it
reads.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import boto3
import pytest
from temporalio.client import Client

from tests.support.harness import TEST_STORE
from tests.support.moto import moto_server
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.cli.worker import build_worker
from treadle.scripted_model import ScriptedModelServer


@pytest.fixture
def store() -> FileBlobStore:
    """The store the harness's worker writes to (the session's test store)."""
    return FileBlobStore(TEST_STORE)


@pytest.fixture
def own_store(tmp_path: Path) -> FileBlobStore:
    """A store of the test's own, to count its bytes."""
    return FileBlobStore(tmp_path / "store")


@pytest.fixture
async def rooted_worker(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> AsyncIterator[tuple[str, Path]]:
    """A worker with ``--workspace-root`` (in this process, the session's store) on a task
    queue of its own: (queue, root)."""
    task_queue = f"rooted-{uuid.uuid4().hex[:10]}"
    root = tmp_path / "root"
    settings = ProviderSettings.from_env({"OPENAI_BASE_URL": model_server.base_url})
    async with (
        http_client() as http,
        build_worker(
            client,
            task_queue=task_queue,
            settings=settings,
            http=http,
            store=FileBlobStore(TEST_STORE),
            workspace_root=root,
        ),
    ):
        yield task_queue, root


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """moto's S3 server as its own process on a free loopback port, with a fresh bucket; the
    AWS environment a worker would be given (moto takes any credentials) and the bucket."""
    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        bucket = f"treadle-{uuid.uuid4().hex[:12]}"
        boto3.session.Session(
            aws_access_key_id="admin", aws_secret_access_key="admin", region_name="us-east-1"
        ).client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "treadle-test",
            "AWS_SECRET_ACCESS_KEY": "treadle-test",
            "BUCKET": bucket,
        }
