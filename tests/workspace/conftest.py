"""Durable workspaces: snapshots of a run's workspace in the store, and check-outs of any step.

Runs go through the session's harness (a real dev server, the scripted model server, a worker
whose store is the session's test store); the scale tests drive the snapshotter directly on a
directory of their own, counting what it reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.store.blobs import FileBlobStore
from tests.support.harness import TEST_STORE


@pytest.fixture
def store() -> FileBlobStore:
    """The store the harness's worker writes to (the session's test store)."""
    return FileBlobStore(TEST_STORE)


@pytest.fixture
def own_store(tmp_path: Path) -> FileBlobStore:
    """A store of the test's own, to count its bytes."""
    return FileBlobStore(tmp_path / "store")
