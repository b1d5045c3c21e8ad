"""A snapshot after a command costs what the command changed: the worker's inotify watcher
names the paths it touched, and only those are looked at. The watched snapshot equals a whole
walk's; a watcher that overflowed, could not watch a directory, or cannot exist here gives way
to the walk, and the snapshot's detail (and the worker's log) says which was taken and why.
Real processes change a real directory; costs are counted by the snapshotter, never timed."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.harness import Harness
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests, Snapshotter, watch
from treadle.activities.workspace import snapshot as snapshot_module
from treadle.activities.workspace.follow import Follower
from treadle.activities.workspace.watch import Watcher, WatchUnavailable
from treadle.workflows.agent.messages.models import RunStatus, ToolResult
from treadle.workflows.agent.messages.snapshots import (
    SnapshotRequest,
    SnapshotResult,
    WorkspaceSync,
)
from treadle.workflows.agent.workflow import AgentWorkflow

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")

FILES = 5000


def make(root: Path, files: int = FILES) -> list[str]:
    """``files`` small files in 50 directories."""
    paths = []
    for i in range(files):
        rel = f"d{i % 50:02d}/f{i:05d}.txt"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {i}\n")
        paths.append(rel)
    return paths


def command(root: Path, script: str) -> None:
    """A command in its own process, as ``run_command`` runs one; it has exited on return."""
    subprocess.run(["sh", "-c", script], cwd=root, check=True)


class Steps:
    """Snapshots of one workspace after each step, as the activity takes them after a command
    (no paths reported)."""

    def __init__(self, snapshotter: Snapshotter, root: Path) -> None:
        self.snapshotter, self.root = snapshotter, root
        self.previous: str | None = None
        self.step = 0

    async def take(self, **request: object) -> SnapshotResult:
        result = await self.snapshotter.snapshot(
            SnapshotRequest.model_validate(
                {
                    "workspace": str(self.root),
                    "workflow_id": "w",
                    "step": self.step,
                    "previous": self.previous,
                    "full_walk_every": 1000,
                    **request,
                }
            )
        )
        self.previous, self.step = result.manifest, self.step + 1
        return result


async def walked(store: FileBlobStore, root: Path) -> dict[str, tuple[str, int, int]]:
    """The workspace as a whole walk by a worker that never saw it records it."""
    fresh = Snapshotter(store, watching=None)
    result = await fresh.snapshot(SnapshotRequest(workspace=str(root), workflow_id="x", step=0))
    assert result.manifest is not None and fresh.last.whole_walk
    return await Manifests(store).state(result.manifest)


async def state(store: FileBlobStore, key: str | None) -> dict[str, tuple[str, int, int]]:
    assert key is not None
    return await Manifests(store).state(key)


async def test_a_command_s_changes_are_watched_and_equal_a_walk(
    tmp_path: Path, own_store: FileBlobStore
) -> None:
    """After the first snapshot (walked, watching from then on), a command that rewrites,
    creates, deletes, renames, changes a mode, links, and makes a nested directory with files
    is snapshotted by looking at what it touched alone: a few dozen stats in a workspace of
    thousands, the files it wrote read, and the same manifest a whole walk gives."""
    root = tmp_path / "ws"
    paths = make(root)
    steps = Steps(Snapshotter(own_store), root)
    first = await steps.take()
    assert "walked: the first snapshot" in first.detail
    command(
        root,
        f"echo more >> {paths[1]}; echo new > new.txt; rm {paths[2]}; mv {paths[3]} d03/moved.txt;"
        f" chmod 700 {paths[4]}; mkdir -p deep/er/est; echo a > deep/a.txt;"
        " echo b > deep/er/est/b.txt; ln -s d05 link; ln -s missing dangling",
    )
    second = await steps.take()
    last = steps.snapshotter.last
    assert not last.whole_walk and last.how.startswith("watched:")
    assert "watched:" in second.detail
    assert last.stats <= 20, last  # O(changed): the paths, their directories, the new tree
    assert last.hashed == 8  # appended, new, moved, chmod'ed, deep/a, deep/er/est/b, 2 links
    assert second.changed == 10 and second.files == FILES + 4
    assert await state(own_store, second.manifest) == await walked(own_store, root)


async def test_directories_moved_and_removed_stay_watched(
    tmp_path: Path, own_store: FileBlobStore
) -> None:
    """A directory renamed, written into under its new name, renamed back, and another removed
    with its files: each step's watched snapshot equals a walk, and the renamed directory is
    still watched afterwards (a later write in it is seen)."""
    root = tmp_path / "ws"
    make(root, 500)
    steps = Steps(Snapshotter(own_store), root)
    await steps.take()
    for script in (
        "mv d01 renamed && echo in > renamed/new.txt && mkdir renamed/sub",
        "echo deeper > renamed/sub/x.txt && mv renamed d01",
        "rm -r d02 && echo later > d01/sub/y.txt",
        "echo again >> d01/sub/x.txt && mkdir d02 && echo back > d02/z.txt",
    ):
        command(root, script)
        result = await steps.take()
        assert "watched:" in result.detail, (script, result.detail)
        assert await state(own_store, result.manifest) == await walked(own_store, root), script


async def test_an_overflowed_queue_falls_back_to_a_walk(
    tmp_path: Path, own_store: FileBlobStore
) -> None:
    """More events than the kernel queues (``fs.inotify.max_queued_events``) between two
    snapshots: the watcher is not trusted, the snapshot walks (and says why), and a new
    watcher serves the one after."""
    root = tmp_path / "ws"
    make(root, 200)
    steps = Steps(Snapshotter(own_store), root)
    await steps.take()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    a, b = root / "d00/f00000.txt", root / "d01/f00001.txt"
    for n in range(limit // 2 + 10):  # alternating: identical events next to each other merge
        os.utime(a, ns=(n, n))
        os.utime(b, ns=(n, n))
    (root / "after.txt").write_text("x")
    overflowed = await steps.take()
    assert steps.snapshotter.last.whole_walk
    assert "walked: watcher lost, its event queue overflowed" in overflowed.detail
    assert await state(own_store, overflowed.manifest) == await walked(own_store, root)
    command(root, "echo y > after.txt")
    assert "watched: 1 path" in (await steps.take()).detail


class Unwatchable(Watcher):
    """A watcher that can watch ``allowed`` directories, then hits the watch limit."""

    allowed = 10**9

    def _add_watch(self, path: bytes) -> int:
        if len(self.watches) >= self.allowed:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super()._add_watch(path)


async def test_a_directory_that_cannot_be_watched_falls_back_to_a_walk(
    tmp_path: Path, own_store: FileBlobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The watch limit is reached for a directory a command made: that snapshot still reads
    it (it walks what is new), the next one walks the whole workspace and names the limit,
    and the worker's log says it once."""
    root = tmp_path / "ws"
    make(root, 100)

    class Limited(Unwatchable):
        allowed = 51  # the root and its 50 directories

    steps = Steps(Snapshotter(own_store, watching=Limited), root)
    await steps.take()
    command(root, "mkdir fresh && echo 1 > fresh/one.txt")
    made = await steps.take()
    assert "watched:" in made.detail
    assert await state(own_store, made.manifest) == await walked(own_store, root)
    command(root, "echo 2 > fresh/two.txt")
    with caplog.at_level(logging.WARNING, logger="treadle.activities.workspace.watch"):
        lost = await steps.take()
        await steps.take()
    assert "walked: watcher lost, cannot watch fresh" in lost.detail
    assert "max_user_watches" in lost.detail
    assert await state(own_store, lost.manifest) == await walked(own_store, root)
    said = [r.getMessage() for r in caplog.records if "workspace.watch.unavailable" in r.msg]
    assert len(said) == 1 and "max_user_watches" in said[0]


