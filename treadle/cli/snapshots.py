"""`treadle workspace ID`: a run's workspace snapshots, any step checked out, two compared.

    treadle workspace ID                  # the snapshots: step, files changed, bytes
    treadle workspace ID --step N         # the files of the workspace after step N
    treadle workspace ID --into DIR       # check out the latest (or --step N's)
    treadle workspace ID --diff N M       # what changed from step N to step M

A check-out writes only what differs from what DIR already holds.

The run names its latest snapshot (the ``workspace`` query); the earlier ones are found in the
store, each manifest naming its parent. ``--manifest KEY`` starts from a key instead (a trace's
``WorkspaceSnapshot`` line, for a run no worker answers for any more). The store is the
workers': ``--store``, else ``TREADLE_STORE``, else ``store/`` in the data directory.
"""

from __future__ import annotations

import argparse
import json
import stat
from typing import Any

from temporalio.client import Client

from treadle.cli.tables import table
from treadle.client import AgentClient, SnapshotInfo, WorkspaceChange, WorkspaceFile
from treadle.client.workspaces import size
from treadle.connection import STORE_ENV

__all__ = ["diff_line", "register"]


def register(subparsers: Any) -> None:
    """Add ``workspace``; it sets ``handler`` (async (client, args) -> exit code)."""
    p = subparsers.add_parser(
        "workspace", help="a run's workspace snapshots: list, check out any step, compare two"
    )
    p.add_argument("workflow_id")
    p.add_argument(
        "--step", type=int, metavar="N", help="the workspace after step N (default: latest)"
    )
    p.add_argument(
        "--into",
        metavar="DIR",
        help="check the snapshot out into DIR: a new or empty directory, or an earlier "
        "check-out of the same run",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="check out into a directory that holds other files, removing those the "
        "snapshot does not have",
    )
    p.add_argument("--diff", type=int, nargs=2, metavar=("N", "M"), help="changes from N to M")
    p.add_argument("--manifest", metavar="KEY", help="start from this manifest, not the run's")
    p.add_argument(
        "--store",
        help=f"the workers' store (default: {STORE_ENV} or .treadle/store in TREADLE_HOME)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_workspace)


async def cmd_workspace(client: Client, args: argparse.Namespace) -> int:
    workspace = AgentClient(client, store=args.store).workspace
    run_id, manifest = args.workflow_id, args.manifest
    if args.diff:
        changes = await workspace.diff(run_id, args.diff[0], args.diff[1], manifest=manifest)
        lines = [diff_line(change) for change in changes]
        if args.json:
            print(json.dumps(lines))
        else:
            print("\n".join(lines) if lines else "no difference")
        return 0
    if args.into:
        done = await workspace.checkout(
            run_id, args.into, step=args.step, manifest=manifest, force=args.force
        )
        print(
            f"step {done.step} (manifest {done.manifest[:12]}) into {args.into}: "
            f"{len(done.written)} written ({size(done.written_bytes)}), "
            f"{len(done.removed)} removed, {done.unchanged} unchanged"
        )
        return 0
    if args.step is not None:
        files = await workspace.files(run_id, args.step, manifest=manifest)
        print(_files(files, args.json))
        return 0
    print(_listing(await workspace.snapshots(run_id, manifest=manifest), args.json))
    return 0


def _listing(snapshots: list[SnapshotInfo], as_json: bool) -> str:
    if as_json:
        return json.dumps(
            [
                {
                    "step": s.step,
                    "manifest": s.manifest,
                    "changed": s.changed,
                    "changed_bytes": s.changed_bytes,
                    "files": s.files,
                    "bytes": s.bytes,
                    "excluded": s.excluded,
                }
                for s in snapshots
            ],
            indent=2,
        )
    rows = [["STEP", "CHANGED", "BYTES", "FILES", "SIZE", "LEFT OUT", "MANIFEST"]]
    for s in snapshots:
        rows.append(
            [
                str(s.step),
                str(s.changed),
                size(s.changed_bytes),
                str(s.files),
                size(s.bytes),
                str(s.excluded_count),
                s.manifest[:12],
            ]
        )
    return table(rows)


def _files(files: list[WorkspaceFile], as_json: bool) -> str:
    if as_json:
        return json.dumps({f.path: {"key": f.key, "mode": f.mode, "size": f.size} for f in files})
    rows = [["MODE", "SIZE", "PATH"]]
    rows += [[_mode(f), str(f.size), f.path] for f in files]
    return table(rows)


def _mode(file: WorkspaceFile) -> str:
    return "link" if file.symlink else stat.filemode(stat.S_IFREG | file.mode)


def diff_line(change: WorkspaceChange) -> str:
    """``A path (size)``, ``M path (what changed)`` or ``D path``."""
    before, after = change.before, change.after
    if change.kind == "A" and after is not None:
        return f"A {change.path} ({size(after.size)})"
    if change.kind == "D" or before is None or after is None:
        return f"D {change.path}"
    what = []
    if before.key != after.key:
        what.append(f"{size(before.size)} -> {size(after.size)}")
    if before.mode != after.mode:
        what.append(f"mode {_mode(before)} -> {_mode(after)}")
    return f"M {change.path} ({', '.join(what)})"
