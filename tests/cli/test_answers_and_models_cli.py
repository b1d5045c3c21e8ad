"""starter.py for typed answers, fallback models and the wait tool: ``run --output-schema``
(a schema file, or a pydantic model's import path resolved before the run starts), ``run
--model a,b``, and ``wake`` ending a wait early."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.harness import Harness
from tests.support.processes import ROOT, clean_env, run_cli
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "files": {"type": "integer"}},
    "required": ["title", "files"],
}
GOOD = {"title": "notes", "files": 3}


def _track(harness: Harness) -> str:
    """A workflow id for a CLI-started run, registered so the harness replay-checks it."""
    workflow_id = f"cli-{uuid.uuid4().hex[:12]}"
    harness.handles.append(harness.client.get_workflow_handle(workflow_id))
    return workflow_id


async def test_run_output_schema_json_prints_the_typed_answer(
    harness: Harness, tmp_path: Path
) -> None:
    """``run --output-schema FILE --wait --json``: the schema reaches the model as structured
    output, and the printed result holds the parsed answer in ``output``."""
    model = harness.script({"content": json.dumps(GOOD)})
    schema_file = tmp_path / "answer.json"
    schema_file.write_text(json.dumps(SCHEMA))
    done = await run_cli(
        *harness.cli_args(), "run", "Describe", "--model", model, "--output-schema",
        str(schema_file), "--workspace", str(harness.workspace), "--wait", "--json",
        "--id", _track(harness),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = AgentResult.model_validate_json(done.stdout)
    assert result.status is RunStatus.DONE
    assert result.output == GOOD
    [body] = harness.requests(model)
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA


async def test_a_pydantic_model_named_by_import_path_is_the_schema(
    harness: Harness, tmp_path: Path
) -> None:
    """``--output-schema module:Model`` is resolved on the client, from the directory the
    command runs in; the run carries the model's JSON Schema; the answer prints as JSON."""
    (tmp_path / "answer_types.py").write_text(
        "from pydantic import BaseModel\n\n"
        "class Summary(BaseModel):\n    title: str\n    files: int\n"
    )
    model = harness.script({"content": json.dumps(GOOD)})
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), "run", "Describe",
            "--model", model, "--output-schema", "answer_types:Summary",
            "--workspace", str(harness.workspace), "--wait", "--id", _track(harness),
        ],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == GOOD  # the live view's answer
    assert "done after 1 step(s)" in done.stdout
    [body] = harness.requests(model)
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["title", "files"]
    assert schema["title"] == "Summary"


async def test_an_output_schema_that_names_nothing_is_refused(harness: Harness) -> None:
    """Neither a file nor an import path: a one-line error, exit 2, nothing started."""
    done = await run_cli(
        *harness.cli_args(), "run", "x", "--output-schema", "no such file.json",
        "--workspace", str(harness.workspace),
    )  # fmt: skip
    assert done.returncode == 2
    assert "no such file, and not an import path" in done.stderr


async def test_run_model_a_b_falls_back_and_status_names_the_server(harness: Harness) -> None:
    """``--model a,b``: a's endpoint answers 503 on every try, b answers; ``status`` says
    which model served the last call."""
    down = harness.script({"content": "never", "errors": [{"status": 503}] * 4})
    backup = harness.script({"content": "from the backup"})
    config = Path(harness.workspace).parent / "agent.yaml"
    config.write_text("model_max_attempts: 2\n")
    workflow_id = _track(harness)
    done = await run_cli(
        *harness.cli_args(), "run", "Answer", "--model", f"{down},{backup}", "--config",
        str(config), "--workspace", str(harness.workspace), "--wait", "--json",
        "--id", workflow_id,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert AgentResult.model_validate_json(done.stdout).answer == "from the backup"
    status = await run_cli(*harness.cli_args(), "status", workflow_id)
    assert f"model:    {down} (the last call served by {backup})" in status.stdout


async def test_wake_ends_a_wait_early(harness: Harness) -> None:
    """A run parked by the wait tool for an hour: ``wake ID --reason`` ends the wait now, and
    the model reads why."""
    model = harness.script(
        {"tool_calls": [{"name": "wait", "arguments": {"seconds": 3600, "reason": "CI"}}]},
        {"content": "CI is done."},
    )
    handle = await harness.start(model)
    status: AgentStatus = await harness.wait_for_state(handle, "Waiting")
    assert status.wakes_at is not None
    woke = await run_cli(*harness.cli_args(), "wake", handle.id, "--reason", "CI finished")
    assert woke.returncode == 0, woke.stderr
    assert woke.stdout.startswith(f"woke run {handle.id}")
    result: AgentResult = await handle.result()
    assert result.answer == "CI is done."
    assert "woken by a wake signal: CI finished" in json.dumps(harness.requests(model)[1])
    again = await run_cli(*harness.cli_args(), "wake", handle.id)
    assert again.returncode == 2
    assert "is not waiting (it is Done)" in again.stderr
    assert (await handle.query(AgentWorkflow.state)).state == "Done"


async def test_wake_of_an_unknown_run_says_so(harness: Harness) -> None:
    """A run id that names nothing: one line, exit 2."""
    done = await run_cli(
        *harness.cli_args(), "wake", f"no-such-{uuid.uuid4().hex[:6]}", env=clean_env()
    )
    assert done.returncode == 2
    assert "no run with id" in done.stderr
