"""docs/approvals.md's Python examples run as written, each as its own process: against the demo
they name (task queue ``treadle-demo``, the scripted model ``openai:demo``), here the harness's
own queue and the demo's script under a fresh name, which are the two things swapped in."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.examples import run_example
from tests.support.harness import Harness

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "approvals.md"
SECTION = "## From Python: `AgentClient`"


def examples() -> list[str]:
    """The section's Python blocks, in order."""
    text = PAGE.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


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
