"""A scripted model server: a real local HTTP server speaking OpenAI and Anthropic protocols.

The agent's model activity talks to it over HTTP exactly as it talks to OpenAI
(``POST /v1/chat/completions``) or Anthropic (``POST /v1/messages``), so the demo and the test suite
exercise the real client, timeouts, retries and error translation. Answers come from a script
instead of a model, and one script serves both protocols::

    {"models": {"demo": [
        {"content": "I'll look first.",
         "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "Done."}
    ]}}

Which turn answers a request is decided by the request alone: the number of assistant messages in
``messages``. Retries and concurrent conversations therefore get the same answer; past the end of a
script the last turn repeats. A model added with ``add_model(..., order="arrival")`` instead takes
its turns in the order requests arrive (each answered request the next turn), for runs whose
conversation is compacted on the way and so cannot count its own turns. A turn may fail its first
attempts (``errors``), answer late (``delay``), or send a raw body (``raw``) to simulate a broken
provider; a failing attempt may echo the request's API key back (``echo_key``), as a
misconfigured proxy does, so tests can check it is redacted. A turn's ``confidence`` becomes
OpenAI log-probabilities when the request asks for them (Anthropic has none).

A request with ``"stream": true`` is answered with server-sent events, in the protocol's own
shape, over ``Transfer-Encoding: chunked``: OpenAI ``chat.completion.chunk`` events (a role delta,
the text in several content deltas, each tool call as a delta naming its index, id and name and
then its arguments in fragments, a last delta with ``finish_reason``; with
``stream_options.include_usage`` a chunk with empty ``choices`` and the ``usage``; then
``data: [DONE]``), or Anthropic's ``message_start``, ``content_block_start`` / ``_delta``
(``text_delta``, ``input_json_delta``) / ``_stop``, ``message_delta`` (stop reason, usage) and
``message_stop``. The streamed reply assembles into exactly the non-streaming one. A turn's
``chunk_delay`` paces the chunks, ``chunk_chars`` sizes them (one word each by default), and
``cut_after`` hangs up mid-stream on the attempts after its ``errors`` (``cut_attempts`` of them):
a stream cut short, which the next attempt survives. A scripted error marked ``in_stream`` comes
as an error event inside a 200 stream (after the first content chunk) instead of an error status.

A server that cannot stream is simulated too: with ``ScriptedModelServer(..., streaming=False)``
(``--no-streaming`` on the command line) every streaming request, and with a turn's
``reject_stream`` the streaming requests that turn answers, get the 400 a real server sends for
an argument it does not know. OpenAI's names the first one: ``stream_options`` when the request
has it, else ``stream``::

    {"error": {"message": "Unrecognized request argument supplied: stream_options",
               "type": "invalid_request_error", "param": "stream_options", "code": null}}

Anthropic's is ``{"type": "error", "error": {"type": "invalid_request_error", "message":
"stream: Extra inputs are not permitted"}}``. The same request without ``stream`` is answered as
usual; the refusal is no attempt of the turn (its ``errors`` and ``cut_after`` count the
requests it answers), and the refused request is recorded like any other.

Run it on its own with ``python -m treadle.scripted_model --script treadle/demo_script.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, model_validator

from workflows.base import Frozen

__all__ = [
    "DEMO_SCRIPT",
    "ECHO_PREFIX",
    "KeyEcho",
    "RecordedRequest",
    "Script",
    "ScriptError",
    "ScriptedModelServer",
    "Turn",
    "TurnError",
    "TurnToolCall",
    "TurnUsage",
    "echoed_key",
    "load_script",
    "main",
    "parse_script",
]

DEMO_SCRIPT = Path(__file__).with_name("demo_script.json")
"""The script ``starter.py demo`` plays: a write that waits for approval, then an answer."""

_JSON = "application/json"

_Api = Literal["openai", "anthropic"]

KeyEcho = Literal["exact", "lower", "upper", "prefix", "split"]
"""How an error echoes the request's key: as sent, lower-cased, upper-cased, its first
``ECHO_PREFIX`` characters, or cut in three pieces by a quote and whitespace."""
ECHO_PREFIX = 20


def echoed_key(key: str, form: KeyEcho) -> str:
    """``key`` as an error of the given ``echo_key`` form shows it."""
    if form == "lower":
        return key.lower()
    if form == "upper":
        return key.upper()
    if form == "prefix":
        return key[:ECHO_PREFIX]
    if form == "split":
        third = max(1, len(key) // 3)
        return f'{key[:third]}" "{key[third : 2 * third]}\n\t{key[2 * third :]}'
    return key


class ScriptError(ValueError):
    """A script that cannot be used: missing file, invalid JSON or bad shape (one-line message)."""


class TurnToolCall(Frozen):
    """One native tool call the scripted model makes."""

    name: str = Field(min_length=1)
    """Tool (function) name."""
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """An object is JSON-encoded; a string is sent verbatim, so tests can send malformed JSON.

    Anthropic's ``input`` is an object, so there a string must decode to one (else a 500).
    """
    id: str | None = None
    """Tool call id; by default ``call_t<turn>_<i>`` (OpenAI) or ``toolu_t<turn>_<i>``."""


class TurnError(Frozen):
    """A bad response returned instead of the turn's answer on one attempt.

    Usually an error status; a 200 with a ``body`` is a malformed success (a body that breaks
    the protocol), which a client should treat as a failed attempt too.
    """

    status: int = Field(ge=200, le=599)
    """HTTP status code."""
    body: Any = None
    """A string is sent verbatim, other JSON values encoded; ``None`` gives the protocol's error."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers, e.g. ``{"Retry-After": "1"}``."""
    echo_key: tuple[KeyEcho, ...] = ()
    """Echo the API key the request carried (bearer token or ``x-api-key``) in these forms,
    appended to the error's message: ``error.message`` of the protocol's default body or of a
    ``body`` that has one, or the end of a string ``body``; ``(key: ...)``, forms separated by
    ``", "``. A request without a key gets no echo."""
    in_stream: bool = False
    """On a streaming request: answer 200 and send the turn's first chunks, then this error as an
    event of the stream (OpenAI: a ``data: {"error": ...}`` chunk; Anthropic: ``event: error``),
    then end the stream. Its data is ``body`` when given (a string verbatim, so a test can send a
    malformed event), else the protocol's error body for ``status``. A non-streaming request gets
    the error status as usual."""

    @model_validator(mode="after")
    def _in_stream_error_says_what(self) -> Self:
        if self.in_stream and self.status < 400 and self.body is None:
            raise ValueError("an in_stream error below status 400 needs a body (its event data)")
        return self


