"""Durable workspaces: what a snapshot per step costs on a large workspace, what the store
holds after many steps, and how long a fresh machine takes to check the workspace out.

    python -m bench.workspace [--files 10000] [--mb 100] [--steps 1000] [--command-steps 100]

A workspace of ``--files`` files (``--mb`` in all, in 100 directories, random bytes, last
modified an hour ago) is snapshotted once, then one file is rewritten per step and the
workspace snapshotted after each, as the ``snapshot_workspace`` activity does (the same
code, in this process, into a directory store):

- with the paths the step's tools reported (write_file, edit_file), and a whole walk every
  ``full_walk_every`` (20) snapshots: the usual step;
- with no paths (a ``run_command`` step), the worker's inotify watcher naming what changed
  (a whole walk every ``full_walk_every`` snapshots all the same);
- with no paths and no watcher (another system, or a watcher not to be trusted): a stat walk
  of every file each time.

Printed: ms per snapshot (median, p95, max), the process's CPU ms per snapshot, files read
and paths stat'ed per snapshot, the bytes the activity's input and result add to history
(encoded by the workers' data converter), the store's bytes after the steps against the sum
of the changes, and the time to check the latest snapshot out into an empty directory (a
fresh worker: nothing cached) and over a copy one step old.
Nothing is asserted: the machine is shared; read the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter

from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Snapshotter, materialise
from treadle.activities.workspace.scan import Index, Rules, walk
from treadle.activities.workspace.snapshot import size
from treadle.workflows.agent.messages.snapshots import (
    DEFAULT_IGNORE,
    SnapshotRequest,
    SnapshotResult,
)

DIRECTORIES = 100
STEP_SECONDS = 5.0
"""Time between two steps on the snapshotter's clock (a model call comes between): a file
written just before a snapshot is racily clean then (``scan.RACY_SECONDS``), and read once
more by the next whole walk, as on a real run."""


class Clock:
    """The snapshotter's clock, moved on by ``STEP_SECONDS`` per step instead of sleeping."""

    def __init__(self) -> None:
        self.now = time.time_ns()

    def __call__(self) -> int:
        return self.now

    def step(self) -> int:
        """Move on one step; a time just before now (when the step's tool wrote)."""
        self.now += int(STEP_SECONDS * 1e9)
        return self.now - 50_000_000


def make_workspace(root: Path, files: int, total_bytes: int, seed: int = 1) -> list[str]:
    """``files`` files of random bytes, ``total_bytes`` in all, modified an hour ago."""
    rng = random.Random(seed)
    each = max(1, total_bytes // files)
    paths = []
    old = time.time() - 3600
    for i in range(files):
        rel = f"d{i % DIRECTORIES:02d}/f{i:05d}.bin"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(each))
        os.utime(path, (old, old))
        paths.append(rel)
    return paths


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def history_bytes(request: SnapshotRequest, result: SnapshotResult) -> int:
    """Bytes of the activity's input and result payloads, as the workers encode them."""
    converter = pydantic_data_converter.payload_converter
    return sum(p.ByteSize() for p in converter.to_payloads([request, result]))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


@dataclass
class Steps:
    """What ``count`` steps cost: ms, files read, paths stat'ed and history bytes per step."""

    last: str
    times: list[float] = field(default_factory=list)
    read: list[int] = field(default_factory=list)
    stats: list[int] = field(default_factory=list)
    history: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    """The process's CPU time per snapshot (its threads' too), in ms."""
    walks: int = 0
    changed: int = 0

    def line(self) -> str:
        times = self.times
        return (
            f"median {statistics.median(times):.1f} ms, p95 {pct(times, 0.95):.1f} ms, "
            f"max {max(times):.1f} ms; CPU median {statistics.median(self.cpu):.1f} ms, mean "
            f"{statistics.fmean(self.cpu):.1f} ms; "
            f"{self.walks} of {len(times)} walked the whole workspace; "
            f"files read per step: median {statistics.median(self.read):.0f}, max "
            f"{max(self.read)}; paths stat'ed per step: median "
            f"{statistics.median(self.stats):.0f}; history {statistics.median(self.history):.0f}"
            f" B per step (max {max(self.history)})"
        )


async def steps(
    snapshotter: Snapshotter,
    root: Path,
    paths: list[str],
    previous: str,
    count: int,
    *,
    reported: bool,
    rng: random.Random,
    start_step: int,
) -> Steps:
    """``count`` steps each rewriting one file."""
    done = Steps(previous)
    each = (root / paths[0]).stat().st_size
    clock = snapshotter.clock
    assert isinstance(clock, Clock)
    for step in range(start_step, start_step + count):
        rel = rng.choice(paths)
        (root / rel).write_bytes(rng.randbytes(each))
        written = clock.step()
        os.utime(root / rel, ns=(written, written))
        done.changed += each
        request = SnapshotRequest(
            workspace=str(root),
            workflow_id="bench",
            step=step,
            previous=previous,
            paths=(rel,) if reported else None,
        )
        began, cpu = time.perf_counter(), time.process_time()
        result = await snapshotter.snapshot(request)
        done.times.append((time.perf_counter() - began) * 1000)
        done.cpu.append((time.process_time() - cpu) * 1000)
        done.read.append(snapshotter.last.hashed)
        done.stats.append(snapshotter.last.stats)
        done.walks += snapshotter.last.whole_walk
        done.history.append(history_bytes(request, result))
        assert result.manifest is not None
        previous = done.last = result.manifest
    return done


