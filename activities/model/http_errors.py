"""HTTP failures of a model call, whatever the wire protocol, as typed model errors.

What every provider shares: an error status becomes a ``ModelHTTPError`` (its status decides
retryability, see ``activities.errors``) carrying the provider's own message and the
``Retry-After`` delay; a timeout or an unreachable endpoint becomes a ``ModelConnectionError``;
API keys are removed from every message, since failures are recorded in the event history.
The one protocol specific, where an error body keeps its message, comes from the protocol module
(``openai_chat.error_message``, ``anthropic_messages.error_message``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from activities.errors import ModelConnectionError, ModelHTTPError

__all__ = [
    "ErrorMessage",
    "connection_error",
    "raise_for_status",
    "redact",
    "retry_after_seconds",
    "safe_url",
]

MAX_PROVIDER_TEXT = 500
"""Characters of the provider's error text kept in the message."""

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


_KEY_LIKE = re.compile(r"\b(sk|key|token)-[A-Za-z0-9_*.-]{6,}", re.IGNORECASE)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Remove API keys from text bound for history: the worker's own, and anything key-shaped.

    Providers echo keys in error messages (OpenAI's 401 shows a masked one; proxies may show
    more), and those messages become activity failures recorded in the event history.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _KEY_LIKE.sub("[redacted]", text)


def safe_url(url: str) -> str:
    """The URL without user info or query, fit for error messages."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))


def _provider_text(response: httpx.Response, error_message: ErrorMessage) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text.strip()[:MAX_PROVIDER_TEXT] or response.reason_phrase
    message = error_message(payload)
    if message is not None:
        return message[:MAX_PROVIDER_TEXT]
    return response.text.strip()[:MAX_PROVIDER_TEXT]


def raise_for_status(
    response: httpx.Response,
    provider: str,
    error_message: ErrorMessage,
    secrets: tuple[str, ...] = (),
) -> None:
    """Nothing for a success; else ``ModelHTTPError`` with status, provider text, Retry-After."""
    if response.is_success:
        return
    text = redact(_provider_text(response, error_message), secrets)
    raise ModelHTTPError(
        f"{provider} returned HTTP {response.status_code}: {text}",
        status=response.status_code,
        retry_after=retry_after_seconds(response.headers),
    )


def connection_error(
    exc: httpx.TransportError, provider: str, url: str, secrets: tuple[str, ...] = ()
) -> ModelConnectionError:
    """The request never got an answer: a timeout, or the endpoint could not be reached."""
    if isinstance(exc, httpx.TimeoutException):
        return ModelConnectionError(f"{provider} timed out: {type(exc).__name__}")
    return ModelConnectionError(
        redact(f"{provider} unreachable at {safe_url(url)}: {exc}", secrets)
    )
