"""starter.py as users run it: real processes, exit codes, one-line errors, JSON output."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.harness import Harness
from tests.support.processes import ROOT, clean_env, free_port, refusal, run_cli
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus, Trace
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "cli"}}


def _track(harness: Harness) -> str:
    """A workflow id for a CLI-started run, registered so the harness replay-checks it."""
    workflow_id = f"cli-{uuid.uuid4().hex[:12]}"
    harness.handles.append(harness.client.get_workflow_handle(workflow_id))
    return workflow_id


async def test_run_wait_json_prints_the_result_and_exits_0(harness: Harness) -> None:
    """`run --wait --json` prints the AgentResult and exits 0 when the model answered."""
    model = harness.script({"content": "the answer"})
    done = await run_cli(
        *harness.cli_args(), "run", "Answer", "--model", model,
        "--workspace", str(harness.workspace), "--wait", "--json", "--id", _track(harness),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = AgentResult.model_validate_json(done.stdout)
    assert result.status is RunStatus.DONE
    assert result.answer == "the answer"
    assert done.stderr == ""


async def test_run_wait_json_exits_1_when_the_run_ends_in_error(harness: Harness) -> None:
    """A run that hits max steps prints its error result and exits 1."""
    model = harness.script({"tool_calls": [{"name": "list_dir", "arguments": {}}]})
    done = await run_cli(
        *harness.cli_args(), "run", "Loop", "--model", model, "--workspace",
        str(harness.workspace), "--max-steps", "2", "--wait", "--json", "--id", _track(harness),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    result = AgentResult.model_validate_json(done.stdout)
    assert result.status is RunStatus.ERROR
    assert "max steps" in (result.error or "")


async def test_status_approve_and_trace_through_the_cli(harness: Harness) -> None:
    """status --json lists pending calls with id, tool and arguments; approve resumes the run."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "ok"})
    started = await run_cli(
        *harness.cli_args(), "run", "Write", "--model", model, "--workspace",
        str(harness.workspace), "--require-approval", "write_file", "--id", "cli-approve-1",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    workflow_id = started.stdout.strip()
    assert workflow_id == "cli-approve-1"
    handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    harness.handles.append(handle)
    await harness.wait_for_state(handle, "WaitingForHuman")

    shown = await run_cli(*harness.cli_args(), "status", workflow_id, "--json")
    assert shown.returncode == 0, shown.stderr
    status = AgentStatus.model_validate_json(shown.stdout)
    (pending,) = status.pending_approvals
    assert pending.tool == "write_file"
    assert pending.arguments == {"path": "notes.md", "content": "cli"}
    assert json.loads(shown.stdout)["pending_approvals"][0]["call_id"] == pending.call_id

    text = await run_cli(*harness.cli_args(), "status", workflow_id)
    assert f"waiting:  {pending.call_id}  write_file" in text.stdout

    approved = await run_cli(*harness.cli_args(), "approve", workflow_id, "--call", pending.call_id)
    assert approved.returncode == 0, approved.stderr
    assert (
        approved.stdout.strip() == f"approved {pending.call_id} (write_file) in run {workflow_id}"
    )
    assert (await handle.result()).status is RunStatus.DONE

    traced = await run_cli(*harness.cli_args(), "trace", workflow_id, "--json")
    trace = Trace.model_validate_json(traced.stdout)
    assert [e.event for e in trace.entries][-1] == "LlmFinalAnswer"
    table = await run_cli(*harness.cli_args(), "trace", workflow_id)
    assert table.stdout.splitlines()[0].split() == ["STEP", "TIME", "STATE", "EVENT", "DATA"]


async def test_reject_and_modify_through_the_cli(harness: Harness) -> None:
    """reject --reason and modify --args reach the run; bad --args are refused before sending."""
    model = harness.script({"tool_calls": [WRITE]}, {"tool_calls": [WRITE]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")

    bad_json = await run_cli(*harness.cli_args(), "modify", handle.id, "--args", "{nope")
    assert "--args is not valid JSON" in refusal(bad_json)
    bad_schema = await run_cli(*harness.cli_args(), "modify", handle.id, "--args", '{"path": 1}')
    assert "do not match its schema" in refusal(bad_schema)

    rejected = await run_cli(*harness.cli_args(), "reject", handle.id, "--reason", "no")
    assert rejected.returncode == 0, rejected.stderr
    await harness.wait_for_state(handle, "WaitingForHuman")  # the model asks again
    modified = await run_cli(
        *harness.cli_args(), "modify", handle.id, "--args",
        '{"path": "notes.md", "content": "edited"}',
    )  # fmt: skip
    assert modified.returncode == 0, modified.stderr
    assert (await handle.result()).status is RunStatus.DONE
    assert (harness.workspace / "notes.md").read_text() == "edited"


async def test_bad_input_exits_2_with_one_clear_line(harness: Harness) -> None:
    """Unknown run, unknown tool name, nothing waiting, invalid model: exit 2, one line each."""
    unknown = await run_cli(*harness.cli_args(), "status", "no-such-run")
    assert refusal(unknown) == "error: no run with id 'no-such-run' in namespace default"

    bad_tool = await run_cli(*harness.cli_args(), "run", "x", "--require-approval", "write_fil")
    assert "unknown tool name(s): write_fil" in refusal(bad_tool)

    bad_model = await run_cli(*harness.cli_args(), "run", "x", "--model", "gpt-4o")
    assert "unknown model provider 'gpt-4o'" in refusal(bad_model)

    model = harness.script({"content": "fine"})
    handle = await harness.start(model)
    await handle.result()
    nothing = await run_cli(*harness.cli_args(), "approve", handle.id)
    assert "already completed" in refusal(nothing)

    again = await run_cli(
        *harness.cli_args(), "run", "x", "--model", model, "--id", handle.id,
        "--workspace", str(harness.workspace),
    )  # fmt: skip
    assert "already exists" in refusal(again)


async def test_no_server_is_one_line_and_exit_2() -> None:
    """With nothing listening at the address the CLI says so in one line, exit code 2."""
    done = await run_cli("--address", f"127.0.0.1:{free_port()}", "status", "x")
    assert "cannot reach Temporal" in refusal(done)


async def test_temporal_address_from_the_environment(harness: Harness) -> None:
    """TEMPORAL_ADDRESS is honoured when no --address is given (envconfig)."""
    model = harness.script({"content": "via env"})
    done = await run_cli(
        "--task-queue", harness.task_queue, "run", "x", "--model", model,
        "--workspace", str(harness.workspace), "--wait", "--json", "--id", _track(harness),
        env=clean_env(TEMPORAL_ADDRESS=harness.client.service_client.config.target_host),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert AgentResult.model_validate_json(done.stdout).answer == "via env"


async def test_budget_and_price_table_through_the_cli(harness: Harness, tmp_path: Path) -> None:
    """--token-budget and --config (prices) reach the run; status --json shows usage and cost."""
    model = harness.script(
        {"tool_calls": [WRITE], "usage": {"prompt_tokens": 400_000, "completion_tokens": 0}},
        {"content": "never reached"},
    )
    config = tmp_path / "agent.yaml"
    config.write_text(f"prices:\n  {model}: {{prompt: 1.5, completion: 6}}\nmax_steps: 5\n")
    workflow_id = _track(harness)
    done = await run_cli(
        *harness.cli_args(), "run", "Spend", "--model", model, "--workspace",
        str(harness.workspace), "--token-budget", "400200", "--config", str(config),
        "--id", workflow_id, "--wait", "--json",
    )  # fmt: skip
    assert done.returncode == 1
    result = AgentResult.model_validate_json(done.stdout)
    assert (result.error or "").startswith("token budget exhausted: 400000 of 400200")
    shown = await run_cli(*harness.cli_args(), "status", workflow_id, "--json")
    status = AgentStatus.model_validate_json(shown.stdout)
    assert status.usage.prompt_tokens == 400_000
    assert status.token_budget == 400_200
    assert status.cost_usd == 0.6
    text = await run_cli(*harness.cli_args(), "status", workflow_id)
    assert "cost:     $0.6000" in text.stdout
    assert "of a 400200 budget" in text.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text("prices: {x: [}\n")
    broken = await run_cli(*harness.cli_args(), "run", "x", "--config", str(bad))
    assert "is not valid JSON or YAML" in refusal(broken)


async def test_a_reader_that_stops_reading_gets_no_traceback(harness: Harness) -> None:
    """``treadle status ID | head`` and ``trace ID | head``: standard output's reader gone
    before the command writes; no traceback, no "Exception ignored", exit 141 (SIGPIPE's)."""
    handle = await harness.start(harness.script({"content": "done"}))
    assert (await handle.result()).status is RunStatus.DONE
    for command in ("status", "trace"):
        read, write = os.pipe()
        os.close(read)  # the reader has gone
        try:
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), command,
                 handle.id],
                stdout=write, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT,
            )  # fmt: skip
        finally:
            os.close(write)
        assert (done.returncode, done.stderr) == (141, ""), (command, done.stderr)
