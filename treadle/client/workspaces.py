"""A run's durable workspace from the client's side (``AgentClient.workspace``): its snapshots
listed, the files of any step, any step checked out into a directory, two steps compared.

The run names its latest snapshot (the ``workspace`` query); the earlier ones are found in the
store, each manifest naming its parent. ``manifest=KEY`` starts from a key instead (a trace's
``WorkspaceSnapshot`` line), for a run no worker answers for any more. The store is the
workers': the client's ``store`` setting, else ``TREADLE_STORE``, else ``store/`` in the data
directory (``treadle.home``). A check-out writes only what differs from what the directory
already holds, and removes what the snapshot does not have: so it goes only into a new or empty
directory, or one that is an earlier check-out of the same run (``CHECKOUT_MARK`` says which),
unless ``force``. The check-outs made are remembered in the data directory (``checkouts/``),
so the directory holds the snapshot's files and nothing else.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Literal, TypeVar

from treadle.activities.store.blobs import KEY_PATTERN, BlobCorrupt, BlobMissing, BlobStore
from treadle.activities.workspace import Manifest, ManifestError, Manifests, materialise
from treadle.activities.workspace.manifest import SYMLINK, Entry, State
from treadle.activities.workspace.snapshot import size
from treadle.client.calls import Calls
from treadle.client.errors import InvalidRequest, NoWorkerAnswered, WorkspaceUnavailable
from treadle.connection import store_location
from treadle.home import home
from treadle.stores import StoreSettingsError, open_blob_store
from treadle.workflows.agent.messages.snapshots import WorkspaceHead
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import Frozen

__all__ = [
    "CheckedOut",
    "SnapshotInfo",
    "WorkspaceChange",
    "WorkspaceClient",
    "WorkspaceFile",
    "changes",
    "open_store",
    "size",
]

T = TypeVar("T")

CHECKOUTS = "checkouts"
"""The data directory's folder that remembers check-outs: one file per directory checked out
(named by its path's hash), holding the run's id. A later check-out of the same run may go there
again (and remove what it wrote); of another run, or into a directory of other files, only
with ``force``."""


class SnapshotInfo(Frozen):
    """One snapshot of a run's workspace: after which step, what changed, what it holds."""

    step: int
    manifest: str
    """Its manifest's key in the store (``manifest=`` starts from it)."""
    changed: int
    changed_bytes: int
    files: int
    bytes: int
    excluded: dict[str, int]
    """Files left out, by reason (ignored, over the size cap...)."""

    @property
    def excluded_count(self) -> int:
        return sum(self.excluded.values())


class WorkspaceFile(Frozen):
    """One file of a snapshot: its content's key in the store, its mode and size."""

    path: str
    key: str
    mode: int
    size: int

    @property
    def symlink(self) -> bool:
        return self.mode == SYMLINK


class WorkspaceChange(Frozen):
    """A path added (``A``), modified (``M``) or deleted (``D``) between two snapshots."""

    kind: Literal["A", "M", "D"]
    path: str
    before: WorkspaceFile | None = None
    after: WorkspaceFile | None = None


class CheckedOut(Frozen):
    """A snapshot checked out into a directory."""

    step: int
    manifest: str
    into: str
    written: tuple[str, ...]
    written_bytes: int
    removed: tuple[str, ...]
    unchanged: int


class WorkspaceClient:
    """Snapshots of runs' workspaces, read from the workers' store."""

    def __init__(
        self, calls: Calls, *, store: str | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self._calls = calls
        self._store_setting = store
        self._environ = environ

    async def snapshots(self, run_id: str, *, manifest: str | None = None) -> list[SnapshotInfo]:
        """The run's snapshots, oldest first."""
        manifests = Manifests(self.store())
        head = _given(manifest) or await self.head(run_id)
        chain = await _read(run_id, manifests.chain(head))
        return [_info(key, m) for key, m in reversed(chain)]

    async def files(
        self, run_id: str, step: int | None = None, *, manifest: str | None = None
    ) -> list[WorkspaceFile]:
        """The files of the workspace after ``step`` (default: the latest snapshot), by path."""
        manifests = Manifests(self.store())
        key = await self._key(run_id, manifests, step, manifest)
        state = await _read(run_id, manifests.state(key))
        return [_file(path, entry) for path, entry in sorted(state.items())]

    async def checkout(
        self,
        run_id: str,
        into: str | Path,
        *,
        step: int | None = None,
        manifest: str | None = None,
        force: bool = False,
    ) -> CheckedOut:
        """The workspace after ``step`` (default: the latest) checked out into ``into``: a
        new or empty directory, or an earlier check-out of the same run; any other only with
        ``force`` (the check-out removes what the snapshot does not have)."""
        directory = Path(into).expanduser()
        record = _checkout_record(home(self._environ), directory)
        if not force:
            _refuse_unless_ours(directory, run_id, record)
        store = self.store()
        manifests = Manifests(store)
        key = await self._key(run_id, manifests, step, manifest)
        found = await _read(run_id, manifests.get(key))
        done = await _read(run_id, materialise(store, key, directory))
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(f"{run_id}\n")
        except OSError as exc:
            raise InvalidRequest(f"cannot remember the check-out in {record}: {exc}") from exc
        return CheckedOut(
            step=found.step,
            manifest=key,
            into=str(directory),
            written=tuple(done.written),
            written_bytes=done.written_bytes,
            removed=tuple(done.removed),
            unchanged=done.unchanged,
        )

    async def diff(
        self, run_id: str, old_step: int, new_step: int, *, manifest: str | None = None
    ) -> list[WorkspaceChange]:
        """What changed from the workspace after ``old_step`` to the one after ``new_step``."""
        manifests = Manifests(self.store())
        head = _given(manifest) or await self.head(run_id)
        old, _ = await self._at(run_id, manifests, head, old_step)
        new, _ = await self._at(run_id, manifests, head, new_step)
        before = await _read(run_id, manifests.state(old))
        after = await _read(run_id, manifests.state(new))
        return changes(before, after)

    async def head(self, run_id: str) -> str:
        """The key of the run's latest snapshot (its ``workspace`` query; a completed run's
        from its result, with no worker)."""
        ended = await self._calls.closed_result(run_id)
        if ended is not None and ended.workspace_snapshot is not None:
            return ended.workspace_snapshot
        try:
            head: WorkspaceHead = await self._calls.query(
                run_id, AgentWorkflow.workspace, what="the workspace query"
            )
        except NoWorkerAnswered as exc:
            raise NoWorkerAnswered(
                f"{exc} (manifest=KEY, --manifest KEY: a key from its trace reads the store "
                "without it)"
            ) from exc
        if head.manifest is None:
            raise WorkspaceUnavailable(
                f"run {run_id!r} has no workspace snapshot (its config's snapshots.enabled, "
                "or no step changed files yet)"
            )
        return head.manifest

    async def check_out_snapshot(self, thread_id: str, key: str, into: Path) -> str:
        """A snapshot by its key (an imported thread's) checked out into ``into`` when that is
        empty (a directory with files of its own is left alone); one line saying which."""
        if into.is_dir() and any(into.iterdir()):
            return (
                f"workspace: {into} is not empty, left as it is; the thread's snapshot: "
                f"treadle workspace {thread_id} --into DIR"
            )
        try:
            done = await materialise(self.store(), key, into)
        except (BlobMissing, ManifestError) as exc:
            raise WorkspaceUnavailable(
                f"the thread's workspace snapshot is not in the store: {exc}"
            ) from exc
        return (
            f"workspace: {len(done.written)} files ({size(done.written_bytes)}) from the "
            f"thread's snapshot {key[:12]} into {into}"
        )

    def store(self) -> BlobStore:
        """The workers' store, where snapshots live."""
        store = open_store(self._store_setting, self._environ)
        if store is None:
            raise WorkspaceUnavailable(
                "no store (--store none): snapshots live in the workers' store"
            )
        return store

    async def _key(
        self, run_id: str, manifests: Manifests, step: int | None, manifest: str | None
    ) -> str:
        head = _given(manifest) or await self.head(run_id)
        if step is None:
            return head
        key, _ = await self._at(run_id, manifests, head, step)
        return key

    async def _at(
        self, run_id: str, manifests: Manifests, head: str, step: int
    ) -> tuple[str, Manifest]:
        """The snapshot of the workspace as it was after ``step``: the latest taken at or
        before it, found walking back from ``head`` by ``parent`` (no further than that)."""
        at: str | None = head
        first = step
        while at is not None:
            manifest = await _read(run_id, manifests.get(at))
            if manifest.step <= step:
                return at, manifest
            first, at = manifest.step, manifest.parent
        raise WorkspaceUnavailable(
            f"no snapshot at or before step {step} (the first is after step {first})"
        )


def open_store(setting: str | None, environ: Mapping[str, str] | None = None) -> BlobStore | None:
    """The blob store a setting names (``None``: ``TREADLE_STORE``, else the data directory's);
    ``None`` for ``none``. ``InvalidRequest`` for a setting that cannot be used."""
    env = os.environ if environ is None else environ
    try:
        # A reader never makes a store's directory: one that is gone stays an outage.
        return open_blob_store(store_location(env, setting), env, create=False)
    except StoreSettingsError as exc:
        raise InvalidRequest(str(exc)) from exc


def _given(manifest: str | None) -> str | None:
    """A manifest's key as given (``--manifest KEY``), checked: 64 hex digits, never a path."""
    if manifest is not None and not KEY_PATTERN.match(manifest):
        raise InvalidRequest(
            f"--manifest {manifest[:80]!r} is not a manifest's key (64 hex digits, from a "
            "WorkspaceSnapshot line of the run's trace)"
        )
    return manifest


def _checkout_record(data: Path, directory: Path) -> Path:
    """Where the data directory remembers which run was checked out into ``directory``."""
    name = hashlib.sha256(os.fsencode(directory.resolve())).hexdigest()[:32]
    return data / CHECKOUTS / name


def _refuse_unless_ours(directory: Path, run_id: str, record: Path) -> None:
    """``InvalidRequest`` unless ``directory`` is missing, empty, or an earlier check-out of
    ``run_id`` (``record`` says so): a check-out never deletes what it did not write."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise InvalidRequest(f"{directory} is not a directory")
    if not any(directory.iterdir()):
        return
    try:
        ours = record.read_text().strip() == run_id
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        raise InvalidRequest(
            f"{directory} is not empty and not an earlier check-out of run {run_id!r}: a "
            "check-out removes the files its snapshot does not have; choose a new or empty "
            "directory, or pass --force to make this one the snapshot"
        )


async def _read(run_id: str, reading: Awaitable[T]) -> T:
    """Await a read of the store, its failures as ``WorkspaceUnavailable``."""
    try:
        return await reading
    except (BlobMissing, BlobCorrupt, ManifestError) as exc:
        raise WorkspaceUnavailable(f"run {run_id!r}: {exc}") from exc


def changes(old: State, new: State) -> list[WorkspaceChange]:
    """The paths that differ from ``old`` to ``new``, by path."""
    found: list[WorkspaceChange] = []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path), new.get(path)
        if before == after:
            continue
        was = _file(path, before) if before is not None else None
        now = _file(path, after) if after is not None else None
        kind: Literal["A", "M", "D"] = "A" if was is None else "D" if now is None else "M"
        found.append(WorkspaceChange(kind=kind, path=path, before=was, after=now))
    return found


def _info(key: str, m: Manifest) -> SnapshotInfo:
    return SnapshotInfo(
        step=m.step,
        manifest=key,
        changed=m.changed,
        changed_bytes=m.changed_bytes,
        files=m.files,
        bytes=m.total_bytes,
        excluded=dict(m.excluded),
    )


def _file(path: str, entry: Entry) -> WorkspaceFile:
    key, mode, length = entry
    return WorkspaceFile(path=path, key=key, mode=mode, size=length)
