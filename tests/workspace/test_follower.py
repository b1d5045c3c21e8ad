"""The tool side of ``--workspace-root``, driven directly: a call runs in the copy brought to
the snapshot it names (an attempt that died half-way is undone first), the snapshot after it
is returned, a worker that ran the previous call writes nothing to catch up, and a worker
without a store is refused a root."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.support.processes import clean_env, refusal, run_cli
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests, Snapshotter
from treadle.activities.workspace.follow import Follower, directory_name
from treadle.cli.worker import build_worker
from treadle.workflows.agent.messages.models import ToolResult
from treadle.workflows.agent.messages.snapshots import WorkspaceSync


def files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


async def test_a_call_runs_in_the_snapshot_it_names(
    own_store: FileBlobStore, tmp_path: Path
) -> None:
    """Call 1 writes ``a.txt`` (snapshot S1). An attempt of call 2 leaves ``junk.txt`` and
    changes ``a.txt``, then dies; the next attempt finds the copy as S1 left it, and its
    snapshot S2 holds its own write alone. A worker that never saw the run rebuilds S2."""
    follower = Follower(tmp_path / "root", Snapshotter(own_store))
    seen: list[dict[str, str]] = []

    def writing(
        path: str, text: str, *, die: bool = False
    ) -> Callable[[Path], Awaitable[ToolResult]]:
        async def execute(workspace: Path) -> ToolResult:
            seen.append(files(workspace))
            (workspace / path).write_text(text)
            if die:
                (workspace / "junk.txt").write_text("half")
                (workspace / "a.txt").write_text("spoilt")
                raise RuntimeError("the worker died")
            return ToolResult(success=True, output="ok", mutated_paths=(path,))

        return execute

    first = await follower.run("wf-1", "write_file", WorkspaceSync(step=1), writing("a.txt", "1"))
    assert first.snapshot is not None
    with pytest.raises(RuntimeError):
        await follower.run(
            "wf-1", "run_command", WorkspaceSync(manifest=first.snapshot, step=2),
            writing("b.txt", "2", die=True),
        )  # fmt: skip
    second = await follower.run(
        "wf-1", "run_command", WorkspaceSync(manifest=first.snapshot, step=2), writing("b.txt", "2")
    )
    assert seen == [{}, {"a.txt": "1"}, {"a.txt": "1"}]
    assert follower.last_checkout is not None
    assert sorted(follower.last_checkout.removed) == ["b.txt", "junk.txt"]
    assert follower.last_checkout.written == ["a.txt"]
    assert second.snapshot is not None
    state = await Manifests(own_store).state(second.snapshot)
    assert {p: (await own_store.get(e[0])).decode() for p, e in state.items()} == {
        "a.txt": "1",
        "b.txt": "2",
    }

    # The same worker, next call: nothing to write. Another worker: the whole snapshot.
    await follower.run("wf-1", "read_file", WorkspaceSync(manifest=second.snapshot, step=3),
                       writing("c.txt", "3"))  # fmt: skip
    assert follower.last_checkout.written == [] and follower.last_checkout.removed == []
    elsewhere = Follower(tmp_path / "other", Snapshotter(own_store))
    await elsewhere.run("wf-1", "read_file", WorkspaceSync(manifest=second.snapshot, step=3),
                        writing("c.txt", "3"))  # fmt: skip
    assert elsewhere.last_checkout is not None
    assert sorted(elsewhere.last_checkout.written) == ["a.txt", "b.txt"]
    assert seen[-1] == {"a.txt": "1", "b.txt": "2"}


def test_directory_names_are_safe_and_distinct() -> None:
    """A workflow id becomes one file name under the root, never a path out of it."""
    names = {directory_name(i) for i in ("../../etc", "a/b", "a_b", "", "x" * 500)}
    assert len(names) == 5
    assert all("/" not in n and not n.startswith(".") and len(n) < 100 for n in names)


async def test_a_root_needs_a_store(tmp_path: Path) -> None:
    """``worker.py --workspace-root`` with ``--store none`` is refused before it starts, and
    so is ``build_worker`` without a store."""
    done = await run_cli(
        "--workspace-root", str(tmp_path), "--store", "none", "--address", "127.0.0.1:1",
        program="worker.py", env=clean_env(),
    )  # fmt: skip
    assert "--workspace-root needs a store" in refusal(done)
    async with http_client() as http:
        with pytest.raises(ValueError, match="needs a store"):
            build_worker(
                None,  # type: ignore[arg-type]  # refused before the client is used
                task_queue="q",
                settings=ProviderSettings.from_env({}),
                http=http,
                workspace_root=tmp_path,
            )
