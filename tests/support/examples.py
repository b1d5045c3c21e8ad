"""The docs' Python examples run as written, each as its own process: against the demo they name
(task queue ``treadle-demo``, the scripted model ``openai:demo``), here the harness's own queue
and the demo's script under a fresh name, which are the two things swapped in."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.harness import TEST_STORE, Harness
from tests.support.processes import clean_env
from treadle.scripted_model.script import DEMO_SCRIPT

QUEUE = 'task_queue="treadle-demo"'
MODEL = '"openai:demo"'


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
