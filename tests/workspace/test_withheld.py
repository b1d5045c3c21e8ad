"""A workspace file that holds one of the worker's secrets is withheld from its snapshots: left
out, named in the manifest and its trace line, never stored; a check-out leaves such a file of
its target where it is; once the secret is gone from it, the file is snapshotted again."""

from __future__ import annotations

from pathlib import Path

from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests, Snapshotter, materialise
from treadle.workflows.agent.messages.snapshots import SnapshotRequest

KEY = b"a-worker-secret-value-for-this-test"


def stored_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


async def test_a_file_holding_a_worker_secret_is_withheld(
    own_store: FileBlobStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("print(1)\n")
    (ws / ".env").write_bytes(b"OPENAI_API_KEY=" + KEY + b"\n")
    snapshotter = Snapshotter(own_store, holds_secret=lambda data: KEY in data)
    manifests = Manifests(own_store)

    def request(
        step: int, previous: str | None, paths: tuple[str, ...] | None = None
    ) -> SnapshotRequest:
        return SnapshotRequest(
            workspace=str(ws), workflow_id="w", step=step, previous=previous, paths=paths
        )

    first = await snapshotter.snapshot(request(1, None))
    assert first.manifest is not None
    manifest = await manifests.get(first.manifest)
    assert manifest.withheld == (".env",)
    assert set(await manifests.state(first.manifest)) == {"app.py"}
    assert "holds a secret 1" in first.detail and ".env" in first.detail
    assert KEY not in stored_bytes(tmp_path / "store")

    # A tool reports the paths it wrote (the watched and reported paths take the same way):
    # a second file with the key is withheld too, the first stays withheld.
    (ws / "notes.md").write_bytes(b"the key is " + KEY)
    second = await snapshotter.snapshot(request(2, first.manifest, ("notes.md",)))
    assert second.manifest is not None and second.manifest != first.manifest
    assert (await manifests.get(second.manifest)).withheld == (".env", "notes.md")
    assert KEY not in stored_bytes(tmp_path / "store")

    # A check-out over a copy that has its own .env leaves it as it is, and writes none where
    # there was none.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".env").write_text("mine")
    done = await materialise(own_store, second.manifest, home)
    assert files(home) == {".env": "mine", "app.py": "print(1)\n"}
    assert done.removed == []
    fresh = tmp_path / "fresh"
    await materialise(own_store, second.manifest, fresh)
    assert files(fresh) == {"app.py": "print(1)\n"}

    # The secret taken out of notes.md: the file is snapshotted, .env still withheld.
    (ws / "notes.md").write_text("no key here")
    third = await snapshotter.snapshot(request(3, second.manifest, ("notes.md",)))
    assert third.manifest is not None
    assert (await manifests.get(third.manifest)).withheld == (".env",)
    assert set(await manifests.state(third.manifest)) == {"app.py", "notes.md"}

    # A whole walk (a fresh worker) finds the same.
    again = Snapshotter(own_store, holds_secret=lambda data: KEY in data)
    fourth = await again.snapshot(request(4, third.manifest))
    assert fourth.manifest == third.manifest
