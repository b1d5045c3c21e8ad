"""HTTP failures of a model call, whatever the wire protocol, as typed model errors.

What every provider shares: an error status becomes a ``ModelHTTPError`` (its status decides
retryability, see ``treadle.activities.errors``) carrying the provider's own message and the
``Retry-After`` delay; a timeout or an unreachable endpoint becomes a ``ModelConnectionError``;
API keys are removed from every message (``Redactor``, from
``treadle.activities.content.redaction``,
where what is matched is described, plus the key-like words of error text: ``redact_error``),
since failures are recorded in the event history, the run's trace and status, and the worker's
log. The one protocol specific, where an error body keeps its message, comes from the protocol
module (``openai_chat.error_message``, ``anthropic_messages.error_message``).

A ``Retry-After`` longer than the retry policy allows is cut to the policy's maximum interval
(``retry_after_cap``): the policy is what the run's author chose, and a provider asking for an
hour must not park a run for an hour.

A streaming call can also fail after its 200: the stream is cut or ends before its last event
(``stream_cut``, ``stream_ended``: a ``ModelConnectionError``, retried), or the provider sends an
error event (``stream_error``): that error is classified as the HTTP error it names, by its
``type`` or ``code`` (``ERROR_STATUS``: ``overloaded_error`` is a 529, ``rate_limit_exceeded``
a 429, ``invalid_request_error`` a 400...), so an overloaded or rate-limited provider is retried
and a request it refuses is not; an error it does not name is taken for a server error (500).

Some compatible servers refuse streaming itself: ``stream``, or the ``stream_options`` OpenAI
streaming sends, is an argument they do not know (Azure's older API versions, FastAPI servers
that forbid extra fields), or a model they serve cannot stream (OpenAI's o1 at first). The
activity then asks again without streaming (``activity``); ``streaming_refusal`` is what decides
it, narrowly: a 400 or 422 (``STREAM_REFUSAL_STATUS``; how a request is refused for its
arguments, never for being too many, too late or unauthorised) whose error, keys redacted,
names the stream (the word ``stream`` at the start of a word, ``stream_options`` and
``streaming`` included, ``upstream`` not), in its text or as the OpenAI error's ``param``. Every
other failure of a streaming request is reported as it is, without a second request. A 404 is
not a refusal: the same URL takes the request with or without ``stream``, so a 404 is a missing
route or model, which dropping the stream cannot find.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from types import MappingProxyType
from typing import Any

import httpx
from temporalio.common import RetryPolicy

from treadle.activities.content.redaction import (
    FRAGMENT_KEY_LENGTH,
    MIN_FRAGMENT,
    REDACTED,
    Redactor,
    redact,
    redact_error,
)
from treadle.activities.errors import ModelConnectionError, ModelHTTPError
from treadle.activities.model.payload import well_formed

__all__ = [
    "ERROR_STATUS",
    "FRAGMENT_KEY_LENGTH",
    "MAX_RETRY_AFTER",
    "MIN_FRAGMENT",
    "REDACTED",
    "STREAM_REFUSAL_STATUS",
    "ErrorMessage",
    "Redactor",
    "connection_error",
    "provider_backoff",
    "raise_for_status",
    "redact",
    "retry_after_cap",
    "retry_after_seconds",
    "safe_url",
    "stream_cut",
    "stream_ended",
    "stream_error",
    "streaming_refusal",
]

MAX_PROVIDER_TEXT = 500
"""Characters of the provider's error text kept in the message."""
MAX_SCANNED_TEXT = 16 * 1024
"""Characters of an error body read at all (redacted, then cut to ``MAX_PROVIDER_TEXT``)."""
MAX_RETRY_AFTER = timedelta(seconds=60)
"""The longest ``Retry-After`` honoured when the attempt's retry policy is unknown: the model
call's own policy (``treadle.workflows.agent.calls.model_call``) backs off to one minute at most."""

ERROR_STATUS: Mapping[str, int] = MappingProxyType(
    {
        # Anthropic's error types
        "invalid_request_error": 400,
        "authentication_error": 401,
        "permission_error": 403,
        "not_found_error": 404,
        "request_too_large": 413,
        "rate_limit_error": 429,
        "api_error": 500,
        "timeout_error": 504,
        "overloaded_error": 529,
        # OpenAI's error codes and types (invalid_request_error is shared)
        "invalid_api_key": 401,
        "model_not_found": 404,
        "context_length_exceeded": 400,
        "rate_limit_exceeded": 429,
        "insufficient_quota": 429,
        "requests": 429,
        "tokens": 429,
        "server_error": 500,
        "internal_error": 500,
        "service_unavailable": 503,
        "overloaded": 503,
        "timeout": 408,
    }
)
"""The HTTP status an error event inside a stream stands for, by its ``code`` or ``type``."""

STREAM_REFUSAL_STATUS = frozenset({400, 422})
"""Statuses a server refuses a streaming request's arguments with (``streaming_refusal``)."""

ErrorMessage = Callable[[Any], str | None]
"""A protocol's reader of an error body (decoded JSON): the provider's message, if it has one."""