class TurnUsage(Frozen):
    """Token usage reported for a turn."""

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    """OpenAI ``usage.prompt_tokens_details.cached_tokens``; Anthropic ``cache_read_input_tokens``.

    Anthropic's ``input_tokens`` counts uncached input only: ``prompt_tokens - cached_tokens``.
    """

    @model_validator(mode="after")
    def _cached_within_prompt(self) -> Self:
        if self.cached_tokens > self.prompt_tokens:
            raise ValueError("cached_tokens cannot exceed prompt_tokens")
        return self


class Turn(Frozen):
    """One scripted assistant turn."""

    content: str | None = None
    """Assistant text; alone it is a final answer (finish_reason "stop")."""
    tool_calls: list[TurnToolCall] = Field(default_factory=list)
    """Native tool calls (finish_reason "tool_calls"), made in parallel when more than one."""
    usage: TurnUsage | None = None
    """Reported usage; by default estimated at four characters per token."""
    on_rejection: str | None = None
    """When a human rejects one of this turn's tool calls, the next request is answered with
    this text (a final answer) instead of the next turn; ``{reason}`` becomes the human's reason."""
    delay: float = Field(default=0.0, ge=0)
    """Seconds to wait before answering (every attempt, errors included)."""
    errors: list[TurnError] = Field(default_factory=list)
    """The first ``len(errors)`` attempts of this turn in a conversation get these, in order."""
    raw: str | None = None
    """Sent verbatim as the response body instead of a chat completion."""
    raw_status: int | None = Field(default=None, ge=100, le=599)
    """Status for ``raw`` (default 200)."""
    confidence: float | None = Field(default=None, gt=0, le=1)
    """OpenAI only: with ``"logprobs": true`` in the request, every token's logprob is its log."""
    chunk_delay: float = Field(default=0.0, ge=0)
    """Streaming only: seconds between two chunks of the stream."""
    chunk_chars: int | None = Field(default=None, ge=1)
    """Streaming only: characters of text (or of a tool call's arguments) per chunk; by default
    one word per chunk, with the whitespace before it."""
    cut_after: int | None = Field(default=None, ge=0)
    """Streaming only: on the ``cut_attempts`` attempts after the turn's ``errors``, close the
    connection after this many content chunks (text or tool call fragments), without ending the
    stream; with fewer content chunks than that, just before the stream's last event. Later
    attempts get the whole stream. Attempts count as for ``errors``."""
    cut_attempts: int = Field(default=1, ge=1)
    """How many attempts ``cut_after`` cuts short."""
    reject_stream: bool = False
    """Refuse a streaming request for this turn with the 400 of a server that cannot stream
    (see the module docstring); a request without ``stream`` gets the turn as usual."""

    @model_validator(mode="after")
    def _one_kind_of_answer(self) -> Self:
        if "cut_attempts" in self.model_fields_set and self.cut_after is None:
            raise ValueError("cut_attempts needs cut_after")
        if self.raw is not None:
            if self.content is not None or self.tool_calls or self.confidence is not None:
                raise ValueError(
                    "raw replaces the whole answer; give it without content/tool_calls/confidence"
                )
            if self.cut_after is not None or self.chunk_chars is not None or self.chunk_delay:
                raise ValueError(
                    "raw is sent whole, never streamed; give it without "
                    "cut_after/chunk_chars/chunk_delay"
                )
        elif self.raw_status is not None:
            raise ValueError("raw_status needs raw")
        elif self.content is None and not self.tool_calls:
            raise ValueError("a turn needs content, tool_calls or raw")
        if self.reject_stream and (
            self.cut_after is not None or self.chunk_chars is not None or self.chunk_delay
        ):
            raise ValueError(
                "reject_stream refuses every streaming request; give it without "
                "cut_after/chunk_chars/chunk_delay"
            )
        return self


