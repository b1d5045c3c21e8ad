"""Snapshots cost what changed, not the workspace's size: on a 10,000-file workspace with one
file changed per step only that file is read and stored; identical content is stored once;
the store grows by the changes and a few hundred bytes of manifest per step. Counted by the
snapshotter and measured in the store, never timed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests, Snapshotter, materialise
from treadle.activities.workspace.watch import Watcher
from treadle.workflows.agent.messages.snapshots import SnapshotRequest

FILES = 10_000
HOUR_AGO = time.time() - 3600


def make(root: Path, files: int = FILES) -> list[str]:
    """``files`` files of 100 distinct bytes each in 100 directories, modified an hour ago."""
    paths = []
    for i in range(files):
        rel = f"d{i % 100:02d}/f{i:05d}.txt"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{i:05d}".encode() * 20)
        os.utime(path, (HOUR_AGO, HOUR_AGO))
        paths.append(rel)
    return paths


def rewrite(root: Path, rel: str, content: bytes, seconds_ago: float) -> None:
    """A tool's write, a while before the snapshot (a step's model call lies between)."""
    (root / rel).write_bytes(content)
    then = time.time() - seconds_ago
    os.utime(root / rel, (then, then))


def store_bytes(store: FileBlobStore) -> tuple[int, int]:
    files = [p for p in store.root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


@pytest.mark.parametrize("how", ["walked", "watched", "reported"])
async def test_one_changed_file_is_the_only_one_read(
    tmp_path: Path, own_store: FileBlobStore, how: str
) -> None:
    """After the first snapshot (every file read once), each step that rewrites one file reads
    exactly that file, whether the whole workspace is walked (a command ran on a worker that
    cannot watch), the watcher names the paths (a command ran) or only the reported paths are
    looked at; a same-size rewrite is seen too. Watched or reported, only that file and its
    directory are stat'ed."""
    root = tmp_path / "ws"
    paths = make(root)
    reported = how == "reported"
    snapshotter = Snapshotter(own_store, watching=Watcher if how == "watched" else None)
    first = await snapshotter.snapshot(
        SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
    )
    assert first.hashed == FILES and first.files == FILES
    previous = first.manifest
    for step in range(1, 8):
        rel = paths[step * 997]
        rewrite(root, rel, f"{step:05d}".encode() * 20, seconds_ago=5 - step * 0.5)
        result = await snapshotter.snapshot(
            SnapshotRequest(
                workspace=str(root),
                workflow_id="w",
                step=step,
                previous=previous,
                paths=(rel,) if reported else None,
                full_walk_every=1000,
            )
        )
        assert (result.changed, result.files) == (1, FILES)
        assert snapshotter.last.hashed == 1 and snapshotter.last.hashed_bytes == 100
        assert snapshotter.last.whole_walk is (how == "walked")
        assert snapshotter.last.how.startswith(how)
        if how == "walked":
            assert snapshotter.last.stats == FILES + 100
        else:
            assert snapshotter.last.stats == 2
        previous = result.manifest
    assert previous is not None
    state = await Manifests(own_store).state(previous)
    assert await own_store.get(state[paths[7 * 997]][0]) == b"00007" * 20


async def test_a_file_written_just_before_a_snapshot_is_read_again_once(
    tmp_path: Path, own_store: FileBlobStore
) -> None:
    """A file modified within a second of being hashed may change again without its times
    changing (racily clean): the next whole walk reads it once more, then trusts it (a
    watcher would report such a change: this is the walk's rule)."""
    root = tmp_path / "ws"
    make(root, 50)
    snapshotter = Snapshotter(own_store, watching=None)
    request = SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
    first = await snapshotter.snapshot(request)
    (root / "d00/f00000.txt").write_bytes(b"new")
    fresh = snapshotter.clock()
    second = await snapshotter.snapshot(
        request.model_copy(update={"step": 1, "previous": first.manifest})
    )
    assert snapshotter.last.hashed == 1
    snapshotter.clock = lambda: fresh + 5_000_000_000
    third = await snapshotter.snapshot(
        request.model_copy(update={"step": 2, "previous": second.manifest})
    )
    assert snapshotter.last.hashed == 1 and third.manifest == second.manifest
    await snapshotter.snapshot(request.model_copy(update={"step": 3, "previous": third.manifest}))
    assert snapshotter.last.hashed == 0


async def test_the_store_grows_by_the_changes(tmp_path: Path, own_store: FileBlobStore) -> None:
    """Identical content is one blob; 300 one-file steps add 300 blobs and 300 manifests whose
    bytes stay a few hundred per step (skip-deltas: no listing of the workspace is written
    again), and any step still rebuilds from a handful of manifests."""
    root = tmp_path / "ws"
    for i in range(500):
        path = root / f"same/{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"identical")
    paths = make(root, 1000)
    snapshotter = Snapshotter(own_store)
    first = await snapshotter.snapshot(
        SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
    )
    blobs, first_bytes = store_bytes(own_store)
    assert blobs == 1000 + 1 + 1  # distinct contents, the 500 identical ones, the manifest
    previous = first.manifest
    steps = 300
    for step in range(1, steps + 1):
        rel = paths[step]
        rewrite(root, rel, f"s{step:04d}".encode() * 20, seconds_ago=5)
        result = await snapshotter.snapshot(
            SnapshotRequest(
                workspace=str(root), workflow_id="w", step=step, previous=previous, paths=(rel,)
            )
        )
        previous = result.manifest
    assert previous is not None
    blobs_after, bytes_after = store_bytes(own_store)
    assert blobs_after - blobs == 2 * steps
    manifest_bytes = bytes_after - first_bytes - 100 * steps
    assert manifest_bytes / steps < 1000
    cold = Manifests(FileBlobStore(own_store.root))
    state = await cold.state(previous)
    assert cold.reads <= bin(steps).count("1") + 1
    assert len(state) == 1500
    into = tmp_path / "out"
    done = await materialise(own_store, previous, into)
    assert len(done.written) == 1500
    assert (into / paths[steps]).read_bytes() == f"s{steps:04d}".encode() * 20
