"""A snapshot hands its work to threads as few times as it can (each hand-off wakes a thread
and then the worker's event loop, a cost paid every step): one for the look at the workspace
and the reading of what changed, one for the store to take the new files' contents with the
manifest that names them. Past ``READ_AHEAD_BYTES`` files are read one at a time, past
``HELD_BYTES`` held contents go to the store first; either way the snapshot is the same. The
index learns a file only once its content is in the store, and a store that would keep other
bytes than the file's is refused. Counted, never timed."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.hand_offs import hand_offs
from treadle.activities.content import RedactedBlobs, Redactor
from treadle.activities.errors import StoreUnavailable
from treadle.activities.store.blobs import BlobCorrupt, FileBlobStore
from treadle.activities.workspace import Snapshotter, materialise, snapshot
from treadle.workflows.agent.messages.snapshots import SnapshotRequest

HOUR_AGO = time.time() - 3600
LOOK_AND_READ = "Snapshotter._snapshot.<locals>.look_and_read"


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def write(root: Path, rel: str, content: bytes) -> None:
    """A file written a while ago (a step's model call lies between a write and its snapshot)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.utime(path, (HOUR_AGO, HOUR_AGO))


async def checked_out(store: FileBlobStore, key: str | None, into: Path) -> dict[str, bytes]:
    assert key is not None
    await materialise(store, key, into)
    return files(into)


async def test_a_snapshot_is_two_hand_offs(tmp_path: Path, own_store: FileBlobStore) -> None:
    """The first snapshot (a whole walk) and a step's one changed file each: the look with
    the read, then the store."""
    root = tmp_path / "ws"
    for n in range(3):
        write(root, f"src/f{n}.py", f"print({n})\n".encode())
    snapshotter = Snapshotter(own_store, watching=None)
    with hand_offs() as first_hand_offs:
        first = await snapshotter.snapshot(
            SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
        )
    assert first.hashed == 3 and first.created
    write(root, "src/f1.py", b"print('changed')\n")
    with hand_offs() as second_hand_offs:
        second = await snapshotter.snapshot(
            SnapshotRequest(
                workspace=str(root),
                workflow_id="w",
                step=1,
                previous=first.manifest,
                paths=("src/f1.py",),
            )
        )
    assert (second.changed, second.hashed) == (1, 1)
    assert first_hand_offs == second_hand_offs == [LOOK_AND_READ, "FileBlobStore._write_all"]
    assert await checked_out(own_store, second.manifest, tmp_path / "out") == files(root)


async def test_past_the_limits_files_are_read_one_at_a_time_and_stored_first(
    tmp_path: Path, own_store: FileBlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten files of 100 bytes, 100 read with the look, 250 held: the first file read with the
    look, nine alone; the store takes them two at a time, four times, and the last two with
    the manifest; the snapshot checks out the same bytes."""
    monkeypatch.setattr(snapshot, "READ_AHEAD_BYTES", 100)
    monkeypatch.setattr(snapshot, "HELD_BYTES", 250)
    root = tmp_path / "ws"
    for n in range(10):
        write(root, f"f{n}.txt", bytes([65 + n]) * 100)
    with hand_offs() as counted:
        taken = await Snapshotter(own_store, watching=None).snapshot(
            SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
        )
    assert taken.hashed == 10
    assert counted.count(LOOK_AND_READ) == 1
    assert counted.count("_read") == 9
    assert counted.count("FileBlobStore._write_all") == 5
    assert await checked_out(own_store, taken.manifest, tmp_path / "out") == files(root)


async def test_a_file_is_known_only_once_its_content_is_stored(
    tmp_path: Path, own_store: FileBlobStore
) -> None:
    """The store down when the step's snapshot writes: the snapshot fails (the run waits and
    takes it again), and the changed file is not taken as stored: the next snapshot reads it
    again and stores it."""
    root = tmp_path / "ws"
    write(root, "a.txt", b"first\n")
    store_root = own_store.root
    snapshotter = Snapshotter(own_store, watching=None)
    first = await snapshotter.snapshot(
        SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
    )
    write(root, "a.txt", b"second\n")
    step = SnapshotRequest(
        workspace=str(root), workflow_id="w", step=1, previous=first.manifest, paths=("a.txt",)
    )
    store_root.rename(tmp_path / "away")
    store_root.write_text("a file where the store's directory should be")
    with pytest.raises(StoreUnavailable):
        await snapshotter.snapshot(step)
    store_root.unlink()
    (tmp_path / "away").rename(store_root)
    again = await snapshotter.snapshot(step)
    assert (again.changed, again.hashed) == (1, 1)
    assert await checked_out(own_store, again.manifest, tmp_path / "out") == {"a.txt": b"second\n"}


class FailsAtTheManifest(FileBlobStore):
    """A directory store that is unreachable for the call that writes the manifest: the fifth
    of the snapshot below (the first four write held contents)."""

    calls = 0

    async def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        self.calls += 1
        if self.calls == 5:
            raise StoreUnavailable(f"{self.describe()} is unreachable", where=self.describe())
        return await super().put_many(blobs)


async def test_held_contents_written_before_a_failed_manifest_are_known_the_rest_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten files, 250 bytes held: eight are written in four calls, then the call with the
    last two and the manifest fails. The index knows the eight (their blobs are stored, in
    the walk's order), not the two: the snapshot taken again reads only those two, and checks
    out every file."""
    monkeypatch.setattr(snapshot, "READ_AHEAD_BYTES", 0)
    monkeypatch.setattr(snapshot, "HELD_BYTES", 250)
    root = tmp_path / "ws"
    for n in range(10):
        write(root, f"f{n}.txt", bytes([65 + n]) * 100)
    store = FailsAtTheManifest(tmp_path / "store")
    snapshotter = Snapshotter(store, watching=None)
    first = SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
    with pytest.raises(StoreUnavailable):
        await snapshotter.snapshot(first)
    known = snapshotter.record_of(root).index.files
    assert len(known) == 8
    for rel, file in known.items():
        assert await store.get(file.key) == (root / rel).read_bytes()
    taken = await snapshotter.snapshot(first)
    assert (taken.hashed, taken.files) == (2, 10)
    assert await checked_out(store, taken.manifest, tmp_path / "out") == files(root)


async def test_a_store_that_changes_bytes_cannot_hold_a_workspace(tmp_path: Path) -> None:
    """A redacting store keeps other bytes than a file's, under another key: the snapshot is
    refused (a check-out could not give the file back), never a manifest naming a blob that
    is not there. The worker hands snapshots its store unredacted (a file holding a secret
    is withheld instead: ``test_withheld``)."""
    secret = "a-value-only-this-worker-holds-1234"
    root = tmp_path / "ws"
    write(root, "notes.txt", f"token {secret}\n".encode())
    redacting = RedactedBlobs(FileBlobStore(tmp_path / "store"), Redactor([secret]))
    with pytest.raises(BlobCorrupt, match="stored a workspace's file under another key"):
        await Snapshotter(redacting, watching=None).snapshot(
            SnapshotRequest(workspace=str(root), workflow_id="w", step=0)
        )
