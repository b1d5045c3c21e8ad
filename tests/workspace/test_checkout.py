"""`starter.py workspace ID`, run as a user runs it: the snapshots listed, the tree after any
step checked out exactly (contents and modes, removed files gone), two steps compared."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from tests.support.harness import Harness
from tests.support.processes import clean_env, run_cli
from treadle.workflows.agent.messages.models import RunStatus

Tree = dict[str, tuple[bytes, int]]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tree(root: Path) -> Tree:
    """Every file under ``root``: its content and permission bits."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def workspace(h: Harness, *args: str) -> str:
    done = await run_cli(*h.cli_args(), "workspace", *args, env=clean_env())
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_any_step_is_checked_out_exactly(harness: Harness, tmp_path: Path) -> None:
    """Writes, a mode change and a removal over five steps: `workspace ID` lists five
    snapshots; `--step N --into DIR` gives each step's tree byte for byte with its modes, into
    an empty directory and over another step's copy; `--diff` names what changed."""
    ws = harness.workspace
    (ws / "tool.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(ws / "tool.sh", 0o755)
    model = harness.script(
        call("write_file", path="a.txt", content="one"),
        call("write_file", path="src/b.py", content="print(2)\n"),
        call("run_command", command="chmod 600 a.txt"),
        call("write_file", path="a.txt", content="three"),
        call("run_command", command="rm src/b.py"),
        {"content": "done"},
    )
    expected: dict[int, Tree] = {}
    base = {"tool.sh": (b"#!/bin/sh\necho hi\n", 0o755)}
    umask = os.umask(0)
    os.umask(umask)
    plain = 0o666 & ~umask
    expected[1] = {**base, "a.txt": (b"one", plain)}
    expected[2] = {**expected[1], "src/b.py": (b"print(2)\n", plain)}
    expected[3] = {**expected[2], "a.txt": (b"one", 0o600)}
    expected[4] = {**expected[3], "a.txt": (b"three", 0o600)}
    expected[5] = {k: v for k, v in expected[4].items() if k != "src/b.py"}
    handle = await harness.start(
        model,
        snapshots={"enabled": True},
        allow_run_command=True,
        command_allowlist=["chmod", "rm"],
    )
    assert (await handle.result()).status is RunStatus.DONE
    assert tree(ws) == expected[5]

    listed = json.loads(await workspace(harness, handle.id, "--json"))
    assert [s["step"] for s in listed] == [1, 2, 3, 4, 5]
    assert [s["changed"] for s in listed] == [2, 1, 1, 1, 1]
    assert [s["files"] for s in listed] == [2, 3, 3, 3, 2]
    text = await workspace(harness, handle.id)
    assert text.splitlines()[0].split()[:3] == ["STEP", "CHANGED", "BYTES"]
    assert len(text.splitlines()) == 6

    into = tmp_path / "checkout"
    for step in (1, 2, 3, 4, 5, 2, 5):  # fresh, then over the copy of another step
        out = await workspace(harness, handle.id, "--step", str(step), "--into", str(into))
        assert f"step {step}" in out
        assert tree(into) == expected[step], step
    latest = tmp_path / "latest"
    await workspace(harness, handle.id, "--into", str(latest))
    assert tree(latest) == expected[5]
    again = await workspace(harness, handle.id, "--into", str(latest))
    assert "0 written" in again and "0 removed" in again and "2 unchanged" in again

    diff = (await workspace(harness, handle.id, "--diff", "1", "5")).splitlines()
    assert diff == [f"M a.txt (3 B -> 5 B, mode {mode(plain)} -> -rw-------)"]
    diff = (await workspace(harness, handle.id, "--diff", "2", "3")).splitlines()
    assert diff == [f"M a.txt (mode {mode(plain)} -> -rw-------)"]
    diff = (await workspace(harness, handle.id, "--diff", "4", "5")).splitlines()
    assert diff == ["D src/b.py"]
    before = await run_cli(*harness.cli_args(), "workspace", handle.id, "--step", "0")
    assert before.returncode == 2
    assert "no snapshot at or before step 0 (the first is after step 1)" in before.stderr


def mode(bits: int) -> str:
    return stat.filemode(stat.S_IFREG | bits)


async def test_a_run_without_snapshots_is_told_so(harness: Harness) -> None:
    """`workspace ID` of a run that took none (snapshots off) says why, exit 2."""
    model = harness.script(call("write_file", path="a.txt", content="one"), {"content": "done"})
    handle = await harness.start(model, snapshots={"enabled": False})
    assert (await handle.result()).status is RunStatus.DONE
    done = await run_cli(*harness.cli_args(), "workspace", handle.id, env=clean_env())
    assert done.returncode == 2
    assert "has no workspace snapshot" in done.stderr
