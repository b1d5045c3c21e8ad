"""A scripted model server: a real local HTTP server that speaks OpenAI chat completions.

The agent's model activity talks to it over HTTP exactly as it talks to OpenAI, so the demo and the
test suite exercise the real client, timeouts, retries and error translation. Answers come from a
script instead of a model::

    {"models": {"demo": [
        {"content": "I'll look first.",
         "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "Done."}
    ]}}

Which turn answers a request is decided by the request alone: the number of assistant messages in
``messages``. Retries and concurrent conversations therefore get the same answer; past the end of a
script the last turn repeats. A turn may fail its first attempts (``errors``), answer late
(``delay``), or send a raw body (``raw``) to simulate a broken provider.

Run it on its own with ``python scripted_model.py --script demo/script.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "RecordedRequest",
    "Script",
    "ScriptError",
    "ScriptedModelServer",
    "Turn",
    "TurnError",
    "TurnToolCall",
    "TurnUsage",
    "load_script",
    "main",
    "parse_script",
]

_JSON = "application/json"


class ScriptError(ValueError):
    """A script that cannot be used: missing file, invalid JSON or bad shape (one-line message)."""


class TurnToolCall(BaseModel):
    """One native tool call the scripted model makes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    """Tool (function) name."""
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """An object is JSON-encoded; a string is sent verbatim, so tests can send malformed JSON."""
    id: str | None = None
    """Tool call id; defaults to ``call_t<turn>_<i>``."""


class TurnError(BaseModel):
    """A bad response returned instead of the turn's answer on one attempt.

    Usually an error status; a 200 with a ``body`` is a malformed success (a body that breaks
    the protocol), which a client should treat as a failed attempt too.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: int = Field(ge=200, le=599)
    """HTTP status code."""
    body: Any = None
    """A string is sent verbatim, other JSON values encoded; ``None`` gives OpenAI's error shape."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers, e.g. ``{"Retry-After": "1"}``."""


class TurnUsage(BaseModel):
    """Token usage reported for a turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    """Reported as ``usage.prompt_tokens_details.cached_tokens``."""

    @model_validator(mode="after")
    def _cached_within_prompt(self) -> Self:
        if self.cached_tokens > self.prompt_tokens:
            raise ValueError("cached_tokens cannot exceed prompt_tokens")
        return self


class Turn(BaseModel):
    """One scripted assistant turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str | None = None
    """Assistant text; alone it is a final answer (finish_reason "stop")."""
    tool_calls: list[TurnToolCall] = Field(default_factory=list)
    """Native tool calls (finish_reason "tool_calls"), made in parallel when more than one."""
    usage: TurnUsage | None = None
    """Reported usage; by default estimated at four characters per token."""
    delay: float = Field(default=0.0, ge=0)
    """Seconds to wait before answering (every attempt, errors included)."""
    errors: list[TurnError] = Field(default_factory=list)
    """The first ``len(errors)`` attempts of this turn in a conversation get these, in order."""
    raw: str | None = None
    """Sent verbatim as the response body instead of a chat completion."""
    raw_status: int | None = Field(default=None, ge=100, le=599)
    """Status for ``raw`` (default 200)."""

    @model_validator(mode="after")
    def _one_kind_of_answer(self) -> Self:
        if self.raw is not None:
            if self.content is not None or self.tool_calls:
                raise ValueError(
                    "raw replaces the whole answer; give it without content/tool_calls"
                )
        elif self.raw_status is not None:
            raise ValueError("raw_status needs raw")
        elif self.content is None and not self.tool_calls:
            raise ValueError("a turn needs content, tool_calls or raw")
        return self