async def test_without_a_watcher_every_command_is_walked(
    tmp_path: Path, own_store: FileBlobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Where no watcher can be set up (another system, the instance limit), snapshots after
    commands walk as before, say so in their detail, and the log says why once."""

    def nowhere(root: Path) -> Watcher:
        raise WatchUnavailable("inotify is Linux's; this is testos")

    root = tmp_path / "ws"
    make(root, 100)
    steps = Steps(Snapshotter(own_store, watching=nowhere), root)
    with caplog.at_level(logging.WARNING, logger="treadle.activities.workspace.watch"):
        await steps.take()
        for n in range(3):
            command(root, f"echo {n} > n.txt")
            result = await steps.take()
            assert "walked: no watcher, inotify is Linux's; this is testos" in result.detail
            assert steps.snapshotter.last.whole_walk
    said = [r for r in caplog.records if "this is testos" in r.getMessage()]
    assert len(said) == 1


async def test_only_this_worker_s_previous_snapshot_is_watched_from(
    tmp_path: Path, own_store: FileBlobStore
) -> None:
    """A snapshot whose previous one this worker did not take walks (its watcher cannot vouch
    for what happened in between), and so does one in ``full_walk_every``."""
    root = tmp_path / "ws"
    make(root, 100)
    steps = Steps(Snapshotter(own_store), root)
    await steps.take()
    command(root, "echo 0 > zero.txt")
    other = await Snapshotter(own_store, watching=None).snapshot(
        SnapshotRequest(workspace=str(root), workflow_id="w", step=5, previous=steps.previous)
    )
    assert other.created
    command(root, "echo 1 > one.txt")
    elsewhere = await steps.take(previous=other.manifest)
    assert "walked: this worker did not take the previous one" in elsewhere.detail
    for n in (2, 3):
        command(root, f"echo {n} > {n}.txt")
        assert "watched:" in (await steps.take(full_walk_every=3)).detail
    command(root, "echo 4 > 4.txt")
    assert "walked: one in 3" in (await steps.take(full_walk_every=3)).detail


async def test_a_hard_linked_file_is_walked_for(tmp_path: Path, own_store: FileBlobStore) -> None:
    """A write through one name of a file with other hard links changes the others too, which
    inotify reports under the name written alone: the snapshot walks."""
    root = tmp_path / "ws"
    make(root, 100)
    steps = Steps(Snapshotter(own_store), root)
    await steps.take()
    command(root, "ln d00/f00000.txt d01/linked.txt")
    await steps.take()
    command(root, "echo changed > d01/linked.txt")
    result = await steps.take()
    assert "has other hard links" in result.detail and steps.snapshotter.last.whole_walk
    assert await state(own_store, result.manifest) == await walked(own_store, root)


async def test_the_rooted_worker_watches_its_copy(tmp_path: Path, own_store: FileBlobStore) -> None:
    """A worker with ``--workspace-root`` snapshots its copy after each command the same way:
    the first after it brought the copy is walked, the next ones watched, on the worker that
    started the run and on one that restored it from the store."""
    snapshotter = Snapshotter(own_store)
    follower = Follower(tmp_path / "root", snapshotter)

    def running(script: str) -> Callable[[Path], Awaitable[ToolResult]]:
        async def execute(workspace: Path) -> ToolResult:
            workspace.mkdir(parents=True, exist_ok=True)
            command(workspace, script)
            return ToolResult(success=True, output="ok")

        return execute

    done = await follower.run("wf", "run_command", WorkspaceSync(step=1), running("echo 1 > a"))
    assert snapshotter.last.how == "walked: the first snapshot"
    for step, script in enumerate(("mkdir -p b/c && echo 2 > b/c/d", "rm a && mv b e"), 2):
        sync = WorkspaceSync(manifest=done.snapshot, step=step)
        done = await follower.run("wf", "run_command", sync, running(script))
        assert snapshotter.last.how.startswith("watched:"), snapshotter.last
    directory = follower.directory("wf")
    assert await state(own_store, done.snapshot) == await walked(own_store, directory)
    assert sorted(await state(own_store, done.snapshot)) == ["e/c/d"]
    # Another worker restores the copy, walks it once after its first call, then watches.
    other = Snapshotter(own_store)
    elsewhere = Follower(tmp_path / "other", other)
    for step, script in enumerate(("echo 3 > f", "echo 4 >> e/c/d"), 4):
        sync = WorkspaceSync(manifest=done.snapshot, step=step)
        done = await elsewhere.run("wf", "run_command", sync, running(script))
    assert other.last.how.startswith("watched:")
    directory = elsewhere.directory("wf")
    assert await state(own_store, done.snapshot) == await walked(own_store, directory)


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(
            (
                *("write", "append", "remove", "rename", "chmod", "symlink", "ignored"),
                *("mkdir", "move_dir", "remove_dir", "dir_to_file"),
            )
        ),
        st.integers(0, 7),
        st.integers(0, 7),
    ),
    min_size=1,
    max_size=12,
)


def apply(root: Path, op: str, a: int, b: int) -> None:
    """One file operation on names drawn from a small set (so they collide)."""
    dirs = ["", "x", "x/y", "z", "x/y/w", "q", "z/x", "node_modules"]
    files = [f"{dirs[a]}/f{b}".lstrip("/"), f"{dirs[b]}/g{a}".lstrip("/")]
    target = root / files[0]
    try:
        if op in ("write", "append", "ignored"):
            if op == "ignored":
                target = root / "node_modules" / f"m{a}" / f"f{b}"
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a" if op == "append" else "w") as f:
                f.write(f"{op}{a}{b}\n")
        elif op == "remove":
            target.unlink()
        elif op == "rename":
            (root / files[1]).parent.mkdir(parents=True, exist_ok=True)
            target.rename(root / files[1])
        elif op == "mkdir":
            (root / dirs[a] / f"new{b}" / "in").mkdir(parents=True, exist_ok=True)
            (root / dirs[a] / f"new{b}" / "in" / "file").write_text("n")
        elif op == "move_dir":
            source, dest = root / dirs[a], root / dirs[b] / f"moved{a}"
            if dirs[a] and not dest.resolve().is_relative_to(source.resolve()):
                dest.parent.mkdir(parents=True, exist_ok=True)
                source.rename(dest)
        elif op == "remove_dir":
            if dirs[a]:
                shutil.rmtree(root / dirs[a])
        elif op == "chmod":
            target.chmod(0o700 if b % 2 else 0o644)
        elif op == "symlink":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(dirs[b] or "elsewhere")
        elif op == "dir_to_file" and dirs[a]:
            shutil.rmtree(root / dirs[a])
            (root / dirs[a]).write_text("was a directory")
    except OSError:
        pass  # a name that does not exist (or is in the way): nothing changed


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(OPERATIONS, min_size=1, max_size=4))
def test_watched_snapshots_equal_walked_ones(
    tmp_path_factory: pytest.TempPathFactory, steps: list[list[tuple[str, int, int]]]
) -> None:
    """Any sequence of steps of file operations (creating, rewriting, removing, renaming
    files and directories, modes, links, ignored directories, a directory made a file): each
    step's watched snapshot is the snapshot a whole walk takes."""
    tmp = tmp_path_factory.mktemp("ops")
    root = tmp / "ws"
    make(root, 20)
    store = FileBlobStore(tmp / "store")

    async def check() -> None:
        snapshotter = Snapshotter(store)
        taken = Steps(snapshotter, root)
        await taken.take()
        try:
            for operations in steps:
                for op, a, b in operations:
                    apply(root, op, a, b)
                result = await taken.take()
                assert not snapshotter.last.whole_walk, result.detail
                assert await state(store, result.manifest) == await walked(store, root)
        finally:
            snapshotter.close()

    asyncio.run(check())


def test_a_dropped_watcher_is_closed_off_the_thread_that_collected_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing an inotify descriptor waits for the kernel (seconds on a loaded machine), and the
    garbage collector runs a watcher's finalizer in whatever thread it happens to run: in a
    worker, a workflow's, where the SDK's deadlock detector fires after 2 s (a replay failed so
    beside CPU burners). The descriptor is closed on the closer's own thread instead."""
    closed: dict[int, str] = {}
    done = threading.Event()

    def recording_close(fd: int) -> None:
        closed[fd] = threading.current_thread().name
        os.close(fd)
        done.set()

    monkeypatch.setattr(watch, "_close_fd", recording_close)
    try:
        watcher = Watcher(tmp_path)
    except WatchUnavailable as exc:
        pytest.skip(f"no inotify here: {exc}")
    fd = watcher.fd
    assert fd is not None
    watcher.cycle = watcher  # type: ignore[attr-defined]  # a cycle: only the collector ends it

    def workflow_thread() -> None:
        nonlocal watcher
        del watcher
        gc.collect()

    collector = threading.Thread(target=workflow_thread, name="a-workflow-thread")
    collector.start()
    collector.join()
    assert done.wait(60), "the descriptor was never closed"  # a watchdog, not a duration
    assert closed == {fd: "treadle-inotify-closer"}


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_a_run_s_command_steps_are_watched(
    harness: Harness, store: FileBlobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A run with snapshots on (its worker has no root: each call snapshots the run's own
    workspace): the first snapshot walks, those after its commands are watched, the worker's
    log says which, and the last one holds the workspace as a walk finds it."""
    caplog.set_level(logging.INFO, logger="temporalio.activity")
    model = harness.script(
        call("write_file", path="a.txt", content="one"),
        call("run_command", command="mkdir -p src/deep"),
        call("run_command", command="mv a.txt src/deep/b.txt"),
        call("run_command", command="touch c.txt"),
        {"content": "done"},
    )
    handle = await harness.start(
        model,
        snapshots={"enabled": True},
        allow_run_command=True,
        command_allowlist=["mkdir", "mv", "touch"],
    )
    assert (await handle.result()).status is RunStatus.DONE
    trace = await handle.query(AgentWorkflow.trace)
    lines = [e.data for e in trace.entries if e.event == "WorkspaceSnapshot"]
    assert len(lines) == 4 and all("taken by its calls" in line for line in lines), lines
    said = [
        r.__dict__["detail"]
        for r in caplog.records
        if r.getMessage().startswith("workspace.snapshot (")
    ]
    assert len(said) == 4, said
    assert "walked: the first snapshot" in said[0]
    assert all("watched:" in line for line in said[1:]), said
    head = await handle.query(AgentWorkflow.workspace)
    assert await state(store, head.manifest) == await walked(store, harness.workspace)
    assert sorted(await state(store, head.manifest)) == ["c.txt", "src/deep/b.txt"]


async def test_a_worker_watches_the_workspaces_used_last(
    tmp_path: Path, own_store: FileBlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker keeps a bounded number of watchers (each is an inotify instance, a per-user
    limit): the workspace used longest ago stops being watched, and says so when it walks."""
    monkeypatch.setattr(snapshot_module, "KEEP_WATCHERS", 2)
    snapshotter = Snapshotter(own_store)
    runs = []
    for n in range(3):
        root = tmp_path / f"ws{n}"
        make(root, 10)
        runs.append(Steps(snapshotter, root))
        await runs[-1].take()
    assert sum(r.watcher is not None for r in snapshotter.records.values()) == 2
    for n, expected in ((2, "watched:"), (0, "walked: no watcher, only the 2 workspaces used")):
        command(runs[n].root, "echo x > x.txt")
        assert expected in (await runs[n].take()).detail
