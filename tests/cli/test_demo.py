"""The front door: ``starter.py demo --keep`` and every command it prints, run as printed in a
fresh shell (no virtualenv activated, no Temporal settings), and the scripted model's answer to
a rejection."""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.harness import Harness
from tests.support.processes import DATA_ENV, FRESH_SHELL, ROOT, clean_env, free_port
from treadle import home
from treadle.cli import shell
from treadle.cli.demo import DEMO_TASK_QUEUE, kept_queue
from treadle.cli.shell import runnable
from treadle.scripted_model import DEMO_SCRIPT
from treadle.workflows.agent.messages.events import approval_commands
from treadle.workflows.agent.messages.models import TASK_QUEUE, Decision, RejectSignal, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

FRESH_WORKSPACES = ROOT / ".treadle" / "workspaces"
"""Where a run started from a fresh shell in the checkout gets its workspace (no TREADLE_HOME:
the data directory is ``.treadle`` there)."""
REJECTION = "You rejected the write to notes.md, so I left it as it was. Your reason: {reason}"


@dataclass
class KeptDemo:
    """A ``treadle demo --keep`` process and what it printed."""

    process: subprocess.Popen[str]
    lines: list[str]
    suffix: str
    commands: list[str]
    """Step 8's commands, in order: cd, run, watch, status, approve, reject, chat."""
    approval: list[str]
    """Step 5's commands: approve, reject, and the stock CLI's signal."""

    def command(self, verb: str) -> str:
        """The step 8 command whose ``treadle`` sub-command is ``verb`` (comment dropped)."""
        for line in self.commands[1:]:
            words = shlex.split(line, comments=True)
            if _verb(words) == verb:
                return shlex.join(words)
        raise AssertionError(f"no {verb!r} command in:\n" + "\n".join(self.commands))


def _verb(words: list[str]) -> str:
    """The sub-command: the first word after treadle that is not an option or its value."""
    rest = words[[Path(w).name == "treadle" for w in words].index(True) + 1 :]
    while rest and rest[0].startswith("--"):
        rest = rest[2:]
    return rest[0]


