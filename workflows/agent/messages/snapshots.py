"""Workspace snapshots, the workflow's side: after a step whose tools changed files, the
``snapshot_workspace`` activity records the workspace as a manifest in the content-addressed
store, and the run keeps only the manifest's key (``AgentRun.workspace_snapshot``).

Here are the config block (``SnapshotConfig``, ``AgentConfig.snapshots``), the activity's
messages and its options; ``snapshotting.after_step`` is what the engine calls after a
step's hooks. The manifests themselves, the walk and the check-out are I/O:
``treadle.activities.workspace``.

Pure and deterministic: imported in the workflow sandbox (and passed through by the worker).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer
from temporalio import workflow
from temporalio.common import RetryPolicy

from treadle.workflows.base import FIRST_RETRY, Frozen

__all__ = [
    "DEFAULT_IGNORE",
    "MERGED_PATHS_KEPT",
    "SNAPSHOT_MAX_ATTEMPTS",
    "SnapshotConfig",
    "SnapshotRequest",
    "SnapshotResult",
    "WorkspaceHead",
    "WorkspaceSync",
    "paths_hint",
    "snapshot_call",
]

MERGED_PATHS_KEPT = 200
"""Paths a merge names per merged snapshot (``SnapshotResult.paths``): what the run's progress
tracking and hooks are told a sub-agent changed; beyond it, the count alone."""

DEFAULT_IGNORE: tuple[str, ...] = (
    ".git/objects",
    ".git/lfs",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    "*.pyc",
    ".DS_Store",
)
"""What a snapshot leaves out unless the config says otherwise: what tools rebuild (caches,
installed packages) and git's object database (the repository's own history)."""

SNAPSHOT_MAX_ATTEMPTS = 10
"""Attempts of one snapshot: a store that is down is waited for (about five minutes with the
backoff below) before the step's snapshot is given up as a trace line; the next snapshot
records the whole workspace again, so nothing is lost but that step's own checkpoint."""


class SnapshotConfig(Frozen):
    """Workspace snapshots: which runs take them and what they leave out."""

    enabled: bool = True
    """Take a snapshot after each step whose tools changed files (``false``: none). On by
    default: on a worker with a store, each call that may change files snapshots the run's
    workspace before it returns (``WorkspaceSync.here``), costing its step no history event and
    about 170 bytes; a step whose hooks ran, whose calls ran in parallel, or whose
    snapshot had to read more than 64 MiB is snapshotted after it by one activity (about 6
    events). A worker without a store takes none."""
    ignore: tuple[str, ...] = DEFAULT_IGNORE
    """Left out of every snapshot. A pattern without ``/`` matches a file or directory name at
    any depth (``node_modules``, ``*.pyc``); one with ``/`` matches a path from the
    workspace's root (``.git/objects``, ``build/*.o``). Each snapshot counts what it left out."""
    max_file_bytes: int = Field(50 * 2**20, ge=0)
    """Files larger than this are left out (and counted, with their names)."""
    full_walk_every: int = Field(20, ge=1)
    """When a step's tools all said which paths they changed, only those are looked at, and
    after a command only what the worker's inotify watcher saw change; every this many
    snapshots the whole workspace is walked anyway (what a watcher cannot see: a network file
    system written from elsewhere, a write through a memory map or an outside hard link)."""


class WorkspaceHead(Frozen):
    """Answer of the ``workspace`` query: where the run's snapshots are."""

    manifest: str | None
    """The key of the latest snapshot's manifest (``None``: none taken yet); the earlier
    ones are found from it, by each manifest's ``parent``."""
    step: int
    """The run's current step."""