class Script(Frozen):
    """Scripted turns per model name (the request's ``model`` field)."""

    models: dict[Annotated[str, Field(min_length=1)], Annotated[list[Turn], Field(min_length=1)]]


@dataclass(frozen=True)
class RecordedRequest:
    """A model request the server received, in either protocol."""

    model: str
    body: dict[str, Any]
    headers: dict[str, str]
    """Header names are lowercase."""
    protocol: Literal["openai", "anthropic"] = "openai"
    """``"openai"`` for ``/v1/chat/completions``, ``"anthropic"`` for ``/v1/messages``."""


def _describe(exc: ValidationError) -> str:
    """Turn a pydantic error into one line naming the model and turn index."""
    errors = exc.errors()
    first = errors[0]
    loc = list(first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    where: list[str] = []
    if loc[:1] == ["models"] and len(loc) >= 2:
        where.append(f"model {loc[1]!r}")
        if len(loc) >= 3 and isinstance(loc[2], int):
            where.append(f"turn {loc[2]}")
            loc = loc[3:]
        else:
            loc = loc[2:]
    field = ".".join(str(part) for part in loc)
    text = " ".join(where)
    if field:
        text = f"{text} {field}" if text else field
    line = f"{text}: {msg}" if text else msg
    if len(errors) > 1:
        line += f" (+{len(errors) - 1} more)"
    return " ".join(line.split())


def parse_script(data: Script | Mapping[str, Any]) -> Script:
    """Validate script data, raising `ScriptError` with a one-line reason."""
    if isinstance(data, Script):
        return data
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ScriptError(f"invalid script: {_describe(exc)}") from exc


def load_script(path: str | Path) -> Script:
    """Read and validate a JSON script file, raising `ScriptError` with a one-line reason."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ScriptError(f"{path}: script file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"{path}: cannot read script: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScriptError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    if not isinstance(data, dict):
        raise ScriptError(f"{path}: a script is a JSON object with a 'models' key")
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ScriptError(f"{path}: {_describe(exc)}") from exc


def _openai_error(
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# What OpenAI says for each status when a scripted error gives no body.
_DEFAULT_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to access this model.", "invalid_request_error", None),
    404: ("The requested resource was not found.", "invalid_request_error", None),
    429: (
        "Rate limit reached for requests. Please try again later.",
        "requests",
        "rate_limit_exceeded",
    ),
    500: (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


def _default_error_body(status: int) -> dict[str, Any]:
    if status in _DEFAULT_ERRORS:
        message, type_, code = _DEFAULT_ERRORS[status]
    elif status >= 500:
        message, type_, code = "The server had an error.", "server_error", None
    else:
        message, type_, code = "Invalid request.", "invalid_request_error", None
    return _openai_error(message, type_, code)


# Anthropic's error type and message for each status when a scripted error gives no body.
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: (
        "rate_limit_error",
        "Number of requests has exceeded your rate limit. Please try again later.",
    ),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}


def _anthropic_error_body(status: int, message: str | None = None) -> dict[str, Any]:
    if status in _ANTHROPIC_ERRORS:
        type_, default = _ANTHROPIC_ERRORS[status]
    elif status >= 500:
        type_, default = _ANTHROPIC_ERRORS[500]
    else:
        type_, default = _ANTHROPIC_ERRORS[400]
    return {"type": "error", "error": {"type": type_, "message": message or default}}


def _tokens(chars: int) -> int:
    return max(1, chars // 4)


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Event:
    """One server-sent event of a streamed answer, framed for the wire."""

    frame: bytes
    content: bool = False
    """It carries text or a tool call fragment (what ``cut_after`` counts)."""


@dataclass(frozen=True)
class _Stream:
    """A 200 answer sent as server-sent events, one HTTP chunk each."""

    events: tuple[bytes, ...]
    delay: float = 0.0
    """Seconds between two events."""
    cut: bool = False
    """Hang up after the events, without the chunked body's last chunk."""


def _sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: ``data`` as JSON (a string verbatim, one data line per line)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return (head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n").encode()


def _pieces(text: str, size: int | None) -> list[str]:
    """``text`` in the pieces a stream sends: ``size`` characters each, or one word each (with
    the whitespace before it). They join back into ``text``; no text, no pieces."""
    if size is not None:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return re.findall(r"\s*\S+|\s+", text)


def _spread(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` in ``parts`` consecutive runs, as even as can be (each may be empty)."""
    return [items[i * len(items) // parts : (i + 1) * len(items) // parts] for i in range(parts)]


def _json_reply(status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> _Reply:
    return _Reply(status, json.dumps(payload).encode(), tuple(headers))


def _anthropic_error(status: int, message: str | None = None) -> _Reply:
    return _json_reply(status, _anthropic_error_body(status, message))


class _HTTPServer(ThreadingHTTPServer):
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
    protocol_version = "HTTP/1.1"  # keep-alive, like the real API behind a connection pool
    # Headers and body go out in separate writes; with Nagle on, the body waits for the
    # client's delayed ACK (~40 ms a response on Linux), which would dominate every benchmark.
    disable_nagle_algorithm = True
    server_version = "treadle-scripted-model"
    sys_version = ""
    server: _HTTPServer

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
            self._respond(_json_reply(400, _openai_error("Could not read the request body.")))
            return
        self._respond(self.server.app._handle("POST", self._path(), self._headers(), body))

    def do_PUT(self) -> None:
        self._invalid_url()

    def do_DELETE(self) -> None:
        self._invalid_url()

    def do_PATCH(self) -> None:
        self._invalid_url()

    def _invalid_url(self) -> None:
        self.close_connection = True  # any body is left unread
        self._respond(
            _json_reply(404, _openai_error(f"Invalid URL ({self.command} {self._path()})"))
        )

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

    def _respond(self, reply: _Reply | _Stream | None) -> None:
        if reply is None:  # the server is stopping mid-delay: hang up without an answer
            self.close_connection = True
            return
        if isinstance(reply, _Stream):
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

    def _stream(self, reply: _Stream) -> None:
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


class ScriptedModelServer:
    """An OpenAI- and Anthropic-compatible server answering from a script, on a daemon thread."""

    def __init__(
        self,
        script: Script | Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        verbose: bool = False,
        streaming: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.api_key = api_key
        self.verbose = verbose
        self.streaming = streaming
        """``False``: refuse every streaming request, as a server that cannot stream does."""
        self._lock = threading.Lock()
        self._models: dict[str, list[Turn]] = {}
        self._served: dict[str, int] = {}
        """Answered requests per model taking its turns in arrival order."""
        self._requests: list[RecordedRequest] = []
        self._attempts: dict[tuple[_Api, str, str, int], int] = {}
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        if script is not None:
            self._models.update(parse_script(script).models)

    # Lifecycle

    def start(self) -> None:
        """Bind and serve on a daemon thread; with port 0 the OS picks a free port."""
        if self._httpd is not None:
            raise RuntimeError("scripted model server already started")
        httpd = _HTTPServer((self.host, self.port), self)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"scripted-model-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, hang up open connections and wait for handler threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._httpd = self._thread = None
        httpd.stopping.set()  # wakes handlers sleeping in a delay
        httpd.shutdown()
        httpd.drop_connections()
        httpd.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1``, for ``OPENAI_BASE_URL``; Anthropic is at ``/messages``."""
        if self._httpd is None:
            raise RuntimeError("scripted model server not started")
        return f"http://{self.host}:{self.port}/v1"

    # Script and records

    @property
    def models(self) -> list[str]:
        """Scripted model names, sorted."""
        with self._lock:
            return sorted(self._models)

    def add_model(
        self,
        name: str,
        turns: Iterable[Turn | Mapping[str, Any]],
        *,
        order: Literal["conversation", "arrival"] = "conversation",
    ) -> None:
        """Add or replace one model's turns (validated; `ScriptError` on a bad turn).

        ``order="conversation"`` picks a request's turn by the assistant messages it carries;
        ``"arrival"`` answers each request with the next turn, whatever its conversation.
        """
        script = parse_script({"models": {name: list(turns)}})
        with self._lock:
            self._models.update(script.models)
            if order == "arrival":
                self._served[name] = 0
            else:
                self._served.pop(name, None)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Model requests (both protocols) received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def requests_for(self, model: str) -> list[RecordedRequest]:
        """Recorded requests for one model, in arrival order."""
        return [request for request in self.requests if request.model == model]

    # Request handling (called on handler threads)

    def _handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> _Reply | _Stream | None:
        # Only Anthropic clients send anthropic-version, so it picks the shape of shared answers.
        anthropic = "anthropic-version" in headers
        if method == "GET" and path == "/v1/models":
            return self._list_models(headers, anthropic=anthropic)
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat_completions(headers, raw)
        if method == "POST" and path == "/v1/messages":
            return self._messages(headers, raw)
        if anthropic:
            return _anthropic_error(404, f"Not Found ({method} {path})")
        return _json_reply(404, _openai_error(f"Invalid URL ({method} {path})"))

    def _list_models(self, headers: dict[str, str], *, anthropic: bool) -> _Reply:
        if anthropic:
            if (denied := self._check_anthropic_auth(headers)) is not None:
                return denied
            names = self.models
            models = [
                {
                    "type": "model",
                    "id": name,
                    "display_name": name,
                    "created_at": "1970-01-01T00:00:00Z",
                }
                for name in names
            ]
            return _json_reply(
                200,
                {
                    "data": models,
                    "has_more": False,
                    "first_id": names[0] if names else None,
                    "last_id": names[-1] if names else None,
                },
            )
        if (denied := self._check_auth(headers)) is not None:
            return denied
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "treadle-scripted"}
            for name in self.models
        ]
        return _json_reply(200, {"object": "list", "data": data})

    def _check_auth(self, headers: dict[str, str]) -> _Reply | None:
        if self.api_key is None:
            return None
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip() == self.api_key:
            return None
        if not token.strip():
            message = "You didn't provide an API key. Provide it in the Authorization header."
        else:
            message = "Incorrect API key provided."  # never echo the key back
        return _json_reply(401, _openai_error(message, code="invalid_api_key"))

    def _check_anthropic_auth(self, headers: dict[str, str]) -> _Reply | None:
        if self.api_key is None or headers.get("x-api-key", "").strip() == self.api_key:
            return None
        return _anthropic_error(401, "invalid x-api-key")  # never echo the key back

    def _record(self, api: _Api, headers: dict[str, str], raw: bytes) -> Any:
        """Parse a request body and record it if it is a JSON object (even if later rejected)."""
        try:
            body: Any = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if isinstance(body, dict):
            model = body.get("model")
            record = RecordedRequest(
                model=model if isinstance(model, str) else "",
                body=body,
                headers=headers,
                protocol=api,
            )
            with self._lock:
                self._requests.append(record)
        return body

    def _chat_completions(self, headers: dict[str, str], raw: bytes) -> _Reply | _Stream | None:
        body = self._record("openai", headers, raw)
        if (denied := self._check_auth(headers)) is not None:
            return denied
        if not isinstance(body, dict):
            return _json_reply(
                400,
                _openai_error(
                    "We could not parse the JSON body of your request. "
                    "The body must be a JSON object."
                ),
            )
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return _json_reply(
                400, _openai_error("you must provide a model parameter", param="model")
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _json_reply(
                400,
                _openai_error(
                    "Missing required parameter: 'messages'.",
                    code="missing_required_parameter",
                    param="messages",
                ),
            )
        streaming = body.get("stream") is True
        options = body.get("stream_options")
        if options is not None and not streaming:
            return _json_reply(
                400,
                _openai_error(
                    "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                    param="stream_options",
                ),
            )
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        with self._lock:
            turns = self._models.get(model)
        if turns is None:
            return _json_reply(
                404,
                _openai_error(
                    f"The model `{model}` does not exist or you do not have access to it.",
                    code="model_not_found",
                ),
            )

        index = self._turn_index(
            model,
            sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant"),
        )
        if streaming and self._refuses_stream(turns, index):
            param = "stream_options" if "stream_options" in body else "stream"
            return _json_reply(
                400,
                _openai_error(f"Unrecognized request argument supplied: {param}", param=param),
            )
        first_user = next(
            (m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"),
            None,
        )
        conversation = json.dumps(first_user, sort_keys=True)
        turns = _after_rejection(turns, index, messages)

        def chunks(turn: Turn) -> list[_Event]:
            return _completion_chunks(_completion(model, index, turn, body), turn, include_usage)

        return self._play(
            "openai",
            headers,
            model,
            turns,
            index,
            conversation,
            lambda turn: _json_reply(200, _completion(model, index, turn, body)),
            chunks if streaming else None,
        )

    def _messages(self, headers: dict[str, str], raw: bytes) -> _Reply | _Stream | None:
        body = self._record("anthropic", headers, raw)
        if (denied := self._check_anthropic_auth(headers)) is not None:
            return denied
        if "anthropic-version" not in headers:
            return _anthropic_error(400, "anthropic-version: header is required")
        if not isinstance(body, dict):
            return _anthropic_error(400, "The request body is not a valid JSON object.")
        if (problem := _anthropic_request_problem(body)) is not None:
            return _anthropic_error(400, problem)
        model: str = body["model"]
        with self._lock:
            turns = self._models.get(model)
        if turns is None:
            return _anthropic_error(404, f"model: {model}")

        messages: list[dict[str, Any]] = body["messages"]
        index = self._turn_index(model, sum(1 for m in messages if m["role"] == "assistant"))
        position = min(index, len(turns) - 1)
        if body.get("stream") is True and self._refuses_stream(turns, index):
            return _anthropic_error(400, "stream: Extra inputs are not permitted")
        turns = _after_rejection(turns, index, messages)
        return self._play(
            "anthropic",
            headers,
            model,
            turns,
            index,
            _anthropic_conversation(messages),
            lambda turn: _anthropic_reply(model, index, position, turn, body),
            (
                (lambda turn: _message_events(model, index, position, turn, body))
                if body.get("stream") is True
                else None
            ),
        )

    def _play(
        self,
        api: _Api,
        headers: dict[str, str],
        model: str,
        turns: list[Turn],
        index: int,
        conversation: str,
        answer: Callable[[Turn], _Reply],
        stream: Callable[[Turn], list[_Event] | _Reply] | None = None,
    ) -> _Reply | _Stream | None:
        """Answer with turn `index` after its delay: a scripted error, its raw body or `answer`;
        a streaming request (`stream` given) gets the events `stream` makes instead, cut short or
        ending in an error event on the attempts the turn says."""
        turn = turns[min(index, len(turns) - 1)]
        attempt = self._next_attempt(api, model, conversation, index)
        if turn.delay and self._stopping(turn.delay):
            return None
        if attempt < len(turn.errors):
            error = turn.errors[attempt]
            if stream is None or not error.in_stream:
                return _error_reply(error, api, headers)
            events = [] if turn.raw is not None else stream(turn)
            if isinstance(events, _Reply):
                return events
            frames = [event.frame for event in _cut(events, 1)]
            return _Stream((*frames, _error_event(error, api, headers)), turn.chunk_delay)
        cut = attempt < len(turn.errors) + turn.cut_attempts
        if stream is not None and turn.cut_after is not None and cut:
            events = stream(turn)
            if isinstance(events, _Reply):
                return events
            frames = [event.frame for event in _cut(events, turn.cut_after)]
            return _Stream(tuple(frames), turn.chunk_delay, cut=True)
        with self._lock:
            if model in self._served:
                self._served[model] = index + 1
        if turn.raw is not None:
            return _Reply(turn.raw_status or 200, turn.raw.encode())
        if stream is None:
            return answer(turn)
        events = stream(turn)
        if isinstance(events, _Reply):
            return events
        return _Stream(tuple(event.frame for event in events), turn.chunk_delay)

    def _refuses_stream(self, turns: list[Turn], index: int) -> bool:
        """A streaming request for turn ``index`` gets a server's refusal to stream."""
        return not self.streaming or turns[min(index, len(turns) - 1)].reject_stream

    def _turn_index(self, model: str, assistant_messages: int) -> int:
        with self._lock:
            return self._served.get(model, assistant_messages)

    def _next_attempt(self, api: _Api, model: str, conversation: str, index: int) -> int:
        """Count attempts per (protocol, model, conversation, turn): retries see errors in order."""
        key = (api, model, conversation, index)
        with self._lock:
            attempt = self._attempts.get(key, 0)
            self._attempts[key] = attempt + 1
        return attempt

    def _stopping(self, delay: float) -> bool:
        httpd = self._httpd
        if httpd is None:
            return True
        return httpd.stopping.wait(delay)


def _error_content(error: TurnError, api: _Api, headers: Mapping[str, str]) -> Any:
    """What a scripted error says: its body or the protocol's, with any key echo."""
    content: Any = error.body
    if content is None:
        content = (
            _anthropic_error_body(error.status)
            if api == "anthropic"
            else _default_error_body(error.status)
        )
    key = _request_key(api, headers)
    if error.echo_key and key:
        content = _with_echo(
            content, " (key: " + ", ".join(echoed_key(key, f) for f in error.echo_key) + ")"
        )
    return content


def _error_reply(error: TurnError, api: _Api, headers: Mapping[str, str]) -> _Reply:
    content = _error_content(error, api, headers)
    body = content.encode() if isinstance(content, str) else json.dumps(content).encode()
    return _Reply(error.status, body, tuple(error.headers.items()))


def _error_event(error: TurnError, api: _Api, headers: Mapping[str, str]) -> bytes:
    """A scripted error as an event inside a stream: Anthropic names it ``error``; OpenAI sends
    the error object as a chunk's data."""
    return _sse(_error_content(error, api, headers), "error" if api == "anthropic" else None)


def _cut(events: list[_Event], contents: int) -> list[_Event]:
    """The events before the content event after the first ``contents`` ones; with no such
    event, every event but the last (the stream's end)."""
    seen = 0
    for position, event in enumerate(events):
        if event.content:
            if seen == contents:
                return events[:position]
            seen += 1
    return events[:-1]


def _request_key(api: _Api, headers: Mapping[str, str]) -> str:
    """The API key a request carried: Anthropic's ``x-api-key``, else the bearer token."""
    if api == "anthropic":
        return headers.get("x-api-key", "").strip()
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _with_echo(content: Any, text: str) -> Any:
    """``content`` (an error body) with ``text`` after its message, where it has one."""
    if isinstance(content, str):
        return content + text
    error = content.get("error") if isinstance(content, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return {**content, "error": {**error, "message": error["message"] + text}}
    return content


def _completion(model: str, index: int, turn: Turn, request: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.content, "refusal": None}
    completion_chars = len(turn.content or "")
    if turn.tool_calls:
        calls = []
        for i, call in enumerate(turn.tool_calls):
            arguments = (
                call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            )
            completion_chars += len(call.name) + len(arguments)
            calls.append(
                {
                    "id": call.id or f"call_t{index}_{i}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments},
                }
            )
        message["tool_calls"] = calls
    if turn.usage is not None:
        prompt, completion, cached = (
            turn.usage.prompt_tokens,
            turn.usage.completion_tokens,
            turn.usage.cached_tokens,
        )
    else:
        prompt_chars = len(json.dumps(request.get("messages"))) + len(
            json.dumps(request.get("tools", []))
        )
        prompt, completion, cached = _tokens(prompt_chars), _tokens(completion_chars), 0
    logprobs = (
        _logprobs(turn, turn.confidence)
        if turn.confidence is not None and request.get("logprobs") is True
        else None
    )
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": "tool_calls" if turn.tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "system_fingerprint": "fp_scripted",
    }


def _logprobs(turn: Turn, confidence: float) -> dict[str, Any]:
    """Every token gets ln(confidence), so exp of the mean logprob is the scripted confidence."""
    # Whitespace-led words, so the tokens join back into the text; a turn without text still
    # needs one entry, so its tool names stand in.
    tokens = re.findall(r"\s*\S+", turn.content or "")
    tokens = tokens or [call.name for call in turn.tool_calls] or [turn.content or ""]
    logprob = math.log(confidence)
    return {
        "content": [
            {"token": token, "logprob": logprob, "bytes": None, "top_logprobs": []}
            for token in tokens
        ]
    }


def _completion_chunks(completion: dict[str, Any], turn: Turn, include_usage: bool) -> list[_Event]:
    """``completion`` as OpenAI streams it: a role delta, the text in pieces, each tool call as
    a delta with its index, id and name and then its arguments in pieces, a delta with the
    finish reason, the usage (when asked for) in a chunk without choices, and ``[DONE]``.
    Log-probabilities, when there are any, are spread over the text chunks in order."""
    (choice,) = completion["choices"]
    message = choice["message"]
    head = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "system_fingerprint": completion["system_fingerprint"],
    }

    def chunk(
        delta: dict[str, Any],
        *,
        finish: str | None = None,
        logprobs: list[Any] | None = None,
        content: bool = False,
    ) -> _Event:
        body = head | {
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None
                    if logprobs is None
                    else {"content": logprobs, "refusal": None},
                    "finish_reason": finish,
                }
            ]
        }
        if include_usage:
            body["usage"] = None  # as OpenAI does: every chunk but the last has a null usage
        return _Event(_sse(body), content)

    texts = _pieces(message["content"] or "", turn.chunk_chars)
    entries: list[Any] | None = choice["logprobs"]["content"] if choice["logprobs"] else None
    shares: list[list[Any] | None] = (
        list(_spread(entries, len(texts))) if entries is not None and texts else [None] * len(texts)
    )
    role = {"role": "assistant", "content": None if message["content"] is None else ""}
    events = [chunk(role, logprobs=entries if entries is not None and not texts else None)]
    events += [
        chunk({"content": text}, logprobs=share, content=True)
        for text, share in zip(texts, shares, strict=True)
    ]
    for position, call in enumerate(message.get("tool_calls", [])):
        function = call["function"]
        first = {
            "index": position,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [first]}, content=True))
        events += [
            chunk(
                {"tool_calls": [{"index": position, "function": {"arguments": piece}}]},
                content=True,
            )
            for piece in _pieces(function["arguments"], turn.chunk_chars)
        ]
    events.append(chunk({}, finish=choice["finish_reason"]))
    if include_usage:
        events.append(_Event(_sse(head | {"choices": [], "usage": completion["usage"]})))
    events.append(_Event(_sse("[DONE]")))
    return events


def _anthropic_request_problem(body: dict[str, Any]) -> str | None:
    """What the Messages API would reject in this request, as its error message, or None."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "model: Field required"
    if "max_tokens" not in body:
        return "max_tokens: Field required"
    max_tokens = body["max_tokens"]
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Input should be a positive integer"
    system = body.get("system")
    if system is not None and not isinstance(system, str) and not _text_blocks(system):
        return "system: Input should be a string or a list of text blocks"
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 1
    ):
        return "temperature: Input should be a number between 0 and 1"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a list"
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                return f"tools.{i}.name: Field required"
            # Server tools (web search, ...) carry a "type" and no schema; custom tools need one.
            if tool.get("type", "custom") == "custom" and not isinstance(
                tool.get("input_schema"), dict
            ):
                return f"tools.{i}.input_schema: Field required"
    if "messages" not in body:
        return "messages: Field required"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return _conversation_problem(messages)


def _conversation_problem(messages: list[Any]) -> str | None:
    """Roles and content shapes, and tool_use blocks answered by tool_result blocks right after."""
    pending: list[str] = []  # tool_use ids of the previous (assistant) message
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be an object"
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if isinstance(content, str):
            blocks: list[dict[str, Any]] = []
        elif isinstance(content, list) and all(
            isinstance(block, dict) and isinstance(block.get("type"), str) for block in content
        ):
            blocks = content
        else:
            return f"messages.{i}.content: Input should be a string or a list of content blocks"
        results = [b.get("tool_use_id") for b in blocks if b["type"] == "tool_result"]
        for j, block in enumerate(blocks):
            if block["type"] == "tool_result" and block.get("tool_use_id") not in pending:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
        if missing := [id_ for id_ in pending if id_ not in results]:
            return (
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        pending = [
            str(block.get("id"))
            for block in blocks
            if role == "assistant" and block["type"] == "tool_use"
        ]
    return None


def _text_blocks(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        for block in value
    )


def _anthropic_conversation(messages: list[dict[str, Any]]) -> str:
    """The first user message's text (its first text block), which names a conversation."""
    for message in messages:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            return content
        for block in content:
            if block["type"] == "text" and isinstance(block.get("text"), str):
                return str(block["text"])
        return json.dumps(content, sort_keys=True)
    return ""


def _anthropic_reply(
    model: str, index: int, position: int, turn: Turn, request: dict[str, Any]
) -> _Reply:
    message = _anthropic_message(model, index, position, turn, request)
    return message if isinstance(message, _Reply) else _json_reply(200, message)


def _message_events(
    model: str, index: int, position: int, turn: Turn, request: dict[str, Any]
) -> list[_Event] | _Reply:
    """The message as Anthropic streams it: ``message_start`` (no content yet; usage with the
    input counts), a ``ping``, each block as ``content_block_start``, its ``text_delta`` or
    ``input_json_delta`` pieces and ``content_block_stop``, then ``message_delta`` (stop reason,
    output tokens) and ``message_stop``."""
    message = _anthropic_message(model, index, position, turn, request)
    if isinstance(message, _Reply):
        return message

    def event(kind: str, data: dict[str, Any], *, content: bool = False) -> _Event:
        return _Event(_sse({"type": kind} | data, kind), content)

    usage = message["usage"]
    start = message | {
        "content": [],
        "stop_reason": None,
        # As Anthropic does: a first count here, the final one in message_delta.
        "usage": usage | {"output_tokens": min(1, usage["output_tokens"])},
    }
    events = [event("message_start", {"message": start}), event("ping", {})]
    for number, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            kind, field, text = "text_delta", "text", block["text"]
        else:
            opening = block | {"input": {}}
            kind, field, text = "input_json_delta", "partial_json", json.dumps(block["input"])
        events.append(
            event(
                "content_block_start",
                {"index": number, "content_block": opening},
                content=block["type"] != "text",
            )
        )
        events += [
            event(
                "content_block_delta",
                {"index": number, "delta": {"type": kind, field: piece}},
                content=True,
            )
            for piece in _pieces(text, turn.chunk_chars)
        ]
        events.append(event("content_block_stop", {"index": number}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append(
        event("message_delta", {"delta": stop, "usage": {"output_tokens": usage["output_tokens"]}})
    )
    events.append(event("message_stop", {}))
    return events


def _anthropic_message(
    model: str, index: int, position: int, turn: Turn, request: dict[str, Any]
) -> dict[str, Any] | _Reply:
    """The turn as a Messages API message, or a 500 when the turn cannot be one."""
    content: list[dict[str, Any]] = []
    if turn.content:
        content.append({"type": "text", "text": turn.content})
    output_chars = len(turn.content or "")
    for i, call in enumerate(turn.tool_calls):
        arguments = _json_object(call.arguments)
        if arguments is None:
            return _anthropic_error(
                500,
                f"scripted model {model!r} turn {position} is not representable in the "
                f"Anthropic protocol: tool call {call.name!r} has arguments that are not a JSON "
                "object, and tool_use input must be one",
            )
        output_chars += len(call.name) + len(json.dumps(arguments))
        content.append(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_t{index}_{i}",
                "name": call.name,
                "input": arguments,
            }
        )
    if turn.usage is not None:
        prompt, output, cached = (
            turn.usage.prompt_tokens,
            turn.usage.completion_tokens,
            turn.usage.cached_tokens,
        )
    else:
        prompt_chars = sum(
            len(json.dumps(request.get(key) or "")) for key in ("system", "messages", "tools")
        )
        prompt, output, cached = _tokens(prompt_chars), _tokens(output_chars), 0
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            # Anthropic counts cache reads apart from input_tokens; OpenAI's prompt_tokens has both.
            "input_tokens": prompt - cached,
            "output_tokens": output,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        },
    }
    return message


REJECTED = "ERROR: a human rejected this call: "
"""How a rejected call's result reads (``workflows/agent/approvals.py``): ``on_rejection`` looks
for it."""


def _after_rejection(turns: list[Turn], index: int, messages: list[Any]) -> list[Turn]:
    """``turns`` with turn ``index`` replaced by the previous turn's ``on_rejection`` answer when
    the request's latest tool results hold a human's rejection; else ``turns`` unchanged."""
    previous = turns[min(index - 1, len(turns) - 1)] if index > 0 else None
    if previous is None or previous.on_rejection is None:
        return turns
    reason = _rejection(messages)
    if reason is None:
        return turns
    position = min(index, len(turns) - 1)
    answer = Turn(content=previous.on_rejection.replace("{reason}", reason))
    return [*turns[:position], answer, *turns[position + 1 :]]


def _rejection(messages: list[Any]) -> str | None:
    """The reason in a rejected call's result after the last assistant message: an OpenAI
    ``tool`` message or an Anthropic ``tool_result`` block whose text starts with `REJECTED`."""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "assistant":
            return None
        content = message.get("content")
        if message.get("role") == "tool":
            texts = [content]
        elif isinstance(content, list):
            texts = [b.get("content") for b in content if isinstance(b, dict)]
        else:
            texts = []
        for text in texts:
            if isinstance(text, str) and text.startswith(REJECTED):
                return text.removeprefix(REJECTED)
    return None


def _json_object(arguments: dict[str, Any] | str) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    try:
        decoded = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


def main(argv: list[str] | None = None) -> int:
    """Serve a script until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(
        description="Serve scripted OpenAI chat completions and Anthropic messages."
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


if __name__ == "__main__":
    sys.exit(main())
