"""Forks: a new run from step N of another, its conversation the original's up to there by
reference to the store's record, its workspace step N's snapshot, its config the original's;
the original untouched; forks of forks; lineage in status and a search attribute."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import Harness
from tests.support.processes import clean_env, run_cli
from treadle.client import AgentClient, InvalidRequest
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

NEW_INSTRUCTION = "Stop after f4.txt and write it in capitals."


def write(n: int) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": f"f{n}.txt", "content": str(n)}}
        ]
    }


def files(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.iterdir()) if p.is_file()}


@pytest.mark.replay_corpus
async def test_a_fork_from_step_3_continues_with_its_files_and_a_new_instruction(
    harness: Harness, tmp_path: Path
) -> None:
    """A six-step run forked at step 3 with a new instruction: the fork's first model request
    is the original's fourth (the same messages, from the record) followed by the instruction;
    its workspace starts as step 3's files; the original is untouched; status and the
    ForkedFrom search attribute name its origin; a fork of the fork works the same way."""
    model = harness.script(*(write(n) for n in range(1, 6)), {"content": "done"})
    original = await harness.start(model, snapshots={"enabled": True})
    result: AgentResult = await original.result()
    assert (result.status, result.steps) == (RunStatus.DONE, 6)
    before = len((await original.fetch_history()).events)
    client = AgentClient(harness.client, task_queue=harness.task_queue)

    forked = await client.fork(
        original.id, 3, message=NEW_INSTRUCTION, workspace=str(tmp_path / "fork"),
        create_workspace=True,
    )  # fmt: skip
    assert files(tmp_path / "fork") == {"f1.txt": "1", "f2.txt": "2", "f3.txt": "3"}
    handle = harness.client.get_workflow_handle(forked.id, result_type=AgentResult)
    harness.handles.append(handle)
    fork_result: AgentResult = await handle.result()
    assert fork_result.status is RunStatus.DONE
    requests = harness.requests(model)
    fourth, first_of_fork = requests[3], requests[6]
    assert first_of_fork["messages"][:-1] == fourth["messages"]
    assert first_of_fork["messages"][-1] == {"role": "user", "content": NEW_INSTRUCTION}
    assert files(tmp_path / "fork") == {f"f{n}.txt": str(n) for n in range(1, 6)}
    # The original is untouched: its history, its files.
    assert len((await original.fetch_history()).events) == before
    assert files(harness.workspace) == {f"f{n}.txt": str(n) for n in range(1, 6)}

    status: AgentStatus = await client.status(forked.id)
    assert status.forked_from is not None
    assert (status.forked_from.workflow_id, status.forked_from.step) == (original.id, 3)
    assert await harness.found_by(f'ForkedFrom = "{original.id}@3"') == [forked.id]

    # A fork of the fork, by the command line: from its step 4 (its first call's end).
    done = await run_cli(
        *harness.cli_args(), "fork", forked.id, "--step", "4", "--id", f"{forked.id}-again",
        "--workspace", str(tmp_path / "again"), "--create-workspace", "--json",
        env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert (again["forked_from"], again["step"]) == (forked.id, 4)
    assert files(tmp_path / "again") == {f"f{n}.txt": str(n) for n in range(1, 5)}
    second = harness.client.get_workflow_handle(again["id"], result_type=AgentResult)
    harness.handles.append(second)
    assert (await second.result()).status is RunStatus.DONE
    its_first = harness.requests(model)[9]["messages"]
    assert {"role": "user", "content": NEW_INSTRUCTION} in its_first
    assert its_first[: len(first_of_fork["messages"])] == first_of_fork["messages"]
    text = await run_cli(*harness.cli_args(), "status", again["id"], env=clean_env())
    assert f"forked:   from {forked.id} at step 4" in text.stdout


async def test_a_step_the_run_has_no_record_of_is_refused(harness: Harness) -> None:
    """A step at or past the run's last model call, or a negative one, is refused with one
    line and nothing starts."""
    model = harness.script(write(1), {"content": "done"})
    original = await harness.start(model)
    await original.result()
    client = AgentClient(harness.client, task_queue=harness.task_queue)
    with pytest.raises(InvalidRequest, match="no model call after step 2"):
        await client.fork(original.id, 2)
    done = await run_cli(*harness.cli_args(), "fork", original.id, "--step", "-1", env=clean_env())
    assert (done.returncode, done.stderr.strip()) == (2, "error: --step must be 0 or more")
    status = await original.query(AgentWorkflow.state)
    assert status.forked_from is None
