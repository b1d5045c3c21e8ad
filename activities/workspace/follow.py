"""The workspace follows the run: a worker with ``--workspace-root DIR`` runs a run's tools in
``DIR/<the run's directory>``, a copy it brings to the run's latest snapshot before each call.

One tool call (``run``), under the directory's lock:

1. the copy is brought to the snapshot the call names (``ToolRequest.sync``), writing only what
   differs (``materialise.bring``; the snapshotter's index spares reading files it knows). A
   fresh worker restores the whole workspace from the store; a copy this worker left exactly
   at that snapshot (its previous call completed here) is used as it is, without a look; any
   other is walked (stat only) and corrected: an attempt that died half-way here is undone;
2. the tool runs there;
3. after a call that may change files, the copy is snapshotted on that same snapshot, before
   the activity returns: its result carries the new key (``ToolResult.snapshot``), which the
   run keeps and names in its next call.

A worker without a root takes the same snapshot of the run's own ``--workspace`` after a call
whose request asks it to (``WorkspaceSync.here``: ``snapshot_after``, from the tool activity).

So the workspace a run sees after any crash is what its history says was done: a call that
completed is in the snapshot its result recorded, and one that did not complete runs again in
the workspace it first saw. Parallel calls of a step each start from the step's snapshot (the
lock makes them take turns on one worker) and the run merges their snapshots in call order.
A store that is down fails the attempt before the tool reports anything: the run waits for
the store and calls again, and the call runs again from its snapshot.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio import activity

from treadle.activities.heartbeat import heartbeating
from treadle.activities.workspace.materialise import Checkout, bring
from treadle.activities.workspace.scan import EXAMPLES, NOT_UTF8
from treadle.activities.workspace.snapshot import Snapshotter
from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.models import ToolResult
from treadle.workflows.agent.messages.snapshots import (
    DEFAULT_IGNORE,
    SnapshotRequest,
    SnapshotResult,
    WorkspaceSync,
)

__all__ = ["Follower", "directory_name", "may_change", "snapshot_after"]

REPORTS_ITS_PATHS = frozenset({"write_file", "edit_file"})
"""Tools whose result names every path they changed (and that change none when they fail):
the snapshot after them looks at those paths alone. After any other tool that may change
files (a command, your own tools) it looks at what the worker's watcher saw change in the copy
(``watch``), or walks the whole copy (stat only, reading what changed) when it cannot trust one."""

KEEP_LOCKS = 1024
"""Copies whose lock and state a worker keeps between calls."""


def directory_name(workflow_id: str) -> str:
    """The run's directory under a worker's root: its workflow id made a safe file name,
    with a hash so two ids that read the same once made safe stay apart."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", workflow_id).strip("._")[:80] or "run"
    return f"{safe}-{hashlib.sha256(workflow_id.encode()).hexdigest()[:12]}"


def may_change(tool: str) -> bool:
    """Whether a call of ``tool`` may change files (your own tools unless declared read-only)."""
    spec = TOOLS.get(tool)
    return spec is None or spec.mutating


async def snapshot_after(
    snapshotter: Snapshotter,
    directory: Path,
    workflow_id: str,
    tool: str,
    sync: WorkspaceSync,
    result: ToolResult,
    *,
    max_read_bytes: int | None = None,
) -> ToolResult:
    """``result`` with the snapshot of ``directory`` taken after its call, on ``sync.manifest``:
    of the paths a file tool reported, else of what the watcher saw change (or a walk).
    ``StoreUnavailable`` when the store cannot be reached; ``TooMuchToRead`` past
    ``max_read_bytes``."""
    if tool in REPORTS_ITS_PATHS:
        paths: tuple[str, ...] | None = result.mutated_paths if result.success else ()
    else:
        paths = None
    request = SnapshotRequest(
        workspace=str(directory),
        workflow_id=workflow_id,
        step=sync.step,
        previous=sync.manifest,
        paths=paths,
        ignore=sync.ignore,
        max_file_bytes=sync.max_file_bytes,
        full_walk_every=sync.full_walk_every,
    )
    async with heartbeating("snapshot", sync.step):
        taken = await snapshotter.snapshot(request, max_read_bytes=max_read_bytes)
    # The run's trace says only ``taken by its calls`` (its history carries the key alone):
    # what the snapshot looked at and left out is said here.
    activity.logger.info(
        "workspace.snapshot",
        extra={"step": sync.step, "manifest": taken.manifest, "detail": taken.detail},
    )
    left_out = None
    if taken.unrecordable:
        left_out = (
            f"left out {len(taken.unrecordable)} ({NOT_UTF8}: "
            f"{', '.join(taken.unrecordable[:EXAMPLES])})"
        )
    return result.model_copy(update={"snapshot": taken.manifest, "snapshot_left_out": left_out})


