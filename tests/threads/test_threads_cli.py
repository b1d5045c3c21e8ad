"""`starter.py chat | send | close | export | import`, run as a user would (real processes)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.harness import Harness
from tests.support.processes import ROOT, clean_env, refusal, run_cli
from treadle.cli import shell
from treadle.workflows.agent.messages.events import approval_commands
from treadle.workflows.agent.messages.models import (
    AgentResult,
    AgentStatus,
    Decision,
    RunStatus,
    ThreadExport,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow


def _thread_id(harness: Harness) -> str:
    thread_id = f"cli-thread-{uuid.uuid4().hex[:10]}"
    harness.handles.append(harness.client.get_workflow_handle(thread_id))
    return thread_id


async def _chat(harness: Harness, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), "chat", *args],
        cwd=ROOT,
        env=clean_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_chat_answers_each_line_then_leaves_the_thread_waiting(harness: Harness) -> None:
    """Piped lines: each is a turn, each answer is printed; the thread waits at the end."""
    model = harness.script({"content": "hello!"}, {"content": "it is 4"}, {"content": "bye"})
    thread_id = _thread_id(harness)
    done = await _chat(
        harness, "--model", model, "--workspace", str(harness.workspace), "--id", thread_id,
        "hi there", stdin="what is 2+2?\n",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "agent> hello!" in done.stdout
    assert "agent> it is 4" in done.stdout
    # Spelt to run in a fresh shell: the virtualenv's interpreter by path, not a bare python.
    assert f"{shell.starter('chat', '--id', thread_id)}" in done.stdout, done.stdout
    status: AgentStatus = await harness.client.get_workflow_handle(thread_id).query(
        AgentWorkflow.state
    )
    assert status.state is State.WAITING_FOR_USER_INPUT

    again = await _chat(harness, "--id", thread_id, stdin="/close\n")
    assert again.returncode == 0, again.stderr
    assert "closed" in again.stdout
    handle = harness.client.get_workflow_handle(thread_id, result_type=AgentResult)
    assert (await handle.result()).status is RunStatus.DONE


async def test_send_wait_close_export_and_import(harness: Harness, tmp_path: Path) -> None:
    """send --wait prints the answer; export writes Loom's JSON, long tool outputs read back
    whole from the store; import continues it."""
    (harness.workspace / "big.txt").write_text("y" * 5_000)
    read = {"name": "read_file", "arguments": {"path": "big.txt"}}
    model = harness.script({"tool_calls": [read]}, {"content": "first"}, {"content": "second"})
    thread_id = _thread_id(harness)
    started = await _chat(
        harness, "--model", model, "--workspace", str(harness.workspace), "--id", thread_id,
        "start", stdin="",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    sent = await run_cli(*harness.cli_args(), "send", thread_id, "more", "--wait")
    assert (sent.returncode, sent.stdout.strip()) == (0, "second"), sent.stderr
    exported = await run_cli(*harness.cli_args(), "export", thread_id)
    assert exported.returncode == 0, exported.stderr
    thread = ThreadExport.model_validate_json(exported.stdout)
    assert [m.content for m in thread.conversation.messages if m.role == "user"] == [
        "start",
        "more",
    ]
    [tool] = [m for m in thread.conversation.messages if m.role == "tool"]
    assert tool.content_ref is None
    assert tool.content is not None and tool.content.count("y") == 5_000
    closed = await run_cli(*harness.cli_args(), "close", thread_id)
    assert closed.returncode == 0, closed.stderr

    path = tmp_path / "thread.json"
    follow_up = harness.script({"content": "third"})
    path.write_text(exported.stdout)
    new_id = _thread_id(harness)
    imported = await run_cli(
        *harness.cli_args(), "import", str(path), "--id", new_id,
        "--workspace", str(harness.workspace), "--model", follow_up,
    )  # fmt: skip
    assert (imported.returncode, imported.stdout.strip()) == (0, new_id), imported.stderr
    # The importer's --model, not the file's: one line says the file's was ignored.
    assert imported.stderr.startswith("ignored the file's config: model "), imported.stderr
    answer = await run_cli(*harness.cli_args(), "send", new_id, "and now?", "--wait")
    assert (answer.returncode, answer.stdout.strip()) == (0, "third"), answer.stderr
    await run_cli(*harness.cli_args(), "close", new_id)


async def test_a_malformed_thread_file_is_one_line_and_exit_2(
    harness: Harness, tmp_path: Path
) -> None:
    """Not JSON, not a thread, or a conversation that cannot continue: refused clearly."""
    cases = {
        "not json": "is not a thread",
        json.dumps({"conversation": {"messages": []}}): "is not a thread",
        json.dumps(
            {
                "agent_state": {"kind": "calling_llm"},
                "conversation": {"messages": [{"role": "assistant"}, {"role": "user"}]},
            }
        ): "cannot be continued: the conversation must start with the user's first message",
    }
    for index, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"bad{index}.json"
        path.write_text(text)
        done = await run_cli(*harness.cli_args(), "import", str(path))
        assert expected in refusal(done)


async def test_send_to_a_closed_thread_is_refused(harness: Harness) -> None:
    """A message to a thread that has ended is one line and exit 2, saying so."""
    model = harness.script({"content": "only"})
    thread_id = _thread_id(harness)
    await _chat(
        harness, "--model", model, "--workspace", str(harness.workspace), "--id", thread_id,
        "hello", stdin="/close\n",
    )  # fmt: skip
    done = await run_cli(*harness.cli_args(), "send", thread_id, "anyone?")
    assert done.returncode == 2
    assert f"error: the thread {thread_id} has ended (completed)" in done.stderr


async def test_send_wait_prints_the_approval_commands_a_run_publishes(harness: Harness) -> None:
    """send --wait on a turn that waits for approval prints the same commands a watcher shows
    (approve, reject, modify and the stock CLI's signal), spelt for a fresh shell; approved, it
    prints the answer."""
    write = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hi"}}
    model = harness.script({"content": "hello!"}, {"tool_calls": [write]}, {"content": "written"})
    thread_id = _thread_id(harness)
    started = await _chat(
        harness, "--model", model, "--workspace", str(harness.workspace), "--id", thread_id,
        "--require-approval", "write_file", "hi", stdin="",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), "send", thread_id,
        "write it", "--wait", cwd=ROOT, env=clean_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        head = await asyncio.wait_for(process.stderr.readline(), 60)
        assert head.decode().startswith("waiting for approval: write_file ")
        status: AgentStatus = await harness.client.get_workflow_handle(thread_id).query(
            AgentWorkflow.state
        )
        [pending] = status.pending_approvals
        lines = [
            (await asyncio.wait_for(process.stderr.readline(), 10)).decode().rstrip("\n")
            for _ in approval_commands(thread_id, pending.call_id)
        ]
        assert lines == [
            f"  {shell.runnable(command)}"
            for command in approval_commands(thread_id, pending.call_id)
        ]
        await harness.client.get_workflow_handle(thread_id).execute_update(
            AgentWorkflow.decide, Decision(action="approve", call_id=pending.call_id)
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.decode().strip() == "written"
    await run_cli(*harness.cli_args(), "close", thread_id)
