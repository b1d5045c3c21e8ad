"""Helpers for tests that run worker.py and starter.py as real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "worker.py"),
        "--address",
        address,
        "--task-queue",
        task_queue,
        "--log-level",
        "WARNING",
        *extra_args,
        cwd=ROOT,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    worker = WorkerProcess(process, [])
    assert process.stdout is not None
    while True:
        raw = await asyncio.wait_for(process.stdout.readline(), 60)
        if not raw:
            raise AssertionError("worker.py exited early:\n" + "\n".join(worker.output))
        line = raw.decode().rstrip()
        worker.output.append(line)
        if "orker polling task queue" in line:  # "Worker polling", "Tools-only worker polling"
            return worker


async def run_cli(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``starter.py`` with arguments; returns the completed process (text output)."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(ROOT / "starter.py"), *args],
        cwd=ROOT,
        env=dict(env) if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
