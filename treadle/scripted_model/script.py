"""The script format: which turns each scripted model plays, and reading a script file.

A script maps a model name (the request's ``model`` field) to its turns; one script serves both
protocols. A turn is a reply (text, tool calls, usage), or a way to misbehave: errors on its
first attempts, a delay, a raw body, a stream paced, cut short or refused. Every problem with a
script is one `ScriptError` with a one-line message naming the model and turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, ValidationError, model_validator

from treadle.workflows.base import Frozen

DEMO_SCRIPT = Path(__file__).parents[1] / "demo_script.json"
"""The script ``treadle demo`` plays: a write that waits for approval, then an answer."""

KeyEcho = Literal["exact", "lower", "upper", "prefix", "split"]
"""How an error echoes the request's key: as sent, lower-cased, upper-cased, its first
``ECHO_PREFIX`` characters, or cut in three pieces by a quote and whitespace."""
ECHO_PREFIX = 20


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
    (see the package docstring); a request without ``stream`` gets the turn as usual."""
    finish_reason: str | None = None
    """OpenAI only: the finish reason sent instead of ``stop``/``tool_calls`` (``"length"``: a
    reply cut by its output limit)."""
    unfinished: bool = False
    """OpenAI streaming only: the stream ends with ``data: [DONE]`` but no chunk names a finish
    reason, as llama.cpp's server does when it cuts a reply short."""

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
    return _validated(data, "invalid script")


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
    return _validated(data, str(path))


def _validated(data: Mapping[str, Any], where: str) -> Script:
    """``data`` as a `Script`, or a `ScriptError` saying ``where: what is wrong``."""
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ScriptError(f"{where}: {_describe(exc)}") from exc
