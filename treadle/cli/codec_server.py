"""`starter.py codec-server`: decrypts payloads for the Temporal Web UI and CLI.

    python starter.py codec-server [--port 8888] [--origin http://127.0.0.1:8233]

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
import asyncio
import json
import logging
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from treadle.cli.exits import UsageError
from treadle.codec import ENV_VAR, EncryptionError, Keyring

__all__ = ["DEFAULT_ORIGIN", "DEFAULT_PORT", "CodecServer", "register"]

log = logging.getLogger("treadle.codec_server")

DEFAULT_PORT = 8888
DEFAULT_ORIGIN = "http://127.0.0.1:8233"
"""The dev server's Web UI (``ui_port`` in temporal-dev.yaml)."""
HOST = "127.0.0.1"
MAX_BODY_BYTES = 16 * 1024 * 1024
"""A history event's payloads, base64-encoded, stay well below this (Temporal caps a payload at
2 MB by default)."""


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
    try:
        server = CodecServer(keyring, origin, args.port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {HOST}:{args.port}: {exc.strerror}") from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    thread = threading.Thread(target=server.serve_forever, name="codec-server", daemon=True)
    thread.start()
    print(
        f"Codec server on {server.url} for {origin} (keys: {', '.join(keyring.key_ids)}; "
        f"encrypting with {keyring.primary_id}); Ctrl-C to stop",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()
    print("Codec server stopped.", flush=True)
    return 0


def _origin(text: str) -> str:
    url = urlsplit(text)
    if url.scheme not in ("http", "https") or not url.netloc or url.path not in ("", "/"):
        raise UsageError(f"--origin {text!r} is not an origin like {DEFAULT_ORIGIN}")
    return f"{url.scheme}://{url.netloc}"


class CodecServer(ThreadingHTTPServer):
    """The HTTP server, one thread per connection; ``serve_forever`` in a thread of its own."""

    daemon_threads = True

    def __init__(self, keyring: Keyring, origin: str, port: int) -> None:
        self.keyring = keyring
        self.origin = origin
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: CodecServer

    def do_OPTIONS(self) -> None:
        """The browser's CORS preflight before each POST."""
        if self._origin_refused():
            return
        self._send(204, None)

    def do_POST(self) -> None:
        if self._origin_refused():
            return
        path = urlsplit(self.path).path
        if path not in ("/encode", "/decode"):
            self._send(404, {"error": f"no {path}; POST /encode or /decode"})
            return
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._send(411, {"error": "send the body with a Content-Length"})
            return
        if not 0 <= length <= MAX_BODY_BYTES:
            self._send(413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"})
            return
        body = self.rfile.read(length)
        try:
            payloads = json_format.Parse(body, Payloads())
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            self._send(400, {"error": f"not a Payloads JSON body: {_one_line(str(exc))}"})
            return
        keyring = self.server.keyring
        convert = keyring.encrypt_payload if path == "/encode" else keyring.decrypt_payload
        try:
            converted = Payloads(payloads=[convert(p) for p in payloads.payloads])
        except EncryptionError as exc:
            self._send(400, {"error": str(exc)})
            return
        self._send(200, json_format.MessageToDict(converted))

    def _origin_refused(self) -> bool:
        """A browser request from another origin than the Web UI's is refused (403)."""
        origin = self.headers.get("Origin")
        if origin is None or origin == self.server.origin:
            return False
        self._send(403, {"error": f"origin {origin} is not allowed; see --origin"})
        return True

    def _send(self, status: int, body: dict[str, Any] | None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Access-Control-Allow-Origin", self.server.origin)
        self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "content-type, x-namespace")
        self.send_header("Vary", "Origin")
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        # http.server writes every request to stderr; a log event instead, off unless configured.
        log.debug("codec_server.request", extra={"codec_server.line": format % args})


def _one_line(text: str) -> str:
    return " ".join(text.split())
