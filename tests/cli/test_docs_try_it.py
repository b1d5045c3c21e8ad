"""The key-free try-its of docs/tools.md (your own tool), docs/client-queries.md (a run that
asks its client) and docs/subagents.md (a parent that delegates) run as printed: a scripted
model, a worker reaching it and a run, in a shell with no virtualenv activated. Only the
connection differs: the suite's server and a queue of the test's own instead of the dev
server's defaults, and a free port for the model."""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid

from tests.support.processes import DATA_ENV, FRESH_SHELL, ROOT, free_port

TREADLE = ".venv/bin/treadle"


def try_it(doc: str, opening: str) -> str:
    """The bash block that follows ``opening`` in ``docs/<doc>``."""
    text = (ROOT / "docs" / doc).read_text()
    block = re.search(re.escape(opening) + r".*?```bash\n(.*?)```", text, re.S)
    assert block is not None, f"no try-it after {opening!r} in {doc}"
    return block.group(1)


def connected(script: str, address: str, queue: str) -> str:
    """``script`` against the suite's server, on ``queue``, with its model on a free port."""
    [port] = set(re.findall(r"--port (\d+)", script))
    script = script.replace(port, str(free_port()))
    script = script.replace(
        "worker --dev-server", f"worker --address {address} --task-queue {queue}"
    )
    return script.replace(
        f"{TREADLE} run ", f"{TREADLE} --address {address} --task-queue {queue} run "
    )


def shell(script: str, data: dict[str, str]) -> subprocess.Popen[str]:
    """``script`` in bash in the checkout, as a fresh shell has it (plus the suite's data
    directory); whatever it left running in the background is stopped when it ends."""
    stop = "trap 'kill $(jobs -p) 2>/dev/null' EXIT\n"
    return subprocess.Popen(
        ["/bin/bash", "-c", f"cd {ROOT}\n{stop}{script}"],
        env={**FRESH_SHELL, **data},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def ran(doc: str, opening: str, address: str, queue: str) -> str:
    """What the try-it of ``doc`` that starts with ``opening`` printed, run as printed in a
    fresh shell against the suite's server, on a queue of its own."""
    done = shell(connected(try_it(doc, opening), address, queue), _data())
    out, _ = done.communicate(timeout=180)
    return out


def _data() -> dict[str, str]:
    """The suite's data directory and store, which the worker and the commands share."""
    return {name: os.environ[name] for name in DATA_ENV if name in os.environ}


def test_the_own_tool_try_it_calls_count_lines(temporal_address: str) -> None:
    """docs/tools.md: the module saved as printed, the scripted model calls count_lines on
    README.md and the run ends Done with the tool's count in its live output."""
    module = re.search(
        r"```python\n(# my_tools/tools\.py.*?)```", (ROOT / "docs/tools.md").read_text(), re.S
    )
    assert module is not None
    package = ROOT / "my_tools"
    made = not package.exists()
    package.mkdir(exist_ok=True)
    (package / "tools.py").write_text(module.group(1))
    try:
        out = ran(
            "tools.md",
            "Try it without an API key: save the module above",
            temporal_address,
            f"try-tools-{uuid.uuid4().hex[:8]}",
        )
        lines = len((ROOT / "README.md").read_text().splitlines())
        assert f"✓ count_lines README.md ({lines})" in out, out
        assert "■ Done" in out, out
    finally:
        (ROOT / "counter.json").unlink(missing_ok=True)
        if made:
            (package / "tools.py").unlink(missing_ok=True)
            for cache in package.glob("__pycache__/*"):
                cache.unlink()
            for folder in (package / "__pycache__", package):
                if folder.exists():
                    folder.rmdir()


def test_the_client_query_try_it_sends_the_file_and_takes_the_answer(
    temporal_address: str,
) -> None:
    """docs/client-queries.md: the file read is answered from this directory with
    --allow-reads; with no terminal, the question is left to another client and the printed
    ``answer`` command, run from a second shell, ends the run Done."""
    queue = f"try-queries-{uuid.uuid4().hex[:8]}"
    workflow_id = f"ask-try-{uuid.uuid4().hex[:8]}"
    script = connected(
        try_it("client-queries.md", "Try it without an API key, in the repository's directory"),
        temporal_address,
        queue,
    ).replace("--id ask-try", f"--id {workflow_id}")
    data = _data()
    running = shell(script, data)
    try:
        deadline = time.monotonic() + 120  # a watchdog against a hang, not a measured duration
        answer = f"{TREADLE} --address {temporal_address} answer {workflow_id} q2 main"
        while True:
            done = subprocess.run(
                ["/bin/bash", "-c", f"cd {ROOT} && {answer}"],
                env={**FRESH_SHELL, **data},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if done.returncode == 0:
                break
            assert time.monotonic() < deadline, done.stderr  # a watchdog, not a duration
            time.sleep(0.5)
        out, _ = running.communicate(timeout=120)
        assert re.search(r"← q1: file_read: \d+ characters", out), out
        assert "Which branch do you deploy from?" in out
        assert "■ Done" in out, out
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
        (ROOT / "asker.json").unlink(missing_ok=True)


def test_the_subagents_try_it_delegates_and_shows_the_childs_answer(temporal_address: str) -> None:
    """docs/subagents.md: the scripted parent delegates to the sub-agent model its config
    allows, the child reads README.md and answers, and the parent's live output shows the
    child's answer as the delegate call's result, then ends Done with its own."""
    try:
        out = ran(
            "subagents.md",
            "Try it without an API key, in the repository's directory",
            temporal_address,
            f"try-family-{uuid.uuid4().hex[:8]}",
        )
        child = r"agent-\w+\.call_t0_0"
        assert re.search(rf"→ delegate {child}\n", out), out
        assert re.search(rf"\[{child}\] ✓ read_file README\.md", out), out
        said = "Treadle runs durable AI agents on Temporal."
        assert re.search(rf"\[{child}\] model: {re.escape(said)}", out), out
        assert re.search(rf"✓ delegate Read README\.md .*\(Sub-agent {child} answered:\)", out)
        assert f"My sub-agent read README.md: {said}" in out, out
        assert "■ Done" in out, out
    finally:
        for made in ("family.json", "family-config.json"):
            (ROOT / made).unlink(missing_ok=True)
