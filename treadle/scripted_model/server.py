"""`ScriptedModelServer`: the script, the requests it has answered, and which turn (and which
attempt of it) answers a request; the protocol modules say how, ``http_server.py`` sends it.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from treadle.scripted_model import anthropic_messages, checks, faults, llama_cpp, openai_chat
from treadle.scripted_model.auth import anthropic_denial, openai_denial
from treadle.scripted_model.conversation import (
    after_rejection,
    anthropic_conversation,
    assistant_turns,
    openai_conversation,
)
from treadle.scripted_model.http_server import HTTPServer
from treadle.scripted_model.replies import Api, Event, Reply, Stream, json_reply
from treadle.scripted_model.script import Script, Turn, parse_script


@dataclass(frozen=True)
class RecordedRequest:
    """A model request the server received, in either protocol."""

    model: str
    body: dict[str, Any]
    headers: dict[str, str]
    """Header names are lowercase."""
    protocol: Api = "openai"
    """``"openai"`` for ``/v1/chat/completions``, ``"anthropic"`` for ``/v1/messages``."""


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
        keep_requests: int | None = None,
    ) -> None:
        """``keep_requests``: how many of the newest requests ``requests`` keeps (``None``:
        all, as tests want; a benchmark of thousands of calls keeps a few, or its own process
        holds every conversation it was sent and its pauses are the measurement's)."""
        self.host = host
        self.port = port
        self.api_key = api_key
        self.verbose = verbose
        self.streaming = streaming
        """``False``: refuse every streaming request, as a server that cannot stream does."""
        self._lock = threading.Lock()
        self._models: dict[str, list[Turn]] = {}
        self._like: dict[str, llama_cpp.Like] = {}
        """Models that behave like another server than OpenAI's (see ``llama_cpp``)."""
        self._served: dict[str, int] = {}
        """Answered requests per model taking its turns in arrival order."""
        self._requests: deque[RecordedRequest] = deque(maxlen=keep_requests)
        self._attempts: dict[tuple[Api, str, str, int], int] = {}
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None
        if script is not None:
            self._models.update(parse_script(script).models)

    # Lifecycle

    def start(self) -> None:
        """Bind and serve on a daemon thread; with port 0 the OS picks a free port."""
        if self._httpd is not None:
            raise RuntimeError("scripted model server already started")
        httpd = HTTPServer((self.host, self.port), self)
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
        like: llama_cpp.Like = "openai",
    ) -> None:
        """Add or replace one model's turns (validated; `ScriptError` on a bad turn).

        ``order="conversation"`` picks a request's turn by the assistant messages it carries;
        ``"arrival"`` answers each request with the next turn, whatever its conversation.
        ``like="llama.cpp"`` answers OpenAI-protocol requests as llama.cpp's server does.
        """
        script = parse_script({"models": {name: list(turns)}})
        with self._lock:
            self._models.update(script.models)
            self._like[name] = like
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
    ) -> Reply | Stream | None:
        # Only Anthropic clients send anthropic-version, so it picks the shape of shared answers.
        anthropic = "anthropic-version" in headers
        if method == "GET" and path == "/v1/models":
            if anthropic:
                denied = anthropic_denial(self.api_key, headers)
                return denied or anthropic_messages.model_list(self.models)
            return openai_denial(self.api_key, headers) or openai_chat.model_list(self.models)
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat_completions(headers, raw)
        if method == "POST" and path == "/v1/messages":
            return self._messages(headers, raw)
        if anthropic:
            return anthropic_messages.error_reply(404, f"Not Found ({method} {path})")
        return openai_chat.error_reply(404, f"Invalid URL ({method} {path})")

    def _record(self, api: Api, headers: dict[str, str], raw: bytes) -> Any:
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

    def _chat_completions(self, headers: dict[str, str], raw: bytes) -> Reply | Stream | None:
        body = self._record("openai", headers, raw)
        if (denied := openai_denial(self.api_key, headers)) is not None:
            return denied
        if (problem := checks.openai_request_problem(body)) is not None:
            return problem
        model: str = body["model"]
        messages: list[Any] = body["messages"]
        streaming = body.get("stream") is True
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        with self._lock:
            turns = self._models.get(model)
            like = self._like.get(model, "openai")
        if turns is None:
            return openai_chat.error_reply(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        if like == "llama.cpp":
            if (problem := llama_cpp.request_problem(body)) is not None:
                return problem
            include_usage = False  # it ignores stream_options
            if llama_cpp.cannot_stream(body):
                return Stream(())
            turns = [llama_cpp.adapt(turn, body) for turn in turns]

        index = self._turn_index(model, assistant_turns(messages))
        if streaming and self._refuses_stream(turns, index):
            param = "stream_options" if "stream_options" in body else "stream"
            return openai_chat.error_reply(
                400, f"Unrecognized request argument supplied: {param}", param=param
            )
        turns = after_rejection(turns, index, messages)
        if (refusal := self._forced_tool_refusal("openai", body, turns, index)) is not None:
            return refusal

        def chunks(turn: Turn) -> list[Event]:
            whole = openai_chat.completion(model, index, turn, body)
            return openai_chat.completion_chunks(whole, turn, include_usage)

        return self._play(
            "openai",
            headers,
            model,
            turns,
            index,
            openai_conversation(messages),
            lambda turn: json_reply(200, openai_chat.completion(model, index, turn, body)),
            chunks if streaming else None,
        )

    def _messages(self, headers: dict[str, str], raw: bytes) -> Reply | Stream | None:
        body = self._record("anthropic", headers, raw)
        if (denied := anthropic_denial(self.api_key, headers)) is not None:
            return denied
        if (problem := checks.anthropic_request_problem(headers, body)) is not None:
            return problem
        model: str = body["model"]
        with self._lock:
            turns = self._models.get(model)
        if turns is None:
            return anthropic_messages.error_reply(404, f"model: {model}")

        messages: list[dict[str, Any]] = body["messages"]
        index = self._turn_index(model, assistant_turns(messages))
        position = min(index, len(turns) - 1)
        streaming = body.get("stream") is True
        if streaming and self._refuses_stream(turns, index):
            return anthropic_messages.error_reply(400, "stream: Extra inputs are not permitted")
        turns = after_rejection(turns, index, messages)
        if (refusal := self._forced_tool_refusal("anthropic", body, turns, index)) is not None:
            return refusal
        return self._play(
            "anthropic",
            headers,
            model,
            turns,
            index,
            anthropic_conversation(messages),
            lambda turn: anthropic_messages.reply(model, index, position, turn, body),
            (
                (lambda turn: anthropic_messages.message_events(model, index, position, turn, body))
                if streaming
                else None
            ),
        )

    def _play(
        self,
        api: Api,
        headers: dict[str, str],
        model: str,
        turns: list[Turn],
        index: int,
        conversation: str,
        answer: Callable[[Turn], Reply],
        stream: Callable[[Turn], list[Event] | Reply] | None = None,
    ) -> Reply | Stream | None:
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
                return faults.error_reply(error, api, headers)
            events = [] if turn.raw is not None else stream(turn)
            if isinstance(events, Reply):
                return events
            frames = [event.frame for event in faults.cut(events, 1)]
            return Stream((*frames, faults.error_event(error, api, headers)), turn.chunk_delay)
        cut = attempt < len(turn.errors) + turn.cut_attempts
        if stream is not None and turn.cut_after is not None and cut:
            events = stream(turn)
            if isinstance(events, Reply):
                return events
            frames = [event.frame for event in faults.cut(events, turn.cut_after)]
            return Stream(tuple(frames), turn.chunk_delay, cut=True)
        with self._lock:
            if model in self._served:
                self._served[model] = index + 1
        if turn.raw is not None:
            return Reply(turn.raw_status or 200, turn.raw.encode())
        if stream is None:
            return answer(turn)
        events = stream(turn)
        if isinstance(events, Reply):
            return events
        return Stream(tuple(event.frame for event in events), turn.chunk_delay)

    @staticmethod
    def _forced_tool_refusal(
        api: Api, body: dict[str, Any], turns: list[Turn], index: int
    ) -> Reply | None:
        """A turn of text alone answering a request that forces a tool call: a script no real
        model could follow (see ``checks.forces_tool``)."""
        turn = turns[min(index, len(turns) - 1)]
        if turn.raw is None and not turn.tool_calls and checks.forces_tool(api, body):
            return checks.forced_tool_refusal(api, index)
        return None

    def _refuses_stream(self, turns: list[Turn], index: int) -> bool:
        """A streaming request for turn ``index`` gets a server's refusal to stream."""
        return not self.streaming or turns[min(index, len(turns) - 1)].reject_stream

    def _turn_index(self, model: str, assistant_messages: int) -> int:
        with self._lock:
            return self._served.get(model, assistant_messages)

    def _next_attempt(self, api: Api, model: str, conversation: str, index: int) -> int:
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
