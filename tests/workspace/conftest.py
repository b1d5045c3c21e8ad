"""Durable workspaces: snapshots of a run's workspace in the store, and check-outs of any step.

Runs go through the session's harness (a real dev server, the scripted model server, a worker
whose store is the session's test store); the scale tests drive the snapshotter directly on a
directory of their own, counting what it reads.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from activities.store.blobs import FileBlobStore
from tests.support.harness import TEST_STORE
from tests.support.processes import free_port


@pytest.fixture
def store() -> FileBlobStore:
    """The store the harness's worker writes to (the session's test store)."""
    return FileBlobStore(TEST_STORE)


@pytest.fixture
def own_store(tmp_path: Path) -> FileBlobStore:
    """A store of the test's own, to count its bytes."""
    return FileBlobStore(tmp_path / "store")


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """moto's S3 server as its own process on a free loopback port, with a fresh bucket; the
    AWS environment a worker would be given (moto takes any credentials) and the bucket."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if process.poll() is not None:
                pytest.fail(f"moto server exited: {log.read_text()}")
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail(f"moto server never answered on {endpoint}: {log.read_text()}")
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
    finally:
        process.terminate()
        process.wait(30)
