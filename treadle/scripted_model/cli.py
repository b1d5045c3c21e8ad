"""``python -m treadle.scripted_model``: serve a script file until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from treadle.scripted_model.script import ScriptError, load_script
from treadle.scripted_model.server import ScriptedModelServer


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Serve a script until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Serve scripted OpenAI chat completions and Anthropic messages."
    )
    parser.add_argument("--script", required=True, type=Path, help="JSON script file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--api-key", default=None, help="require this key (bearer token or x-api-key)"
    )
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    parser.add_argument(
        "--no-streaming",
        dest="streaming",
        action="store_false",
        help="refuse streaming requests with HTTP 400, as a server that cannot stream does",
    )
    args = parser.parse_args(argv)

    try:
        script = load_script(args.script)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = ScriptedModelServer(
        script,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        verbose=args.verbose,
        streaming=args.streaming,
    )
    try:
        server.start()
    except OSError as exc:
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1

    done = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    models = ", ".join(server.models)
    print(f"scripted model server listening on {server.base_url} (models: {models})", flush=True)
    try:
        while not done.wait(0.5):
            pass
    finally:
        server.stop()
    return 0
