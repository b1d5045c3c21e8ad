"""Helpers for tests that run worker.py and starter.py as real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

ROOT = Path(__file__).resolve().parents[2]


def server_address(client: Client) -> str:
    """The Temporal address ``client`` reached, for a process to reach it too."""
    return client.service_client.config.target_host


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


FRESH_SHELL = {"HOME": os.environ.get("HOME", "/"), "PATH": "/usr/bin:/bin"}
"""What a new terminal has before anyone activates the virtualenv: no venv on PATH, no
TEMPORAL_* or model settings."""
DATA_ENV = ("TREADLE_HOME", "TREADLE_STORE")
"""Where the suite keeps Treadle's data directory and store (``tests/conftest.py``)."""


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment minus Temporal and model settings, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "OPENAI_", "ANTHROPIC_", "OLLAMA_"))
    }
    env.update(extra)
    return env


@dataclass
class WorkerProcess:
    process: asyncio.subprocess.Process
    output: list[str]

    @property
    def pid(self) -> int:
        return self.process.pid

    async def kill(self) -> None:
        """SIGKILL: the worker dies without a chance to hand anything back."""
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def terminate(self, timeout: float = 60) -> int:
        """SIGTERM and wait for the graceful shutdown to finish; returns the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self._drain(), timeout)

    async def _drain(self) -> int:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.output.append(line.decode().rstrip())
        return await self.process.wait()


async def start_worker(
    address: str, task_queue: str, env: Mapping[str, str], *extra_args: str
) -> WorkerProcess:
    """Start ``worker.py`` and wait until it polls its task queue."""
    argv = [str(ROOT / "worker.py"), "--address", address, "--task-queue", task_queue]
    return await start_python(
        [*argv, "--log-level", "WARNING", *extra_args],
        env,
        # "Worker polling ...", "Tools-only worker polling ..."
        ready=lambda line: "orker polling task queue" in line,
        what="worker.py",
    )


async def start_python(
    argv: Sequence[str], env: Mapping[str, str], *, ready: Callable[[str], bool], what: str
) -> WorkerProcess:
    """Start ``python ARGV`` in the repository and wait for the output line ``ready`` accepts
    (a worker that polls); a process that exits first fails the test with its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        cwd=ROOT,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    worker = WorkerProcess(process, [])
    assert process.stdout is not None
    # A whole deadline, not one per line: a process that keeps printing without ever becoming
    # ready fails the test with its output instead of holding it.
    deadline = asyncio.get_running_loop().time() + 180
    while True:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            process.kill()
            raise AssertionError(f"{what} never became ready:\n" + "\n".join(worker.output[-50:]))
        raw = await asyncio.wait_for(process.stdout.readline(), min(60, left))
        if not raw:
            raise AssertionError(f"{what} exited early:\n" + "\n".join(worker.output))
        worker.output.append(raw.decode().rstrip())
        if ready(worker.output[-1]):
            return worker


async def run_cli(
    *args: str, env: Mapping[str, str] | None = None, program: str = "starter.py"
) -> subprocess.CompletedProcess[str]:
    """Run ``starter.py`` (or ``worker.py``) with arguments; returns the completed process
    (text output)."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(ROOT / program), *args],
        cwd=ROOT,
        env=dict(env) if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def start_service(
    *args: str, env: Mapping[str, str] | None = None, stderr: int = asyncio.subprocess.PIPE
) -> tuple[asyncio.subprocess.Process, str]:
    """``starter.py`` with arguments running as a service (stdout piped), and the first line it
    prints: where it listens. The caller stops it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "starter.py"),
        *args,
        cwd=ROOT,
        env=dict(env) if env is not None else clean_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )
    try:
        assert process.stdout is not None
        return process, (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
    except BaseException:
        process.kill()
        await process.wait()
        raise


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """A command that refused its input as commands do: exit code 2 and exactly one line on
    stderr, ``error: ...``; returns that line."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def serve_command(module: str, arguments: int) -> str:
    """``python -c`` code that runs ``module.serve(...)`` with the command line's first
    ``arguments`` arguments: a test module's own worker, started as a process it can kill."""
    args = ", ".join(f"sys.argv[{i}]" for i in range(1, arguments + 1))
    return f"import asyncio, sys; from {module} import serve; asyncio.run(serve({args}))"


async def poll_until_killed(worker: Worker) -> None:
    """Run ``worker`` in this process until the test kills it, saying ``Worker polling`` once
    it polls (what ``start_python`` waits for)."""
    async with worker:
        print("Worker polling", flush=True)
        await asyncio.Event().wait()
