"""docs/approvals.md's Python examples run as written, each as its own process: against the demo
they name (task queue ``treadle-demo``, the scripted model ``openai:demo``), here the harness's
own queue and the demo's script under a fresh name, which are the two things swapped in."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.harness import TEST_STORE, Harness
from tests.support.processes import clean_env
from treadle.scripted_model.script import DEMO_SCRIPT

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "approvals.md"
SECTION = "## From Python: `AgentClient`"
QUEUE = 'task_queue="treadle-demo"'
MODEL = '"openai:demo"'


def examples() -> list[str]:
    """The section's Python blocks, in order."""
    text = PAGE.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


async def run_example(harness: Harness, code: str, cwd: Path) -> list[str]:
    """``code`` as a script in ``cwd`` against the harness (its demo names swapped in), run to
    its end; its output lines. A script that fails fails the test with its output."""
    assert QUEUE in code and MODEL in code, "the example no longer names the demo"
    name = f"demo-{uuid.uuid4().hex[:8]}"
    harness.models.add_model(name, json.loads(DEMO_SCRIPT.read_text())["models"]["demo"])
    script = cwd / "example.py"
    script.write_text(
        code.replace(QUEUE, f'task_queue="{harness.task_queue}"').replace(MODEL, f'"openai:{name}"')
    )
    env = clean_env(
        TEMPORAL_ADDRESS=harness.client.service_client.config.target_host,
        TREADLE_STORE=str(TEST_STORE),  # the store the harness's worker writes to
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


async def test_the_approval_example_runs_as_written(harness: Harness, tmp_path: Path) -> None:
    """The first example starts a run, sees its write wait, is refused a wrong call, approves
    the right one, and reads the result, the trace, the export and the snapshots."""
    approve, _ = examples()
    lines = await run_example(harness, approve, tmp_path)
    run_id = lines[0].removeprefix("started ")
    harness.handles.append(harness.client.get_workflow_handle(run_id))
    assert any(line.startswith("approval_needed: write_file notes.md") for line in lines), lines
    assert any(line.startswith("refused: ") and "call_nope" in line for line in lines), lines
    assert "approved call_t1_0 write_file" in lines
    assert any(line.startswith("done after 4 steps: I listed the workspace") for line in lines)
    assert lines[-1] == "snapshot after step 2 : 1 file(s)", lines
    assert (tmp_path / "py-workspace" / "notes.md").read_text().startswith("# Treadle demo")


async def test_the_thread_example_runs_as_written(harness: Harness, tmp_path: Path) -> None:
    """The second example waits for a thread's first turn, asks it a question and reads the
    answer, closes it, and is told it has ended when it sends it more."""
    _, thread = examples()
    lines = await run_example(harness, thread, tmp_path)
    assert lines[0].startswith("WaitingForUserInput - I listed the workspace"), lines
    assert lines[1].startswith("I listed the workspace"), lines
    assert lines[2] == "done"
    ended = re.fullmatch(r"the thread (thread-\w+) has ended \(completed\)", lines[3])
    assert ended is not None, lines
    harness.handles.append(harness.client.get_workflow_handle(ended.group(1)))
