"""`treadle workspace ID`: a run's workspace snapshots, any step checked out, two compared.

    treadle workspace ID                  # the snapshots: step, files changed, bytes
    treadle workspace ID --step N         # the files of the workspace after step N
    treadle workspace ID --into DIR       # check out the latest (or --step N's)
    treadle workspace ID --diff N M       # what changed from step N to step M

A check-out writes only what differs from what DIR already holds.

The run names its latest snapshot (the ``workspace`` query); the earlier ones are found in the
store, each manifest naming its parent. ``--manifest KEY`` starts from a key instead (a trace's
``WorkspaceSnapshot`` line, for a run no worker answers for any more). The store is the
workers': ``--store``, else ``TREADLE_STORE``, else ``.temporal/store``.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities.store.blobs import BlobMissing, BlobStore
from treadle.activities.workspace import Manifest, ManifestError, Manifests, materialise
from treadle.activities.workspace.manifest import SYMLINK, Entry, State
from treadle.activities.workspace.snapshot import size
from treadle.cli.exits import UsageError
from treadle.cli.tables import table
from treadle.connection import STORE_ENV
from treadle.home import default_store
from treadle.stores import StoreSettingsError, open_blob_store, parse_store
from treadle.workflows.agent.messages.snapshots import WorkspaceHead
from treadle.workflows.agent.workflow import AgentWorkflow

__all__ = ["check_out_imported", "diff_lines", "register"]


def register(subparsers: Any) -> None:
    """Add ``workspace``; it sets ``handler`` (async (client, args) -> exit code)."""
    p = subparsers.add_parser(
        "workspace", help="a run's workspace snapshots: list, check out any step, compare two"
    )
    p.add_argument("workflow_id")
    p.add_argument(
        "--step", type=int, metavar="N", help="the workspace after step N (default: latest)"
    )
    p.add_argument("--into", metavar="DIR", help="check the snapshot out into DIR")
    p.add_argument("--diff", type=int, nargs=2, metavar=("N", "M"), help="changes from N to M")
    p.add_argument("--manifest", metavar="KEY", help="start from this manifest, not the run's")
    p.add_argument("--store", help=f"the workers' store (default: {STORE_ENV} or .temporal/store)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_workspace)


async def cmd_workspace(client: Client, args: argparse.Namespace) -> int:
    store = _store(args.store)
    head = args.manifest or await _head(client, args.workflow_id)
    manifests = Manifests(store)
    try:
        if args.diff:
            old, _ = await _at(manifests, head, args.diff[0])
            new, _ = await _at(manifests, head, args.diff[1])
            lines = diff_lines(await manifests.state(old), await manifests.state(new))
            if args.json:
                print(json.dumps(lines))
            else:
                print("\n".join(lines) if lines else "no difference")
            return 0
        if args.into:
            key, manifest = (
                await _at(manifests, head, args.step)
                if args.step is not None
                else (head, await manifests.get(head))
            )
            done = await materialise(store, key, Path(args.into).expanduser())
            print(
                f"step {manifest.step} (manifest {key[:12]}) into {args.into}: "
                f"{len(done.written)} written ({size(done.written_bytes)}), "
                f"{len(done.removed)} removed, {done.unchanged} unchanged"
            )
            return 0
        if args.step is not None:
            key, manifest = await _at(manifests, head, args.step)
            print(_files(await manifests.state(key), args.json))
            return 0
        chain = await manifests.chain(head)
    except (BlobMissing, ManifestError) as exc:
        raise UsageError(f"run {args.workflow_id!r}: {exc}") from exc
    print(_listing(chain, args.json))
    return 0


async def check_out_imported(thread_id: str, key: str, into: Path) -> str:
    """An imported thread's workspace snapshot, checked out into its ``--workspace`` when that
    is empty (a directory with files of its own is left alone); one line saying which."""
    if into.is_dir() and any(into.iterdir()):
        return (
            f"workspace: {into} is not empty, left as it is; the thread's snapshot: "
            f"treadle workspace {thread_id} --into DIR"
        )
    try:
        done = await materialise(_store(None), key, into)
    except (BlobMissing, ManifestError) as exc:
        raise UsageError(f"the thread's workspace snapshot is not in the store: {exc}") from exc
    return (
        f"workspace: {len(done.written)} files ({size(done.written_bytes)}) from the thread's "
        f"snapshot {key[:12]} into {into}"
    )


def _store(where: str | None) -> BlobStore:
    try:
        store = open_blob_store(
            parse_store(where or os.environ.get(STORE_ENV) or str(default_store())), os.environ
        )
    except StoreSettingsError as exc:
        raise UsageError(str(exc)) from exc
    if store is None:
        raise UsageError("no store (--store none): snapshots live in the workers' store")
    return store


async def _head(client: Client, workflow_id: str) -> str:
    handle = client.get_workflow_handle(workflow_id)
    try:
        head: WorkspaceHead = await handle.query(AgentWorkflow.workspace)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise UsageError(f"no run with id {workflow_id!r}") from exc
        raise UsageError(
            f"run {workflow_id!r} did not answer ({exc.message}); is a worker running? "
            "--manifest KEY (from its trace) reads the store without it"
        ) from exc
    if head.manifest is None:
        raise UsageError(
            f"run {workflow_id!r} has no workspace snapshot (its config's snapshots.enabled, "
            "or no step changed files yet)"
        )
    return head.manifest


async def _at(manifests: Manifests, head: str, step: int) -> tuple[str, Manifest]:
    """The snapshot of the workspace as it was after ``step``: the latest taken at or before
    it, found walking back from ``head`` by ``parent`` (no further than that)."""
    at: str | None = head
    first = step
    while at is not None:
        manifest = await manifests.get(at)
        if manifest.step <= step:
            return at, manifest
        first, at = manifest.step, manifest.parent
    raise UsageError(f"no snapshot at or before step {step} (the first is after step {first})")


def _listing(chain: list[tuple[str, Manifest]], as_json: bool) -> str:
    if as_json:
        return json.dumps(
            [
                {
                    "step": m.step,
                    "manifest": key,
                    "changed": m.changed,
                    "changed_bytes": m.changed_bytes,
                    "files": m.files,
                    "bytes": m.total_bytes,
                    "excluded": dict(m.excluded),
                }
                for key, m in reversed(chain)
            ],
            indent=2,
        )
    rows = [["STEP", "CHANGED", "BYTES", "FILES", "SIZE", "LEFT OUT", "MANIFEST"]]
    for key, m in reversed(chain):
        rows.append(
            [
                str(m.step),
                str(m.changed),
                size(m.changed_bytes),
                str(m.files),
                size(m.total_bytes),
                str(m.excluded_count),
                key[:12],
            ]
        )
    return table(rows)


def _files(state: State, as_json: bool) -> str:
    if as_json:
        return json.dumps({p: {"key": k, "mode": m, "size": s} for p, (k, m, s) in state.items()})
    rows = [["MODE", "SIZE", "PATH"]]
    rows += [[_mode(e), str(e[2]), path] for path, e in sorted(state.items())]
    return table(rows)


def _mode(entry: Entry) -> str:
    return "link" if entry[1] == SYMLINK else stat.filemode(stat.S_IFREG | entry[1])


def diff_lines(old: State, new: State) -> list[str]:
    """``A path``, ``M path``, ``D path`` lines from ``old`` to ``new``, by path."""
    lines = []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path), new.get(path)
        if before == after:
            continue
        if before is None and after is not None:
            lines.append(f"A {path} ({size(after[2])})")
        elif after is None:
            lines.append(f"D {path}")
        elif before is not None:
            what = []
            if before[0] != after[0]:
                what.append(f"{size(before[2])} -> {size(after[2])}")
            if before[1] != after[1]:
                what.append(f"mode {_mode(before)} -> {_mode(after)}")
            lines.append(f"M {path} ({', '.join(what)})")
    return lines