def retry_after_seconds(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds (a number, or an HTTP date); ``None`` when absent or garbled."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def retry_after_cap(policy: RetryPolicy | None) -> timedelta:
    """The longest delay a ``Retry-After`` may set for an attempt under ``policy``.

    The policy's ``maximum_interval`` (when it sets none, Temporal's default: 100 times the
    initial interval); ``MAX_RETRY_AFTER`` when the policy is unknown (``activity.info()`` has
    none when the server did not send it).
    """
    if policy is None:
        return MAX_RETRY_AFTER
    return policy.maximum_interval or policy.initial_interval * 100


PROVIDER_FIRST_RETRY = timedelta(seconds=1)
"""A provider's retryable error (5xx, overload, a cut connection) waits this long before the
next attempt, then doubles (the policy's coefficient). The policy's own first interval is
shorter (0.1 s, ``treadle.workflows.base.DEAD_WORKER_RETRY``), for an attempt whose worker died:
that one has nothing to wait out."""


def provider_backoff(attempt: int, policy: RetryPolicy | None) -> timedelta:
    """The wait after attempt ``attempt`` failed on the provider's side: 1 s, 2 s, 4 s, ...
    up to ``retry_after_cap(policy)``, so five attempts span 15 s of an outage."""
    coefficient = policy.backoff_coefficient if policy is not None else 2.0
    delay = PROVIDER_FIRST_RETRY * coefficient ** max(0, attempt - 1)
    return min(delay, retry_after_cap(policy))


def safe_url(url: str) -> str:
    """The URL without user info or query, fit for error messages."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))


def _provider_text(response: httpx.Response, error_message: ErrorMessage) -> str:
    """The provider's own words, as much as is read at all (``MAX_SCANNED_TEXT``)."""
    body = response.text
    try:
        payload = response.json()
    except (ValueError, RecursionError):
        return body.strip()[:MAX_SCANNED_TEXT] or response.reason_phrase
    message = error_message(payload)
    return (body.strip() if message is None else message)[:MAX_SCANNED_TEXT]


def _fit(text: str, redactor: Redactor) -> str:
    """Text for a message: no lone surrogate (a failure holding one cannot be encoded), and no
    key, before and after the cut (a cut may leave a stub that only looks like a key)."""
    return redact_error(redact_error(well_formed(text), redactor)[:MAX_PROVIDER_TEXT], redactor)


def raise_for_status(
    response: httpx.Response,
    provider: str,
    error_message: ErrorMessage,
    redactor: Redactor | None = None,
) -> None:
    """Nothing for a success; else ``ModelHTTPError`` with status, provider text, Retry-After."""
    if response.is_success:
        return
    text = _fit(_provider_text(response, error_message), redactor or Redactor())
    raise ModelHTTPError(
        f"{provider} returned HTTP {response.status_code}: {text}",
        status=response.status_code,
        retry_after=retry_after_seconds(response.headers),
    )


def connection_error(
    exc: httpx.TransportError, provider: str, url: str, redactor: Redactor | None = None
) -> ModelConnectionError:
    """The request never got an answer: a timeout, or the endpoint could not be reached."""
    if isinstance(exc, httpx.TimeoutException):
        return ModelConnectionError(f"{provider} timed out: {type(exc).__name__}")
    text = f"{provider} unreachable at {safe_url(url)}: {exc}"
    return ModelConnectionError(_fit(text, redactor or Redactor()))


def stream_cut(
    exc: httpx.TransportError, provider: str, redactor: Redactor | None = None
) -> ModelConnectionError:
    """The stream broke off after its 200: the connection closed or timed out mid-way."""
    if isinstance(exc, httpx.TimeoutException):
        return ModelConnectionError(f"{provider} stream timed out mid-way: {type(exc).__name__}")
    text = f"{provider} stream was cut mid-way: {exc or type(exc).__name__}"
    return ModelConnectionError(_fit(text, redactor or Redactor()))


def stream_ended(provider: str, end: str) -> ModelConnectionError:
    """The stream's body ended before its last event (``end``): a reply cut short."""
    return ModelConnectionError(f"{provider} stream ended before {end}: the reply is cut short")


def _error_status(payload: Any) -> tuple[int, str | None]:
    """The status an error event stands for, and the name that says so (``None``: unnamed)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        for key in ("status", "code"):
            value = error.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
                return value, str(value)
        for key in ("code", "type"):
            value = error.get(key)
            if isinstance(value, str) and value in ERROR_STATUS:
                return ERROR_STATUS[value], value
    return 500, None


def stream_error(
    payload: Any,
    data: str,
    provider: str,
    error_message: ErrorMessage,
    redactor: Redactor | None = None,
) -> ModelHTTPError:
    """An error event inside a stream (decoded ``payload``, raw ``data``), as the HTTP error it
    names: same retryability, the provider's words, no key."""
    status, name = _error_status(payload)
    message = error_message(payload)
    text = _fit(
        (data.strip() if message is None else message)[:MAX_SCANNED_TEXT], redactor or Redactor()
    )
    kind = f"{name}, as HTTP {status}" if name else f"unnamed, taken as HTTP {status}"
    return ModelHTTPError(f"{provider} stream failed ({kind}): {text}", status=status)


_NAMES_STREAM = re.compile(r"\bstream", re.IGNORECASE)
_STREAM_PARAMS = frozenset({"stream", "stream_options"})


def streaming_refusal(
    response: httpx.Response, error_message: ErrorMessage, redactor: Redactor | None = None
) -> str | None:
    """The provider's words (keys redacted) when ``response``, the answer to a streaming
    request, refuses the streaming itself (see the module docstring); else ``None``."""
    if response.status_code not in STREAM_REFUSAL_STATUS:
        return None
    # Matched on the redacted text, as reported: an echoed key must not decide anything.
    text = _fit(_provider_text(response, error_message), redactor or Redactor())
    if _NAMES_STREAM.search(text) or _error_param(response) in _STREAM_PARAMS:
        return text
    return None


def _error_param(response: httpx.Response) -> str | None:
    """The ``param`` an OpenAI-style error body names, if it names one."""
    try:
        payload = response.json()
    except (ValueError, RecursionError):
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    return param if isinstance(param, str) else None