async def main(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="treadle-bench-workspace-"))
    try:
        await run(scratch, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def run(scratch: Path, args: argparse.Namespace) -> None:
    root, store_root = scratch / "workspace", scratch / "store"
    print(f"workspace: {args.files} files, {args.mb} MB in {DIRECTORIES} directories")
    paths = make_workspace(root, args.files, args.mb * 1_000_000)
    store = FileBlobStore(store_root)
    snapshotter = Snapshotter(store, Clock())

    began = time.perf_counter()
    first = await snapshotter.snapshot(
        SnapshotRequest(workspace=str(root), workflow_id="bench", step=0)
    )
    print(
        f"first snapshot (every file read and stored): {time.perf_counter() - began:.2f} s, "
        f"{first.hashed} files read"
    )
    assert first.manifest is not None
    after_first = store_bytes(store_root)

    rules = Rules(DEFAULT_IGNORE, 50 * 2**20)
    index = snapshotter.records[str(root.resolve())].index
    walks = []
    for _ in range(5):
        began = time.perf_counter()
        seen = walk(root, rules, index)
        walks.append((time.perf_counter() - began) * 1000)
    print(
        f"stat walk alone, {seen.stats} entries, index warm: median "
        f"{statistics.median(walks):.1f} ms"
    )
    fresh = Index()
    began = time.perf_counter()
    walk(root, rules, fresh)
    print(f"stat walk alone, index cold: {(time.perf_counter() - began) * 1000:.1f} ms")

    rng = random.Random(2)
    reported = await steps(
        snapshotter, root, paths, first.manifest, args.steps, reported=True, rng=rng, start_step=1
    )
    print(
        f"{args.steps} steps {STEP_SECONDS:.0f} s apart, tools reported their paths (a whole "
        f"walk every 20th): {reported.line()}"
    )
    watcher = snapshotter.records[str(root.resolve())].watcher
    said = f"inotify, {len(watcher.watches)} directories watched" if watcher else "none"
    print(f"watcher: {said}")
    watched = await steps(
        snapshotter,
        root,
        paths,
        reported.last,
        args.command_steps,
        reported=False,
        rng=rng,
        start_step=1 + args.steps,
    )
    print(
        f"{args.command_steps} steps, no paths reported (run_command), the watcher naming "
        f"what changed (a whole walk every 20th): {watched.line()}"
    )
    snapshotter.close()
    snapshotter.watching = None  # a worker that cannot watch
    walked = await steps(
        snapshotter,
        root,
        paths,
        watched.last,
        args.command_steps,
        reported=False,
        rng=rng,
        start_step=1 + args.steps + args.command_steps,
    )
    print(
        f"{args.command_steps} steps, no paths reported and no watcher (a stat walk each): "
        f"{walked.line()}"
    )
    key = walked.last
    total_steps = args.steps + 2 * args.command_steps
    grown = store_bytes(store_root) - after_first
    changes = reported.changed + watched.changed + walked.changed
    blobs = total_steps * (changes // total_steps)
    print(
        f"store after {total_steps} steps: +{size(grown)} over the first snapshot's "
        f"{size(after_first)}; sum of the changes {size(changes)} (ratio {grown / changes:.3f}); "
        f"manifests ~{size(max(0, grown - blobs))} in all, "
        f"{max(0, grown - blobs) / total_steps:.0f} B per step"
    )

    cold = Snapshotter(FileBlobStore(store_root))  # a fresh worker: nothing cached
    target = scratch / "checkout"
    began = time.perf_counter()
    done = await materialise(cold.store, key, target)
    print(
        f"check-out of the latest snapshot into an empty directory (fresh process, cold "
        f"cache): {time.perf_counter() - began:.2f} s, {len(done.written)} files, "
        f"{size(done.written_bytes)}"
    )
    rel = rng.choice(paths)
    (root / rel).write_bytes(rng.randbytes((root / rel).stat().st_size))
    newer = await snapshotter.snapshot(
        SnapshotRequest(
            workspace=str(root),
            workflow_id="bench",
            step=total_steps + 1,
            previous=key,
            paths=(rel,),
        )
    )
    assert newer.manifest is not None
    began = time.perf_counter()
    done = await materialise(FileBlobStore(store_root), newer.manifest, target)
    print(
        f"check-out over a copy one step old: {time.perf_counter() - began:.2f} s, "
        f"{len(done.written)} written, {done.unchanged} unchanged (each compared by size "
        "and hash)"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--command-steps", type=int, default=100)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
