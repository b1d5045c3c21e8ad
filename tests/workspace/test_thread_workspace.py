"""A thread's export names its workspace snapshot, and an import continues from it: the files
checked out into an empty ``--workspace``, the new thread's snapshots chained on it."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.harness import Harness, start_agent
from tests.support.processes import run_cli
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    RunStatus,
    ThreadExport,
)
from treadle.workflows.agent.messages.snapshots import SnapshotConfig
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow


async def test_export_and_import_carry_the_workspace(harness: Harness, tmp_path: Path) -> None:
    """A thread writes two files and answers; its export names the snapshot; an import into
    a new empty directory finds both files there, and its workspace is that snapshot; an
    import into a directory with files of its own leaves them alone and says so."""
    write = [
        {"name": "write_file", "arguments": {"path": "a.txt", "content": "one"}},
        {"name": "write_file", "arguments": {"path": "src/b.py", "content": "print(2)\n"}},
    ]
    model = harness.script({"tool_calls": write}, {"content": "written"})
    handle = await start_agent(
        harness.client, harness.task_queue, model, harness.workspace, "write two", thread=True,
        config=AgentConfig(snapshots=SnapshotConfig(enabled=True)), id_prefix="thread",
    )  # fmt: skip
    await harness.wait_for_state(handle, State.WAITING_FOR_USER_INPUT)
    head = await handle.query(AgentWorkflow.workspace)
    assert head.manifest is not None
    exported = await run_cli(*harness.cli_args(), "export", handle.id)
    assert exported.returncode == 0, exported.stderr
    assert ThreadExport.model_validate_json(exported.stdout).workspace == head.manifest
    await run_cli(*harness.cli_args(), "close", handle.id)
    path = tmp_path / "thread.json"
    path.write_text(exported.stdout)

    into = tmp_path / "elsewhere"
    new_id = f"thread-{uuid.uuid4().hex[:10]}"
    imported = await run_cli(
        *harness.cli_args(), "import", str(path), "--id", new_id, "--workspace", str(into),
        "--create-workspace", "--model", harness.script({"content": "again"}),
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert f"2 files (12 B) from the thread's snapshot {head.manifest[:12]}" in imported.stderr
    assert (into / "a.txt").read_text() == "one"
    assert (into / "src" / "b.py").read_text() == "print(2)\n"
    new = harness.client.get_workflow_handle(new_id, result_type=AgentResult)
    assert (await new.query(AgentWorkflow.workspace)).manifest == head.manifest
    await run_cli(*harness.cli_args(), "close", new_id)

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("mine")
    other_id = f"thread-{uuid.uuid4().hex[:10]}"
    again = await run_cli(
        *harness.cli_args(), "import", str(path), "--id", other_id, "--workspace", str(busy),
        "--model", harness.script({"content": "again"}),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "is not empty, left as it is" in again.stderr
    assert sorted(p.name for p in busy.iterdir()) == ["mine.txt"]
    await run_cli(*harness.cli_args(), "close", other_id)
    assert (await new.result()).status is RunStatus.DONE
