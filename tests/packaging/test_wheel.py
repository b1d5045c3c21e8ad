"""The wheel, installed into a fresh virtualenv beside a Temporal app of the user's own (its own
``workflows/``, ``activities/``, ``worker.py`` and ``starter.py``, from docs/embedding.md): the
wheel holds only ``treadle``, the demo runs to its answer from the app's folder, the app's tool
module loads with ``from treadle import Tool``, the app's plugin worker completes a run, and
Treadle's state lands in the app's ``.treadle/``, never in site-packages. Every program runs
from a shell with nothing but HOME and a system PATH."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.support.installed import Installed
from tests.support.processes import free_port


def fresh(**extra: str) -> dict[str, str]:
    """A new terminal's environment: no virtualenv, no Temporal or Treadle settings."""
    return {"HOME": os.environ.get("HOME", "/"), "PATH": "/usr/bin:/bin", **extra}


def files_of(package: Path) -> set[str]:
    """The installed package's files (bytecode caches aside)."""
    return {
        str(p.relative_to(package))
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def run(
    installed: Installed, *argv: str, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """A program run in the app's folder."""
    return subprocess.run(
        list(argv),
        cwd=installed.app,
        env=dict(env or fresh()),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextmanager
def serving(
    installed: Installed, argv: list[str], env: Mapping[str, str], ready: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A long-running program of the app's folder, once it printed a line holding ``ready``
    (yielded with the process); interrupted (Ctrl-C) at the end."""
    process = subprocess.Popen(
        argv,
        cwd=installed.app,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=120)
            if line is None:
                raise AssertionError(f"{argv[-1]} exited early:\n" + "\n".join(seen))
            seen.append(line)
            if ready in line:
                break
        yield process, line
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        finally:
            process.kill()
            reader.join(timeout=10)
            assert process.stdout is not None
            process.stdout.close()


def test_the_wheel_holds_only_treadle(installed: Installed) -> None:
    """One import name: the wheel's top level is ``treadle/`` and its dist-info, with the agent's
    workflows and activities under it and the files it reads at run time."""
    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    info = {top for top in tops if top.endswith(".dist-info")}
    assert tops - info == {"treadle"} and len(info) == 1, sorted(tops)
    for needed in (
        "treadle/workflows/agent/workflow.py",
        "treadle/activities/tools/custom.py",
        "treadle/plugin/plugin.py",
        "treadle/temporal-dev.yaml",
        "treadle/demo_script.json",
    ):
        assert needed in names, needed
    assert not [name for name in names if "__pycache__" in name]


def test_the_demo_runs_to_its_answer_from_the_app_folder(
    installed: Installed, temporal_address: str, tmp_path: Path
) -> None:
    """``treadle demo`` from the app's folder (against the session's server, as its dev config
    names it) ends with the scripted model's answer; its workspace and store are in the app's
    ``.treadle/``, and nothing is written into the installed package."""
    host, _, port = temporal_address.rpartition(":")
    config = tmp_path / "temporal-dev.yaml"
    config.write_text(
        f"ip: {host}\nport: {port}\nui_port: {free_port()}\n"
        f"db_filename: {tmp_path / 'unused.sqlite'}\n"
    )
    before = files_of(installed.package)
    demo = run(installed, installed.bin("treadle"), "demo", "--dev-config", str(config))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "7. Result: done" in demo.stdout
    [workspace] = (installed.app / ".treadle" / "workspaces").glob("demo-*")
    assert (workspace / "notes.md").is_file()
    assert any((installed.app / ".treadle" / "store").rglob("*"))  # its worker's store
    assert files_of(installed.package) == before


def test_the_apps_tool_module_loads_beside_its_own_activities(installed: Installed) -> None:
    """The app's ``activities`` package is the app's own (nothing of Treadle is named so), and
    its tool module imports ``Tool`` from ``treadle``; ``treadle worker --tools`` finds it from
    the app's folder (it stops only at the unreachable server, after loading the tools)."""
    loaded = run(
        installed,
        installed.bin("python"),
        "-c",
        "from activities.tools import TOOLS; print(TOOLS[0].name, type(TOOLS[0]).__module__)",
    )
    assert loaded.stdout.split() == ["word_count", "treadle.activities.tools.custom"], loaded.stderr
    for module, refusal in (
        ("activities.tools", "cannot reach Temporal at 127.0.0.1:1"),
        ("activities.nowhere", "--tools activities.nowhere: cannot be imported"),
    ):
        worker = run(
            installed, installed.bin("treadle"), "worker", "--tools", module,
            "--address", "127.0.0.1:1",
        )  # fmt: skip
        assert worker.returncode == 2, worker.stdout + worker.stderr
        assert refusal in worker.stderr, worker.stderr


def test_the_apps_plugin_worker_completes_a_run(
    installed: Installed, temporal_address: str
) -> None:
    """The app's ``worker.py`` (its workflow, its activity and ``TreadlePlugin`` with its tool)
    and ``starter.py``, run as docs/embedding.md runs them: the run writes after its approval
    from Python, calls the app's tool and answers; the app's own workflow answers too."""
    before = files_of(installed.package)
    model_argv = [installed.bin("treadle"), "scripted-model", "--script", "script.json"]
    with serving(installed, [*model_argv, "--port", "0"], fresh(), "listening on") as (_, line):
        url = line.split("listening on ")[1].split()[0]
        worker_env = fresh(TEMPORAL_ADDRESS=temporal_address, OPENAI_BASE_URL=url)
        with serving(installed, [installed.bin("python"), "worker.py"], worker_env, "polling"):
            started = run(
                installed,
                installed.bin("python"),
                "starter.py",
                env=fresh(TEMPORAL_ADDRESS=temporal_address),
                timeout=180,
            )
    assert started.returncode == 0, started.stdout + started.stderr
    lines = started.stdout.splitlines()
    assert lines[1].startswith("Approving write_file"), started.stdout
    assert lines[2:] == [
        "done: I wrote note.md after your approval; it has 6 words.",
        "Hello, Ada",
    ]
    note = installed.app / "workspace" / "note.md"
    assert note.read_text() == "Durable agents finish what they start.\n"
    assert any((installed.app / ".treadle" / "store").rglob("*"))
    assert files_of(installed.package) == before