class Script(BaseModel):
    """Scripted turns per model name (the request's ``model`` field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: dict[Annotated[str, Field(min_length=1)], Annotated[list[Turn], Field(min_length=1)]]


@dataclass(frozen=True)
class RecordedRequest:
    """A chat-completions request the server received."""

    model: str
    body: dict[str, Any]
    headers: dict[str, str]
    """Header names are lowercase."""


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


def _tokens(chars: int) -> int:
    return max(1, chars // 4)


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def _json_reply(status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> _Reply:
    return _Reply(status, json.dumps(payload).encode(), tuple(headers))


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

    def _respond(self, reply: _Reply | None) -> None:
        if reply is None:  # the server is stopping mid-delay: hang up without an answer
            self.close_connection = True
            return
        try:
            self.send_response(reply.status)
            extra = {name.lower() for name, _ in reply.headers}
            if "content-type" not in extra:
                self.send_header("Content-Type", _JSON)
            if "x-request-id" not in extra:
                self.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
            for name, value in reply.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        except OSError:
            self.close_connection = True  # the client hung up (e.g. a worker killed mid-call)


class ScriptedModelServer:
    """An OpenAI-compatible chat-completions server answering from a script, on a daemon thread."""

    def __init__(
        self,
        script: Script | Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        verbose: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.api_key = api_key
        self.verbose = verbose
        self._lock = threading.Lock()
        self._models: dict[str, list[Turn]] = {}
        self._requests: list[RecordedRequest] = []
        self._attempts: dict[tuple[str, str, int], int] = {}
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
        """``http://<host>:<port>/v1``, the value for ``OPENAI_BASE_URL``."""
        if self._httpd is None:
            raise RuntimeError("scripted model server not started")
        return f"http://{self.host}:{self.port}/v1"

    # Script and records

    @property
    def models(self) -> list[str]:
        """Scripted model names, sorted."""
        with self._lock:
            return sorted(self._models)

    def add_model(self, name: str, turns: Iterable[Turn | Mapping[str, Any]]) -> None:
        """Add or replace one model's turns (validated; `ScriptError` on a bad turn)."""
        script = parse_script({"models": {name: list(turns)}})
        with self._lock:
            self._models.update(script.models)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Chat-completions requests received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def requests_for(self, model: str) -> list[RecordedRequest]:
        """Recorded requests for one model, in arrival order."""
        return [request for request in self.requests if request.model == model]

    # Request handling (called on handler threads)

    def _handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> _Reply | None:
        if method == "GET" and path == "/v1/models":
            if (denied := self._check_auth(headers)) is not None:
                return denied
            data = [
                {"id": name, "object": "model", "created": 0, "owned_by": "treadle-scripted"}
                for name in self.models
            ]
            return _json_reply(200, {"object": "list", "data": data})
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat_completions(headers, raw)
        return _json_reply(404, _openai_error(f"Invalid URL ({method} {path})"))

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

    def _chat_completions(self, headers: dict[str, str], raw: bytes) -> _Reply | None:
        try:
            body: Any = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if isinstance(body, dict):
            model = body.get("model")
            record = RecordedRequest(
                model=model if isinstance(model, str) else "", body=body, headers=headers
            )
            with self._lock:
                self._requests.append(record)
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
        if body.get("stream") is True:
            return _json_reply(
                400,
                _openai_error(
                    "Streaming is not supported by the scripted model server.",
                    code="unsupported_value",
                    param="stream",
                ),
            )
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

        index = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        turn = turns[min(index, len(turns) - 1)]
        attempt = self._next_attempt(model, messages, index)
        if turn.delay and self._stopping(turn.delay):
            return None
        if attempt < len(turn.errors):
            return _error_reply(turn.errors[attempt])
        if turn.raw is not None:
            return _Reply(turn.raw_status or 200, turn.raw.encode())
        return _json_reply(200, _completion(model, index, turn, body))

    def _next_attempt(self, model: str, messages: list[Any], index: int) -> int:
        """Count attempts per (model, first user message, turn): retries see the errors in order."""
        first_user = next(
            (m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"),
            None,
        )
        key = (model, json.dumps(first_user, sort_keys=True), index)
        with self._lock:
            attempt = self._attempts.get(key, 0)
            self._attempts[key] = attempt + 1
        return attempt

    def _stopping(self, delay: float) -> bool:
        httpd = self._httpd
        if httpd is None:
            return True
        return httpd.stopping.wait(delay)


def _error_reply(error: TurnError) -> _Reply:
    if error.body is None:
        body = json.dumps(_default_error_body(error.status)).encode()
    elif isinstance(error.body, str):
        body = error.body.encode()
    else:
        body = json.dumps(error.body).encode()
    return _Reply(error.status, body, tuple(error.headers.items()))


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
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
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


def main(argv: list[str] | None = None) -> int:
    """Serve a script until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description="Serve scripted OpenAI chat completions.")
    parser.add_argument("--script", required=True, type=Path, help="JSON script file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    args = parser.parse_args(argv)

    try:
        script = load_script(args.script)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = ScriptedModelServer(
        script, host=args.host, port=args.port, api_key=args.api_key, verbose=args.verbose
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
