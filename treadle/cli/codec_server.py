"""`treadle codec-server`: decrypts payloads for the Temporal Web UI and CLI.

    treadle codec-server [--port 8888] [--origin http://127.0.0.1:8233]

Temporal's codec server protocol: ``POST /encode`` and ``POST /decode`` take and return
``{"payloads": [{"metadata": {name: base64}, "data": base64}]}``. The keys come from
``TREADLE_ENCRYPTION_KEYS``, as for workers and clients.

It listens on loopback only, and answers the Web UI's origin (``--origin``) with CORS headers; a
browser request from any other origin is refused (403), so a web page the user visits cannot
have it decrypt. Anything on this machine that can reach the port can, which is why it is
loopback only: whoever runs it is trusted with the keys anyway.

Point the dev server's Web UI at it with ``ui_codec_endpoint`` in temporal-dev.yaml, or
``temporal workflow show --codec-endpoint http://127.0.0.1:8888``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any
from urllib.parse import urlsplit

from treadle.cli.exits import UsageError
from treadle.cli.serving import listening, serve_until_interrupted
from treadle.codec import ENV_VAR, EncryptionError, Keyring
from treadle.web import serve
from treadle.web.codec import codec_app

__all__ = ["DEFAULT_ORIGIN", "DEFAULT_PORT", "register"]

DEFAULT_PORT = 8888
DEFAULT_ORIGIN = "http://127.0.0.1:8233"
"""The dev server's Web UI (``ui_port`` in temporal-dev.yaml)."""
HOST = serve.LOOPBACK


def register(subparsers: Any) -> None:
    """Add the `codec-server` command; it needs no Temporal connection (sets `standalone`)."""
    p = subparsers.add_parser(
        "codec-server", help="decrypt payloads for the Web UI (needs TREADLE_ENCRYPTION_KEYS)"
    )
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"loopback port (default {DEFAULT_PORT}; 0: any free port)",
    )
    p.add_argument(
        "--origin",
        default=DEFAULT_ORIGIN,
        help=f"the Web UI's origin, allowed by CORS (default {DEFAULT_ORIGIN})",
    )
    p.set_defaults(standalone=cmd_codec_server)


async def cmd_codec_server(args: argparse.Namespace) -> int:
    origin = _origin(args.origin)
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port from 0 to 65535")
    try:
        keyring = Keyring.from_env(os.environ)
    except EncryptionError as exc:
        raise UsageError(str(exc)) from exc
    if keyring is None:
        raise UsageError(f"{ENV_VAR} is not set; give the codec server the keys the workers use")
    served = await listening(
        serve.start(codec_app(keyring, origin), HOST, args.port), HOST, args.port
    )
    return await serve_until_interrupted(
        f"Codec server on {served.url} for {origin} (keys: {', '.join(keyring.key_ids)}; "
        f"encrypting with {keyring.primary_id}); Ctrl-C to stop",
        served.stop,
        "Codec server stopped.",
    )


def _origin(text: str) -> str:
    url = urlsplit(text)
    if url.scheme not in ("http", "https") or not url.netloc or url.path not in ("", "/"):
        raise UsageError(f"--origin {text!r} is not an origin like {DEFAULT_ORIGIN}")
    return f"{url.scheme}://{url.netloc}"
