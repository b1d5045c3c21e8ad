"""A step's parallel calls' snapshots merged in call order, driven directly: a path two calls
left different is an overlap (the later call's version kept), a path they left the same is not
(sub-agents sharing one directory each see the other's write)."""

from __future__ import annotations

from pathlib import Path

from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests, Snapshotter
from treadle.workflows.agent.messages.snapshots import SnapshotRequest


async def test_only_calls_that_left_a_path_different_overlap(
    own_store: FileBlobStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "base.txt").write_text("0")
    snapshotter = Snapshotter(own_store, watching=None)

    async def snapshot(step: int, previous: str | None) -> str:
        request = SnapshotRequest(workspace=str(ws), workflow_id="w", step=step, previous=previous)
        key = (await snapshotter.snapshot(request)).manifest
        assert key is not None
        return key

    start = await snapshot(1, None)
    (ws / "shared.txt").write_text("same")
    (ws / "mine.txt").write_text("call 1")
    first = await snapshot(2, start)
    (ws / "mine.txt").write_text("call 2")  # the second call sees shared.txt as it is
    second = await snapshot(2, start)
    merged = await snapshotter.merge(
        SnapshotRequest(
            workspace=str(ws), workflow_id="w", step=2, previous=start, merge=(first, second)
        )
    )
    assert merged.overlaps == {"mine.txt": (0, 1)}
    assert merged.manifest is not None
    state = await Manifests(own_store).state(merged.manifest)
    contents = {p: (await own_store.get(e[0])).decode() for p, e in state.items()}
    assert contents == {"base.txt": "0", "shared.txt": "same", "mine.txt": "call 2"}
