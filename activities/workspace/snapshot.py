"""The ``snapshot_workspace`` activity: the workspace after a step, as a manifest in the store.

Cost proportional to what changed: the worker keeps, per workspace, the blob key of every file
it hashed with the file's size, times, inode and mode (``scan.Index``, in the worker's memory);
a walk stats every file but reads and stores only those whose signature changed. Only the
paths the worker's inotify watcher saw change since its previous snapshot are looked at
(``watch``; after a command too), or, without a watcher to trust, those the step's tools said
they changed; a whole walk is taken every ``full_walk_every`` snapshots, whenever this worker
did not take the run's previous snapshot, and after a command that no watcher saw. The
snapshot's detail says which (``watched``, ``reported``, ``walked: why``). Content goes to the
store as it is (not redacted: a check-out must give back the same bytes), once per distinct
content; the manifest holds the rest (``manifest``).

A retried attempt writes the same blobs and the same manifest (same content, same key), so a
worker lost mid-snapshot costs nothing but the time. A store that is down fails the attempt;
Temporal retries it (``treadle.workflows.agent.messages.snapshots.snapshot_call``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio import activity

from treadle.activities.errors import StoreUnavailable
from treadle.activities.heartbeat import heartbeating
from treadle.activities.store.blobs import BlobCorrupt, BlobStore, key_of
from treadle.activities.workspace.manifest import (
    Entry,
    Manifest,
    Manifests,
    State,
    base_seq,
    changes_between,
    encode,
)
from treadle.activities.workspace.scan import (
    NOT_UTF8,
    Exclusions,
    Index,
    Rules,
    Seen,
    Signature,
    entry_of,
    look_at,
    read,
    shown,
    walk,
)
from treadle.activities.workspace.watch import Watcher, WatchUnavailable, say_once
from treadle.workflows.agent.messages.snapshots import (
    MERGED_PATHS_KEPT,
    SnapshotRequest,
    SnapshotResult,
)

if TYPE_CHECKING:  # follow imports this module
    from treadle.activities.workspace.follow import Follower

__all__ = ["Record", "Snapshotter", "TooMuchToRead", "WorkspaceActivities", "size"]

KEEP_WORKSPACES = 64
"""Workspaces whose index a worker keeps in memory; the one used longest ago is forgotten
(its next snapshot reads its files once more)."""

READ_AHEAD_BYTES = 8 * 2**20
"""Changed files read in the same hand-off to a thread as the look that found them, up to this
many bytes together: a step's few small files cost the event loop one hand-off, not one each
(a hand-off wakes the loop and a thread). Past it, files are read one at a time."""

HELD_BYTES = 8 * 2**20
"""New files' contents held to go to the store with the manifest, in one call, up to this many
bytes together; past it, what is held is written first. A snapshot holds at most this and
``READ_AHEAD_BYTES`` (the same bytes, once read) and one file more."""

HELD_FILES = 1000
"""Files held at most (small ones): past it, what is held is written first, so one call to the
store stays short (a thread's write cannot be cancelled halfway)."""

KEEP_WATCHERS = 32
"""Workspaces a worker watches at most, the ones used last (a watcher is an inotify instance:
``fs.inotify.max_user_instances``, 128 by default, is shared by every process of the user)."""


class TooMuchToRead(Exception):
    """A snapshot would read more than its caller allows (``Snapshotter.snapshot``)."""


@dataclass
class Record:
    """What this worker knows of one workspace between snapshots."""

    index: Index = field(default_factory=Index)
    last: str | None = None
    """The manifest this worker last wrote (or found unchanged) for the workspace."""
    since_walk: int = 0
    """Snapshots since the last whole walk."""
    rules: Rules | None = None
    exclusions: Exclusions = field(default_factory=Exclusions)
    """What the last whole walk left out (a snapshot of a few paths keeps reporting it)."""
    watcher: Watcher | None = None
    """Watching the workspace since a whole walk of it (``watch``), if it can."""
    unwatched: str = "none started"
    """Why there is no watcher."""
    pending: set[str] = field(default_factory=set)
    """Paths the watcher reported to a snapshot that did not complete (the store was down):
    looked at again by the next one."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class Counts:
    """What the last snapshot cost: for tests and the benchmark, never for the run."""

    stats: int = 0
    hashed: int = 0
    hashed_bytes: int = 0
    whole_walk: bool = False
    how: str = ""
    """How it looked (the detail's words): ``watched: …``, ``walked: why``, ``reported: …``."""


Content = tuple[bytes, str]
"""A file's bytes to store and their key (``key_of``, taken in the thread that read them)."""


@dataclass
class Held:
    """New files' contents not in the store yet. The index learns a file only once its blob
    is written: a file the index knows is never stored again."""

    index: Index
    looked_at_ns: int
    files: list[tuple[str, Signature, str, bytes]] = field(default_factory=list)
    size: int = 0

    def add(self, rel: str, signature: Signature, content: Content) -> None:
        data, key = content
        self.files.append((rel, signature, key, data))
        self.size += len(data)

    def full_with(self, data: bytes) -> bool:
        """Whether holding ``data`` too would pass ``HELD_BYTES`` or ``HELD_FILES``."""
        return bool(self.files) and (
            self.size + len(data) > HELD_BYTES or len(self.files) >= HELD_FILES
        )

    async def write(self, store: BlobStore, manifest: bytes | None = None) -> list[str]:
        """Write the held contents, then ``manifest`` when given, in one call to the store;
        the index learns the files; the keys written."""
        blobs = [data for _, _, _, data in self.files]
        keys = await store.put_many(blobs if manifest is None else [*blobs, manifest])
        if keys[: len(blobs)] != [key for _, _, key, _ in self.files]:
            # A store that changes bytes (a redacting one) cannot hold a workspace: a
            # check-out must give back the same bytes, under the keys the manifest names.
            raise BlobCorrupt(f"{store.describe()} stored a workspace's file under another key")
        for rel, signature, key, _ in self.files:
            self.index.remember(rel, signature, key, self.looked_at_ns)
        self.files, self.size = [], 0
        return keys


WITHHELD = "holds a secret"
"""The exclusion a file gets when it holds a secret of the worker (``Snapshotter.holds_secret``)."""


class Snapshotter:
    """Takes snapshots of the workspaces of one worker, into one store."""

    def __init__(
        self,
        store: BlobStore,
        clock: Callable[[], int] = time.time_ns,
        watching: Callable[[Path], Watcher] | None = Watcher,
        holds_secret: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.store = store
        self.holds_secret = holds_secret
        """Whether a file's bytes hold a secret of this worker: such a file is withheld (left
        out, named in the manifest, never stored), so no key reaches the store by a workspace."""
        self.clock = clock
        """Now in ns: whether a file was modified too recently to trust its times (a
        benchmark passes a clock that lets seconds pass between steps)."""
        self.watching = watching
        """Starts a workspace's watcher (``None``: never watch, walk after every command)."""
        self.manifests = Manifests(store)
        self.records: dict[str, Record] = {}
        self.last = Counts()

    async def snapshot(
        self, request: SnapshotRequest, *, max_read_bytes: int | None = None
    ) -> SnapshotResult:
        """The workspace's snapshot on ``request.previous``. ``TooMuchToRead`` before anything
        is read or recorded when it would read more than ``max_read_bytes`` of files."""
        root = Path(request.workspace)
        record = self._record(str(root.resolve()))
        if record.watcher is None or record.watcher.broken is not None:
            self._make_room(record)  # it may start one
        async with record.lock:  # one snapshot of a workspace at a time: its index, its watcher
            return await self._snapshot(request, root, record, max_read_bytes)

    def _make_room(self, record: Record) -> None:
        """Fewer than ``KEEP_WATCHERS`` other workspaces watched: those used longest ago stop."""
        watched = [r for r in self.records.values() if r.watcher is not None and r is not record]
        for oldest in watched[: max(0, len(watched) - KEEP_WATCHERS + 1)]:
            assert oldest.watcher is not None
            oldest.watcher.close()
            oldest.watcher = None
            oldest.unwatched = f"only the {KEEP_WATCHERS} workspaces used last are watched"

    async def _snapshot(
        self, request: SnapshotRequest, root: Path, record: Record, max_read_bytes: int | None
    ) -> SnapshotResult:
        rules = Rules(request.patterns, request.max_file_bytes)
        previous = request.previous
        before: State = await self.manifests.state(previous) if previous else {}
        why = _why_walk(request, record, rules)

        def look_and_read() -> tuple[Seen, set[str] | None, str, dict[str, Content | None]]:
            seen, covered, how = self._look(root, rules, record, request.paths, before, why)
            return seen, covered, how, _read_ahead(root, seen, max_read_bytes)

        # One hand-off to a thread for both: the look, then what it found changed.
        seen, covered, how, early = await asyncio.to_thread(look_and_read)
        reading = sum(signature[0] for signature in seen.to_hash.values())
        if max_read_bytes is not None and reading > max_read_bytes:
            # Nothing recorded yet: what the watcher reported stays pending for the next one.
            raise TooMuchToRead(f"{size(reading)} to read")
        whole = covered is None
        if covered is None:
            covered = set(before)
            record.exclusions, record.since_walk = seen.exclusions, 0
        else:
            record.since_walk += 1
        record.rules = rules
        after = {} if whole else {p: e for p, e in before.items() if p not in covered}
        after.update(seen.entries)
        kept = () if previous is None else (await self.manifests.get(previous)).withheld
        withheld = set() if whole else {p for p in kept if p not in covered}
        held = Held(record.index, seen.started_ns)
        hashed_bytes = await self._hash(root, seen, early, held, after, withheld)
        if not whole:  # a whole walk's exclusions already name them
            for rel in sorted(withheld - set(kept)):
                record.exclusions.add(WITHHELD, rel)
            for rel in seen.unrecordable:  # seen once, when made: said then
                record.exclusions.add(NOT_UTF8, rel)
        self.last = Counts(seen.stats, len(seen.to_hash), hashed_bytes, whole, how)
        read = len(seen.to_hash)

        def said(manifest: Manifest | None) -> str:
            if manifest is None:
                return f"unchanged · {how} · {record.exclusions.describe()}"
            return (
                f"{manifest.changed} changed ({size(manifest.changed_bytes)}), {manifest.files} "
                f"files ({size(manifest.total_bytes)}) · {read} read · {how} · "
                f"{record.exclusions.describe()}"
            )

        result = await self._result(
            request,
            before,
            after,
            record.exclusions,
            said,
            hashed=read,
            withheld=withheld,
            held=held,
        )
        record.last, record.pending = result.manifest, set()
        if seen.unrecordable:
            unrecordable = tuple(shown(rel) for rel in seen.unrecordable)
            result = result.model_copy(update={"unrecordable": unrecordable})
        return result

    async def merge(self, request: SnapshotRequest) -> SnapshotResult:
        """The snapshots a step's parallel calls each took on ``previous``, as one: their
        changes applied in call order (a path changed by several keeps the last call's)."""
        previous = request.previous
        before: State = await self.manifests.state(previous) if previous else {}
        after = dict(before)
        touched: dict[str, list[int]] = {}
        # What each path was left as by the calls that changed it: calls that left it the same
        # (sub-agents sharing one directory each see the other's write) do not overlap.
        left: dict[str, set[Entry | None]] = {}
        exclusions = Exclusions()
        withheld: set[str] = set()
        for n, key in enumerate(request.merge):
            for path, entry in changes_between(before, await self.manifests.state(key)).items():
                touched.setdefault(path, []).append(n)
                left.setdefault(path, set()).add(entry)
                if entry is None:
                    after.pop(path, None)
                else:
                    after[path] = entry
            last = await self.manifests.get(key)
            exclusions = Exclusions(dict(last.excluded), list(last.excluded_examples))
            withheld.update(last.withheld)
        overlaps = {
            p: tuple(calls)
            for p, calls in sorted(touched.items())
            if len(calls) > 1 and len(left[p]) > 1
        }
        paths = tuple(
            tuple(sorted(p for p, calls in touched.items() if n in calls)[:MERGED_PATHS_KEPT])
            for n in range(len(request.merge))
        )
        merged = f"{len(request.merge)} call{'s' if len(request.merge) > 1 else ''} merged"
        both = "; ".join(
            f"{p} by calls {', '.join(str(n + 1) for n in calls)}" for p, calls in overlaps.items()
        )
        also = f" · changed by more than one call, the last kept: {both}" if both else ""

        def said(manifest: Manifest | None) -> str:
            if manifest is None:
                return f"{merged}, unchanged{also}"
            return (
                f"{merged}, {manifest.changed} changed ({size(manifest.changed_bytes)}), "
                f"{manifest.files} files{also}"
            )

        withheld -= set(after)  # a later call's file of that name holds none
        return await self._result(
            request,
            before,
            after,
            exclusions,
            said,
            overlaps=overlaps,
            paths=paths,
            withheld=withheld,
        )

    async def _result(
        self,
        request: SnapshotRequest,
        before: State,
        after: State,
        exclusions: Exclusions,
        said: Callable[[Manifest | None], str],
        *,
        hashed: int = 0,
        overlaps: dict[str, tuple[int, ...]] | None = None,
        paths: tuple[tuple[str, ...], ...] = (),
        withheld: set[str] | None = None,
        held: Held | None = None,
    ) -> SnapshotResult:
        """The workspace ``after``: the previous snapshot again when nothing changed, else a
        new manifest in the store, written with the files' contents ``held``; ``said`` is the
        trace line's (of the new one, or ``None``)."""
        unchanged = SnapshotResult(
            manifest=request.previous,
            files=len(after),
            hashed=hashed,
            excluded=sum(exclusions.counts.values()),
            overlaps=overlaps or {},
            paths=paths,
            detail=f"step {request.step}: {said(None)}",
        )
        kept = tuple(sorted(withheld or ()))
        previous = request.previous
        if (
            previous is not None
            and after == before
            and kept == (await self.manifests.get(previous)).withheld
        ):
            if held is not None and held.files:  # read again, the same: stored as before
                await held.write(self.store)
            return unchanged
        key, manifest = await self._write(request, before, after, exclusions, kept, held)
        written = {"manifest": key, "created": True, "changed": manifest.changed}
        return unchanged.model_copy(
            update={
                **written,
                "changed_bytes": manifest.changed_bytes,
                "detail": f"step {request.step}: {said(manifest)}",
            }
        )

    def record_of(self, root: Path) -> Record:
        """What this worker knows of the workspace at ``root`` (its index, its last snapshot)."""
        return self._record(str(root.resolve()))

    def _record(self, workspace: str) -> Record:
        record = self.records.pop(workspace, None) or Record()
        self.records[workspace] = record  # the most recently used last
        while len(self.records) > KEEP_WORKSPACES:
            forgotten = self.records.pop(next(iter(self.records)))
            if forgotten.watcher is not None:
                forgotten.watcher.close()
        return record

    def close(self) -> None:
        """Stop watching every workspace (their next snapshots walk)."""
        for record in self.records.values():
            if record.watcher is not None:
                record.watcher.close()
                record.watcher = None

    def _look(
        self,
        root: Path,
        rules: Rules,
        record: Record,
        reported: tuple[str, ...] | None,
        before: State,
        why: str | None,
    ) -> tuple[Seen, set[str] | None, str]:
        """What to read (blocking: in a thread): the paths the watcher saw changing, else
        those the tools reported, else (``covered`` is ``None``) a whole walk, and how."""
        now = self.clock()
        watcher = record.watcher
        # Drained at every snapshot, so the kernel's queue holds one step's events at most.
        changes = watcher.drain() if watcher is not None else None
        if changes is not None:
            record.pending |= changes.paths
        if why is None and watcher is not None and changes is not None:
            if watcher.broken is None:
                paths = record.pending.union(reported or ())
                seen, covered = look_at(root, rules, record.index, paths, before, now, watcher.add)
                if seen.linked is None:
                    return seen, covered, f"watched: {_paths(len(paths))}"
                why = f"{seen.linked} has other hard links"
            else:
                why = f"watcher lost, {watcher.broken}"
        elif why is None and reported is not None:
            seen, covered = look_at(root, rules, record.index, reported, before, now)
            if seen.linked is None:
                return seen, covered, f"reported: {_paths(len(reported))}"
            why = f"{seen.linked} has other hard links"
        elif why is None:
            why = f"no watcher, {record.unwatched}"
        if watcher is None or watcher.broken is not None:
            if watcher is not None:
                say_once(watcher.broken or "")
                watcher.close()
            watcher = record.watcher = self._start(root.resolve(), record)
        seen = walk(root, rules, record.index, "", now, watcher.add if watcher else None)
        return seen, None, f"walked: {why}"

    def _start(self, root: Path, record: Record) -> Watcher | None:
        """A new watcher for the workspace, watching from the walk about to be made."""
        if self.watching is None:
            record.unwatched = "watching is off"
            return None
        try:
            return self.watching(root)
        except WatchUnavailable as exc:
            record.unwatched = str(exc)
            say_once(record.unwatched)
            return None

    async def _hash(
        self,
        root: Path,
        seen: Seen,
        early: dict[str, Content | None],
        held: Held,
        after: State,
        withheld: set[str],
    ) -> int:
        """Read every file whose signature changed (those not read ``early``) and hold its
        content for the store; their entries join ``after``, except those that hold a
        secret, which join ``withheld`` (and are read again next time: the index does not
        learn them)."""
        total = 0
        for rel, signature in seen.to_hash.items():
            if rel in early:
                content = early.pop(rel)
            else:
                content = await asyncio.to_thread(_read, root, rel, signature)
            if content is None:
                after.pop(rel, None)  # removed (or made unreadable) since the walk
                seen.exclusions.add("unreadable", rel)
                continue
            data, key = content
            if self.holds_secret is not None and self.holds_secret(data):
                after.pop(rel, None)
                withheld.add(rel)
                seen.exclusions.add(WITHHELD, rel)
                continue
            withheld.discard(rel)
            if held.full_with(data):
                await held.write(self.store)
            held.add(rel, signature, content)
            total += len(data)
            after[rel] = entry_of(key, signature)
        return total

    async def _write(
        self,
        request: SnapshotRequest,
        before: State,
        after: State,
        exclusions: Exclusions,
        withheld: tuple[str, ...] = (),
        held: Held | None = None,
    ) -> tuple[str, Manifest]:
        previous = request.previous
        seq = 0 if previous is None else (await self.manifests.get(previous)).seq + 1
        base = base_seq(seq)
        base_key = None
        base_state: State = {}
        if previous is not None and base is not None:
            base_key = await self.manifests.key_of_seq(previous, base)
            base_state = await self.manifests.state(base_key)
        since_parent = changes_between(before, after)
        manifest = Manifest(
            workflow_id=request.workflow_id,
            step=request.step,
            seq=seq,
            parent=previous,
            base=base_key,
            changes=dict(sorted(changes_between(base_state, after).items())),
            files=len(after),
            total_bytes=sum(e[2] for e in after.values()),
            changed=len(since_parent),
            changed_bytes=sum(e[2] for e in since_parent.values() if e is not None),
            excluded=dict(sorted(exclusions.counts.items())),
            excluded_examples=tuple(exclusions.examples),
            ignore=request.patterns,
            withheld=withheld,
        )
        if held is None:
            return await self.manifests.put(manifest, after), manifest
        key = (await held.write(self.store, encode(manifest)))[-1]
        return self.manifests.stored(key, manifest, after), manifest


def _why_walk(request: SnapshotRequest, record: Record, rules: Rules) -> str | None:
    """Why the whole workspace must be walked whatever changed (``None``: it need not)."""
    if request.previous is None:
        return "the first snapshot"
    if record.rules is None:
        return "this worker's first of it"
    if record.last != request.previous:
        return "this worker did not take the previous one"
    if record.rules != rules:
        return "the rules changed"
    if record.since_walk + 1 >= request.full_walk_every:
        return f"one in {request.full_walk_every}"
    return None


def _read_ahead(root: Path, seen: Seen, max_read_bytes: int | None) -> dict[str, Content | None]:
    """The contents of the files ``seen`` found changed, up to ``READ_AHEAD_BYTES`` together
    (``None``: unreadable); none when they come to more than ``max_read_bytes``."""
    early: dict[str, Content | None] = {}
    if max_read_bytes is not None and sum(s[0] for s in seen.to_hash.values()) > max_read_bytes:
        return early
    room = READ_AHEAD_BYTES
    for rel, signature in seen.to_hash.items():
        if signature[0] <= room:
            early[rel] = content = _read(root, rel, signature)
            room -= signature[0] if content is None else len(content[0])
    return early


def _read(root: Path, rel: str, signature: Signature) -> Content | None:
    """A file's content to store and its key, or ``None``: removed (or made unreadable) since
    the look."""
    try:
        data = read(root, rel, signature)
    except OSError:
        return None
    return data, key_of(data)


def _paths(n: int) -> str:
    return f"{n} path" if n == 1 else f"{n} paths"


def size(n: int) -> str:
    """Bytes for people: ``812 B``, ``12.4 KB``, ``3.1 MB``."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


class WorkspaceActivities:
    """The workspace activity; a class so the worker hands it the store (unredacted: a
    workspace's files must come back byte for byte)."""

    def __init__(
        self, store: BlobStore | None, holds_secret: Callable[[bytes], bool] | None = None
    ) -> None:
        self.snapshotter = (
            Snapshotter(store, holds_secret=holds_secret) if store is not None else None
        )
        self.follower: Follower | None = None
        """A worker with ``--workspace-root``: a following run's snapshot is of its copy."""

    @activity.defn(name="snapshot_workspace")
    async def snapshot_workspace(self, request: SnapshotRequest) -> SnapshotResult:
        """Record the workspace after a step as a manifest in the store."""
        if self.snapshotter is None:
            return SnapshotResult(
                manifest=request.previous,
                detail=f"step {request.step}: not taken, this worker has no store (--store)",
            )
        if request.merge:  # the step's parallel calls' snapshots: the store alone
            try:
                return await self.snapshotter.merge(request)
            except StoreUnavailable as exc:
                raise exc.to_application_error() from exc
        if self.follower is not None:  # a worker with --workspace-root: its copy of it
            try:
                async with heartbeating("snapshot", request.step):
                    return await self.follower.snapshot(request)
            except StoreUnavailable as exc:
                raise exc.to_application_error() from exc
        if not os.path.isdir(request.workspace):
            return SnapshotResult(
                manifest=request.previous,
                detail=f"step {request.step}: not taken, no workspace at {request.workspace}",
            )
        try:
            async with heartbeating("snapshot", request.step):
                result = await self.snapshotter.snapshot(request)
        except StoreUnavailable as exc:  # the workflow waits for the store, then takes it again
            raise exc.to_application_error() from exc
        activity.logger.info(
            "workspace.snapshot",
            extra={"step": request.step, "manifest": result.manifest, "hashed": result.hashed},
        )
        return result