def fresh_shell(
    cd: str, command: str, timeout: float = 30, data: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``cd ...`` then ``command`` in bash with nothing but HOME and a system PATH (and,
    with ``data``, the demo's data directory and store, which a user's second terminal in the
    same directory shares; the suite's are out of the checkout)."""
    shared = {name: os.environ[name] for name in DATA_ENV if data and name in os.environ}
    return subprocess.run(
        ["/bin/bash", "-c", f"{cd} && {command}"],
        env={**FRESH_SHELL, **shared},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _reader(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


@pytest.fixture(scope="module")
def kept_demo(
    temporal_address: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KeptDemo]:
    """``demo --keep`` against the session's server, as a user starts it: no ``--task-queue``
    (it serves its own queue, ``treadle-demo``, which nothing else in the suite polls)."""
    host, _, port = temporal_address.rpartition(":")
    config = tmp_path_factory.mktemp("demo") / "temporal-dev.yaml"
    config.write_text(
        f"ip: {host}\nport: {port}\nui_port: {free_port()}\n"
        f"db_filename: {config.parent / 'unused.sqlite'}\n"
    )
    command = ["starter.py", "demo", "--keep", "--dev-config"]
    process = subprocess.Popen(
        [sys.executable, *command, str(config)],
        cwd=ROOT,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pending: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_reader, args=(process, pending), daemon=True)
    reader.start()
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while not (
        lines and lines[-1].startswith("   Web UI:") and any(s.startswith("8.") for s in lines)
    ):
        line = pending.get(timeout=max(0.1, deadline - time.monotonic()))
        if line is None:
            process.wait()
            raise AssertionError("demo --keep exited early:\n" + "\n".join(lines))
        lines.append(line)
    eight = next(i for i, line in enumerate(lines) if line.startswith("8."))
    five = next(i for i, line in enumerate(lines) if line.startswith("5."))
    suffix = re.search(r"Agent run demo-([0-9a-f]{8}) started", "\n".join(lines))
    assert suffix is not None, "\n".join(lines)
    demo = KeptDemo(
        process,
        lines,
        suffix.group(1),
        [line.strip() for line in lines[eight + 1 : -1] if line.startswith("     ")],
        [line.strip() for line in lines[five + 2 : five + 5]],
    )
    try:
        yield demo
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        finally:
            reader.join(timeout=10)
            assert process.stdout is not None
            process.stdout.close()
        for name in (f"demo-{demo.suffix}", f"try-{demo.suffix}"):
            shutil.rmtree(home.workspaces() / name, ignore_errors=True)
            shutil.rmtree(FRESH_WORKSPACES / name, ignore_errors=True)
        assert code == 0, "\n".join(lines)


def _wait_for(kept: KeptDemo, workflow_id: str, text: str, timeout: float = 20) -> str:
    """Poll the printed ``status`` command (for ``workflow_id``) until its output has ``text``."""
    status = kept.command("status").replace(f"try-{kept.suffix}", workflow_id)
    deadline = time.monotonic() + timeout
    while True:
        done = fresh_shell(kept.commands[0], status)
        if text in done.stdout:
            return done.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never in status:\n{done.stdout}{done.stderr}")
        time.sleep(0.3)


def test_demo_keep_prints_commands_for_a_fresh_shell(kept_demo: KeptDemo) -> None:
    """Step 8 starts with a cd (the demo's data directory is there) and names programs by path:
    the venv's treadle, never bare."""
    cd, *rest = kept_demo.commands
    assert cd == f"cd {ROOT}"
    treadle = shell.treadle()
    assert treadle == ".venv/bin/treadle" or "/" in treadle
    for line in rest:
        assert line.startswith(f"{treadle} "), line
    assert [_verb(shlex.split(line, comments=True)) for line in rest] == [
        "run",
        "watch",
        "status",
        "approve",
        "reject",
        "chat",
        "export",
        "import",
        "ui",
    ]
    assert "--model openai:demo" in kept_demo.command("run")
    assert "--task-queue" not in kept_demo.command("status")  # an existing run needs no queue
    assert kept_demo.approval[2].split()[0].endswith("temporal")


def test_demo_keep_serves_a_queue_of_its_own(kept_demo: KeptDemo) -> None:
    """Left at the shared default, --keep serves ``treadle-demo``, not ``treadle-agent`` (where a
    real worker would take the scripted runs, and the demo's worker answer real ones); every
    printed command that starts a run names the queue."""
    assert DEMO_TASK_QUEUE == "treadle-demo" != TASK_QUEUE
    [eight] = [line for line in kept_demo.lines if line.startswith("8.")]
    assert eight.endswith(f"a worker on task queue {DEMO_TASK_QUEUE}.")
    assert f"3. Worker polling task queue {DEMO_TASK_QUEUE}" in kept_demo.lines
    for verb in ("run", "chat", "import"):
        assert f"--task-queue {DEMO_TASK_QUEUE} " in kept_demo.command(verb), verb
    assert kept_queue("mine") == "mine"


def test_run_watch_status_approve_from_a_fresh_shell(kept_demo: KeptDemo) -> None:
    """The printed run starts a run on the kept worker; watch follows it live, status shows the
    waiting write, approve lets it finish, all as printed in a shell with no virtualenv."""
    cd = kept_demo.commands[0]
    workflow_id = f"try-{kept_demo.suffix}"
    started = fresh_shell(cd, kept_demo.command("run"))
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == workflow_id
    waiting = _wait_for(kept_demo, workflow_id, "state:    WaitingForHuman")
    assert "write_file" in waiting
    watch = subprocess.Popen(
        ["/bin/bash", "-c", f"{cd} && {kept_demo.command('watch')}"],
        env=FRESH_SHELL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Approve once watch has attached: on a busy machine the run could otherwise end
        # before watch starts, and watch rightly says only that it has ended.
        assert watch.stderr is not None
        attached = watch.stderr.readline()
        assert attached.startswith(f"watch: attached to {workflow_id} (WaitingForHuman)"), attached
        approved = fresh_shell(cd, kept_demo.command("approve"))
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.startswith(f"approved call_t1_0 (write_file) in run {workflow_id}")
        out, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    kinds = [json.loads(line)["kind"] for line in out.splitlines() if line.startswith("{")]
    assert "answer" in kinds, out
    done = _wait_for(kept_demo, workflow_id, "state:    Done")
    assert "answer:   I listed the workspace" in done
    assert (FRESH_WORKSPACES / workflow_id / "notes.md").is_file()


def test_a_rejection_from_a_fresh_shell_is_answered(kept_demo: KeptDemo) -> None:
    """The printed reject, on a run started like the printed one: the scripted model answers
    the rejection with the reason, and writes nothing."""
    cd = kept_demo.commands[0]
    workflow_id = f"rejected-{kept_demo.suffix}"
    run = kept_demo.command("run").replace(f"try-{kept_demo.suffix}", workflow_id)
    assert fresh_shell(cd, run).returncode == 0
    _wait_for(kept_demo, workflow_id, "state:    WaitingForHuman")
    reject = kept_demo.command("reject").replace(f"try-{kept_demo.suffix}", workflow_id)
    rejected = fresh_shell(cd, reject)
    assert rejected.returncode == 0, rejected.stderr
    done = _wait_for(kept_demo, workflow_id, "state:    Done")
    assert f"answer:   {REJECTION.format(reason='not now')}" in done
    assert not (FRESH_WORKSPACES / workflow_id / "notes.md").exists()
    shutil.rmtree(FRESH_WORKSPACES / workflow_id, ignore_errors=True)


def test_the_stock_cli_signal_from_step_5_works_in_a_fresh_shell(kept_demo: KeptDemo) -> None:
    """Step 5's ``temporal workflow signal`` (the venv's CLI, by path) approves a waiting call."""
    cd = kept_demo.commands[0]
    workflow_id = f"signalled-{kept_demo.suffix}"
    run = kept_demo.command("run").replace(f"try-{kept_demo.suffix}", workflow_id)
    assert fresh_shell(cd, run).returncode == 0
    _wait_for(kept_demo, workflow_id, "state:    WaitingForHuman")
    signal_line = kept_demo.approval[2].replace(f"demo-{kept_demo.suffix}", workflow_id)
    signalled = fresh_shell(cd, signal_line)
    assert signalled.returncode == 0, signalled.stderr
    _wait_for(kept_demo, workflow_id, "state:    Done")
    shutil.rmtree(FRESH_WORKSPACES / workflow_id, ignore_errors=True)


def test_the_printed_ui_serves_the_browser_page_from_a_fresh_shell(kept_demo: KeptDemo) -> None:
    """Step 8's ``ui`` command, run as printed, serves the page at the URL printed beside it,
    listing the demo's runs; step 5 names it too."""
    line = next(line for line in kept_demo.lines if "# the browser page at" in line)
    url = re.search(r"the browser page at (http://\S+):", line)
    assert url is not None, line
    assert any(url.group(1) in shown for shown in kept_demo.lines[: kept_demo.lines.index(line)])
    page = subprocess.Popen(
        ["/bin/bash", "-c", f"{kept_demo.commands[0]} && exec {kept_demo.command('ui')}"],
        env=FRESH_SHELL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert page.stdout is not None
        started = page.stdout.readline()
        assert started.startswith(f"Treadle's page on {url.group(1)}"), started + (
            page.stderr.read() if page.poll() is not None and page.stderr else ""
        )
        assert httpx.get(url.group(1), timeout=30).status_code == 200
        run = httpx.get(f"{url.group(1)}v1/runs/demo-{kept_demo.suffix}/view", timeout=30)
        assert run.status_code == 200, run.text
        assert f"demo-{kept_demo.suffix}" in run.text
    finally:
        page.send_signal(signal.SIGINT)
        try:
            page.wait(timeout=30)
        except subprocess.TimeoutExpired:
            page.kill()
            page.wait()
        for stream in (page.stdout, page.stderr):
            if stream is not None:
                stream.close()


def test_the_printed_chat_talks_with_the_scripted_model(kept_demo: KeptDemo) -> None:
    """The printed chat, given a first message and no terminal, shows the scripted answer."""
    chat = f"{kept_demo.command('chat')} 'What is here?' </dev/null"
    done = fresh_shell(kept_demo.commands[0], chat)
    assert done.returncode == 0, done.stderr
    assert "I listed the workspace" in done.stdout
    thread = re.search(r"thread (thread-[0-9a-f]+)", done.stdout)
    assert thread is not None, done.stdout
    shutil.rmtree(FRESH_WORKSPACES / thread.group(1), ignore_errors=True)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_demo_model_answers_a_rejection_with_its_reason(
    harness: Harness, provider: str
) -> None:
    """Rejecting the demo script's write ends the run with an answer that says so and quotes
    the reason, over both protocols, instead of reading back a file that was never written."""
    turns = json.loads(DEMO_SCRIPT.read_text())["models"]["demo"]
    model = harness.script(*turns, provider=provider)
    handle = await harness.start(model, task="Anything at all.", require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.signal(AgentWorkflow.reject, RejectSignal(reason="keep the workspace clean"))
    result = await handle.result()
    assert result.status is RunStatus.DONE
    assert result.answer == REJECTION.format(reason="keep the workspace clean")
    assert not (harness.workspace / "notes.md").exists()


async def test_the_demo_model_answers_any_task_after_an_approval(harness: Harness) -> None:
    """Approved, the demo script lists, writes, reads back and answers, whatever the task."""
    turns = json.loads(DEMO_SCRIPT.read_text())["models"]["demo"]
    model = harness.script(*turns)
    handle = await harness.start(model, task="Plan a picnic.", require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.execute_update(AgentWorkflow.decide, Decision(action="approve"))
    result = await handle.result()
    assert result.status is RunStatus.DONE
    assert result.answer is not None and "scripted demo model" in result.answer
    assert (harness.workspace / "notes.md").is_file()


def test_printed_programs_are_relative_here_and_absolute_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the project directory commands read ``.venv/bin/treadle``; from anywhere else they
    carry absolute paths; the default address and namespace add no options."""
    monkeypatch.chdir(ROOT)
    here = shell.starter("status", "x", address="127.0.0.1:7233", namespace="default")
    assert here == f"{shell.treadle()} status x"
    assert not here.startswith("/") or not sys.executable.startswith(str(ROOT))
    monkeypatch.chdir(tmp_path)
    script = os.path.abspath(Path(sys.executable).parent / "treadle")
    elsewhere = shell.starter("status", "x", address="127.0.0.1:7299", namespace="other")
    assert elsewhere == f"{script} --address 127.0.0.1:7299 --namespace other status x"
    assert shell.temporal("workflow", "list").split()[0].startswith("/")
    assert shell.worker("--dev-server") == f"{script} worker --dev-server"


def test_commands_a_run_publishes_work_in_a_fresh_shell(
    kept_demo: KeptDemo, temporal_address: str
) -> None:
    """The approve command an ``approval_needed`` event carries (in the stock spelling, as the
    workflow cannot know this machine) runs as ``watch`` prints it, with the virtualenv's paths."""
    cd = kept_demo.commands[0]
    workflow_id = f"try-pub-{kept_demo.suffix}"
    run = kept_demo.command("run").replace(f"try-{kept_demo.suffix}", workflow_id)
    started = fresh_shell(cd, run)
    assert started.returncode == 0, started.stderr
    _wait_for(kept_demo, workflow_id, "state:    WaitingForHuman")
    stock = approval_commands(workflow_id, "call_t1_0")
    approve = runnable(stock[0])
    assert stock[0].startswith("treadle ") and approve != stock[0]
    # A published command names no server (the run cannot know it), so it reaches the default
    # address; the suite's server is elsewhere, which the user's TEMPORAL_ADDRESS would say.
    approved = fresh_shell(cd, f"TEMPORAL_ADDRESS={temporal_address} {approve}")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith(f"approved call_t1_0 (write_file) in run {workflow_id}")
    _wait_for(kept_demo, workflow_id, "state:    Done")
    signal = runnable(stock[3].replace("approve", "reject"))
    assert signal.split()[0].endswith("temporal")
    assert runnable("echo as it is") == "echo as it is"


def test_the_printed_export_and_import_continue_the_demo_run_on_its_worker(
    kept_demo: KeptDemo,
) -> None:
    """Step 8's export writes the demo's run as a file and its import, run as printed, starts
    a thread from it on the demo's queue with the scripted model (no ``--model`` needed there),
    which the demo's worker answers."""
    [export] = [c for c in kept_demo.commands if " export " in c]
    command = export.split("  #", 1)[0]
    file = ROOT / f"demo-{kept_demo.suffix}.json"
    try:
        exported = fresh_shell(kept_demo.commands[0], command, data=True)
        assert exported.returncode == 0, exported.stderr
        assert json.loads(file.read_text())["conversation"]["messages"]
        imported = fresh_shell(kept_demo.commands[0], kept_demo.command("import"), data=True)
        assert imported.returncode == 0, imported.stderr
        thread = imported.stdout.strip()
        sent = fresh_shell(
            kept_demo.commands[0],
            kept_demo.command("status").replace(
                f"status try-{kept_demo.suffix}", f"send {thread} 'and now?' --wait"
            ),
            timeout=60,
            data=True,
        )
        assert sent.returncode == 0, sent.stderr
        assert "I listed the workspace" in sent.stdout
        status = _wait_for(kept_demo, thread, "state:    WaitingForUserInput")
        assert "model:    openai:demo" in status
    finally:
        file.unlink(missing_ok=True)
        if "thread" in locals():
            shutil.rmtree(home.workspaces() / thread, ignore_errors=True)


def test_the_demo_runs_snapshots_are_listed_by_the_printed_command(kept_demo: KeptDemo) -> None:
    """The demo's worker has a store: the ``workspace`` command printed at step 7, run with
    the demo's environment, lists the snapshot of the step that wrote notes.md."""
    [line] = [s for s in kept_demo.lines if s.startswith("   Its workspace after each step")]
    command = line.split(": ", 1)[1]
    listed = subprocess.run(
        ["/bin/bash", "-c", f"cd {ROOT} && {command} --json"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    snapshots = json.loads(listed.stdout)
    assert snapshots, listed.stdout
    assert any(s["changed"] >= 1 and s["files"] >= 1 for s in snapshots), snapshots