class Follower:
    """The tool side of ``--workspace-root``: brings a run's copy up to date, runs a call in
    it, snapshots it after. Shares the worker's ``Snapshotter`` (its index and manifests)."""

    def __init__(self, root: Path, snapshotter: Snapshotter) -> None:
        self.root = root
        self.snapshotter = snapshotter
        self._locks: dict[Path, asyncio.Lock] = {}
        self._exactly: dict[Path, str | None] = {}
        """Copies known to be exactly a snapshot: brought to it or snapshotted here, with no
        call run in them since (one that died or raised leaves its copy unknown)."""
        self.last_checkout: Checkout | None = None
        """What the last ``bring`` wrote and removed: for tests, never for the run."""

    def directory(self, workflow_id: str) -> Path:
        return self.root / directory_name(workflow_id)

    async def run(
        self,
        workflow_id: str,
        tool: str,
        sync: WorkspaceSync,
        execute: Callable[[Path], Awaitable[ToolResult]],
    ) -> ToolResult:
        """``execute`` (the call, given its directory) in the run's copy brought to
        ``sync.manifest``; the result with the snapshot taken after it, when it may change
        files (``StoreUnavailable`` when the store cannot be reached, before or after)."""
        directory = self.directory(workflow_id)
        async with self._lock(directory):
            async with heartbeating("workspace", sync.step):
                await self._bring(directory, sync)
            self._exactly.pop(directory, None)
            result = await execute(directory)
            if not may_change(tool):
                self._exactly[directory] = sync.manifest
                return result
            taken = await snapshot_after(
                self.snapshotter, directory, workflow_id, tool, sync, result
            )
            self._exactly[directory] = taken.snapshot
            return taken

    async def snapshot(self, request: SnapshotRequest) -> SnapshotResult:
        """The after-step snapshot of a run whose workspace follows it: of this worker's copy,
        brought to the run's latest snapshot first (nothing to do where its calls ran)."""
        directory = self.directory(request.workflow_id)
        sync = WorkspaceSync(
            manifest=request.previous,
            step=request.step,
            ignore=request.ignore,
            max_file_bytes=request.max_file_bytes,
        )
        async with self._lock(directory):
            await self._bring(directory, sync)
            self._exactly.pop(directory, None)
            taken = await self.snapshotter.snapshot(
                request.model_copy(update={"workspace": str(directory)})
            )
            self._exactly[directory] = taken.manifest
            return taken

    def _lock(self, directory: Path) -> asyncio.Lock:
        """The copy's lock (one process per root: the lock is this worker's). Past
        ``KEEP_LOCKS`` copies, those no call holds are forgotten (their next call walks them)."""
        if directory not in self._locks and len(self._locks) >= KEEP_LOCKS:
            for idle in [d for d, lock in self._locks.items() if not lock.locked()]:
                del self._locks[idle]
                self._exactly.pop(idle, None)
        return self._locks.setdefault(directory, asyncio.Lock())

    async def _bring(self, directory: Path, sync: WorkspaceSync) -> None:
        """The copy made the snapshot ``sync.manifest`` (empty when there is none yet)."""
        if directory in self._exactly and self._exactly[directory] == sync.manifest:
            self.last_checkout = Checkout()  # the previous call here left it so
            return
        record = self.snapshotter.record_of(directory)
        withheld: tuple[str, ...] = ()
        if sync.manifest is None:
            ignore = DEFAULT_IGNORE if sync.ignore is None else sync.ignore
            wanted = {}
        else:
            manifests = self.snapshotter.manifests
            manifest = await manifests.get(sync.manifest)
            ignore, withheld = manifest.ignore, manifest.withheld
            wanted = await manifests.state(sync.manifest)
        self.last_checkout = await bring(
            self.snapshotter.store, wanted, ignore, directory, record.index, withheld=withheld
        )
        # The copy is that snapshot now: the next one is taken on it, looking at the paths a
        # call reports alone (nothing else changed them under the lock).
        record.last = sync.manifest
