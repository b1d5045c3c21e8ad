"""Snapshots in an S3 store (moto's server, a real process): taken and checked out through
the same store setting a worker is given, with nothing but the bucket in common."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from treadle.activities.workspace import Snapshotter, materialise
from treadle.stores import open_blob_store, parse_store
from treadle.workflows.agent.messages.snapshots import SnapshotRequest


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def test_snapshots_round_trip_through_s3(tmp_path: Path, s3_env: dict[str, str]) -> None:
    """Two snapshots written to S3 by one store object are checked out exactly by another
    (a second machine's), the older one over the newer's copy."""
    url = f"s3://{s3_env['BUCKET']}/workspaces"
    store = open_blob_store(parse_store(url), s3_env)
    assert store is not None
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print(1)\n")
    (ws / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(ws / "run.sh", 0o750)
    snapshotter = Snapshotter(store)
    first = await snapshotter.snapshot(SnapshotRequest(workspace=str(ws), workflow_id="w", step=1))
    one = tree(ws)
    (ws / "src" / "app.py").write_text("print(2)\n")
    (ws / "notes.md").write_text("n")
    second = await snapshotter.snapshot(
        SnapshotRequest(workspace=str(ws), workflow_id="w", step=2, previous=first.manifest)
    )
    two = tree(ws)
    assert first.manifest and second.manifest and second.changed == 2

    elsewhere = open_blob_store(parse_store(url), s3_env)
    assert elsewhere is not None
    into = tmp_path / "elsewhere"
    await materialise(elsewhere, second.manifest, into)
    assert tree(into) == two
    done = await materialise(elsewhere, first.manifest, into)
    assert tree(into) == one
    assert sorted(done.written) == ["src/app.py"] and done.removed == ["notes.md"]
