"""The HTTP side of the scripted model: a stdlib ``ThreadingHTTPServer`` and its handler, which
read a request, ask the `ScriptedModelServer` for the answer and write it to the wire.

It stays on ``http.server`` on purpose, not on the project's web framework: it is a test
double whose job is to send exact raw bytes and a misbehaving provider's quirks (a body that
breaks the protocol, a chunked stream that stops without its last chunk, a connection closed
mid-answer, events paced one HTTP chunk at a time), which a framework would tidy away.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import uuid
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from treadle.scripted_model import openai_chat
from treadle.scripted_model.replies import Reply, Stream

if TYPE_CHECKING:
    from treadle.scripted_model.server import ScriptedModelServer

_JSON = "application/json"


class HTTPServer(ThreadingHTTPServer):
    """Serves each connection on a daemon thread and can hang them all up when it stops."""

    daemon_threads = True
    request_queue_size = 128  # socketserver's default of 5 resets bursts of parallel workers

    def __init__(self, address: tuple[str, int], app: ScriptedModelServer) -> None:
        self.app = app
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(conn)

    def drop_connections(self) -> None:
        # Keep-alive handler threads block reading the next request; closing their sockets
        # for reading lets server_close() join them instead of waiting for the client.
        with self._connections_lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError) or self.stopping.is_set():
            return  # a client that went away (or a server stopping) is not worth a traceback
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One connection: each request's answer from the app, written as the wire should see it."""

    protocol_version = "HTTP/1.1"  # keep-alive, like the real API behind a connection pool
    # Headers and body go out in separate writes; with Nagle on, the body waits for the
    # client's delayed ACK (~40 ms a response on Linux), which would dominate every benchmark.
    disable_nagle_algorithm = True
    server_version = "treadle-scripted-model"
    sys_version = ""
    server: HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.app.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._respond(self.server.app._handle("GET", self._path(), self._headers(), b""))

    def do_POST(self) -> None:
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            self._respond(openai_chat.error_reply(400, "Could not read the request body."))
            return
        self._respond(self.server.app._handle("POST", self._path(), self._headers(), body))

    def _invalid_url(self) -> None:
        self.close_connection = True  # any body is left unread
        self._respond(openai_chat.error_reply(404, f"Invalid URL ({self.command} {self._path()})"))

    do_PUT = do_DELETE = do_PATCH = _invalid_url

    def _path(self) -> str:
        return urlsplit(self.path).path

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline().strip():  # trailers
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _respond(self, reply: Reply | Stream | None) -> None:
        if reply is None:  # the server is stopping mid-delay: hang up without an answer
            self.close_connection = True
            return
        if isinstance(reply, Stream):
            self._stream(reply)
            return
        try:
            self._send_head(reply.status, reply.headers)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        except OSError:
            self.close_connection = True  # the client hung up (e.g. a worker killed mid-call)

    def _send_head(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        self.send_response(status)
        extra = {name.lower() for name, _ in headers}
        if "content-type" not in extra:
            self.send_header("Content-Type", _JSON)
        request_id = f"req_{uuid.uuid4().hex}"
        for name in ("x-request-id", "request-id"):  # OpenAI's and Anthropic's names
            if name not in extra:
                self.send_header(name, request_id)
        for name, value in headers:
            self.send_header(name, value)

    def _stream(self, reply: Stream) -> None:
        """Each event as one HTTP chunk, written as soon as it is due (the socket is unbuffered
        and Nagle is off, so the client reads it at once)."""
        try:
            self._send_head(
                200,
                (
                    ("Content-Type", "text/event-stream; charset=utf-8"),
                    ("Cache-Control", "no-cache"),
                ),
            )
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index, frame in enumerate(reply.events):
                if index and reply.delay and self.server.stopping.wait(reply.delay):
                    self.close_connection = True  # stopping: hang up mid-stream
                    return
                self.wfile.write(b"%X\r\n%b\r\n" % (len(frame), frame))
            if reply.cut:
                # No last chunk: the client sees the body end early (an incomplete chunked read).
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