class WorkspaceSync(Frozen):
    """What a tool call tells a worker with ``--workspace-root``: the snapshot the call must
    see (its workspace is brought to it first) and how to take the one after it. A worker
    without a root ignores it, unless ``here`` asks it to snapshot the run's own workspace."""

    manifest: str | None = None
    """The key of the run's latest snapshot (``None``: none yet, the workspace is empty)."""
    step: int = Field(0, ge=0)
    ignore: tuple[str, ...] | None = None
    """As ``SnapshotRequest.ignore``."""
    max_file_bytes: int = Field(50 * 2**20, ge=0)
    full_walk_every: int = Field(20, ge=1)
    """As ``SnapshotRequest.full_walk_every``."""
    here: bool = False
    """A worker without a root snapshots the run's own ``--workspace`` after the call, when
    the call may change files, on ``manifest`` (a run with snapshots on, its calls run in
    order, no hooks to run after them)."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # In every tool call's request: only what is not a default (``{"step": 3}`` for a
        # run with no snapshot yet and the default patterns).
        data: dict[str, Any] = handler(self)
        for name in ("manifest", "ignore", "max_file_bytes", "full_walk_every", "here"):
            if name in data and data[name] == WorkspaceSync.model_fields[name].default:
                del data[name]
        return data


class SnapshotRequest(Frozen):
    """Input of ``snapshot_workspace``: one step's workspace, to record."""

    workspace: str = Field(min_length=1)
    workflow_id: str = Field(min_length=1)
    step: int = Field(ge=0)
    previous: str | None = None
    """The key of the run's latest manifest (``None``: its first snapshot)."""
    paths: tuple[str, ...] | None = None
    """The paths the step's tools reported changing; ``None``: they did not all say (a
    command ran), so the worker looks at what its watcher saw change, or walks the whole
    workspace when it cannot trust one (``treadle.activities.workspace.watch``)."""
    ignore: tuple[str, ...] | None = None
    """The config's ignore patterns; ``None``: ``DEFAULT_IGNORE`` (history carries no copy of
    the defaults at every step)."""
    max_file_bytes: int = Field(50 * 2**20, ge=0)
    full_walk_every: int = Field(20, ge=1)
    merge: tuple[str, ...] = ()
    """The snapshots a step's parallel calls each took on ``previous`` (a worker with
    ``--workspace-root``), in call order: their changes are applied to ``previous`` in that
    order, a path changed by several keeping the last call's; no workspace is read."""

    @property
    def patterns(self) -> tuple[str, ...]:
        return DEFAULT_IGNORE if self.ignore is None else self.ignore


class SnapshotResult(Frozen):
    """Output of ``snapshot_workspace``: the manifest's key and a few counts."""

    manifest: str | None
    """The key of the workspace's manifest after the step (the previous one when nothing
    changed; ``None`` only if nothing was ever recorded)."""
    created: bool = False
    """A new manifest was written (something changed)."""
    changed: int = 0
    """Paths added, changed or removed since the previous snapshot."""
    changed_bytes: int = 0
    """Bytes of the files added or changed."""
    files: int = 0
    """Files in the snapshot."""
    hashed: int = 0
    """Files read and hashed to take it (the rest were known by their size and times)."""
    excluded: int = 0
    overlaps: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    """A merge's paths changed by more than one call -> those calls' places in ``merge``."""
    paths: tuple[tuple[str, ...], ...] = ()
    """A merge's paths changed by each merged snapshot (on ``previous``), in ``merge`` order,
    at most ``MERGED_PATHS_KEPT`` each."""
    detail: str = ""
    """One line for the trace: what changed, what was left out and why."""
    unrecordable: tuple[str, ...] = ()
    """Paths this snapshot found and could not record (names not UTF-8), as shown to people."""


def paths_hint(outcomes: Sequence[tuple[str, bool, tuple[str, ...]]]) -> tuple[str, ...] | None:
    """The paths a snapshot may look at alone, from the step's calls as (tool, mutates,
    mutated paths): ``None`` (walk everything) when a call that may change files did not say
    which (a command, a tool of your own, a failed write)."""
    paths: set[str] = set()
    for _name, mutates, mutated in outcomes:
        if mutates and not mutated:
            return None
        paths.update(mutated)
    return tuple(sorted(paths))


def snapshot_call(
    summary: str, *, heartbeat_seconds: float, task_queue: str | None
) -> workflow.ActivityConfig:
    """Options of one ``snapshot_workspace`` call: on the run's tool queue (where the workspace
    is), heartbeating (a first snapshot of a large workspace reads all of it)."""
    options = workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=timedelta(minutes=30),
        heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_RETRY,
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=SNAPSHOT_MAX_ATTEMPTS,
        ),
    )
    if task_queue:
        options["task_queue"] = task_queue
    return options
