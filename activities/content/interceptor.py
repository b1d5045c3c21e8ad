"""The activity boundary as one door: what an activity returns, raises or heartbeats leaves
with the worker's secrets redacted.

``RedactingInterceptor`` is registered last in ``worker.build_worker``, so it is the innermost
of the worker's interceptors: the tracing interceptor (``exception.message`` on the
``RunActivity`` span), the SDK's failure logging (``Completing activity as failed``, with its
traceback), its debug log of the completion, the data converter and the event history only
ever see what it lets out. Every activity is covered, whatever it runs (a built-in tool, your
own, an MCP server's, a hook, a model call), without a rule per call site.

- A result is walked to its last string (``redaction.redacted``); a result without a secret
  leaves as the same object, so nothing changes on the wire but the redacted text.
- A failure whose text (message, details, or an exception it was raised from) holds a secret
  leaves as an ``ApplicationError`` of the same type name, retryability and retry delay — what
  the SDK itself would have made of it — with its text redacted and its chain of causes rebuilt
  the same way; its traceback (code, no values) is kept. Temporal's own exceptions
  (cancellation, asynchronous completion) pass untouched, and so does any failure without a
  secret.
- Heartbeat details are redacted too.

While the activity runs, the worker's ``Redactor`` is ``redaction.current()``, for content
that leaves by another route (the live stream, span attributes, the store).
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from treadle.activities.content.redaction import Redactor, redact_error, redacted, using

__all__ = ["MAX_CAUSES", "RedactingInterceptor", "redacted_error"]

MAX_CAUSES = 20
"""Causes of one failure rebuilt at most; a longer chain is cut there (it would be a loop)."""


class RedactingInterceptor(Interceptor):
    """Redacts every activity's result, failure and heartbeat with the worker's ``Redactor``."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self.redactor)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, redactor: Redactor) -> None:
        super().__init__(next)
        self._redactor = redactor

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_Outbound(outbound, self._redactor))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        with using(self._redactor):
            try:
                result = await self.next.execute_activity(input)
            except Exception as exc:
                safe = redacted_error(exc, self._redactor)
                if safe is exc:
                    raise
                raise safe from safe.__cause__
            return redacted(result, self._redactor)


class _Outbound(ActivityOutboundInterceptor):
    def __init__(self, next: ActivityOutboundInterceptor, redactor: Redactor) -> None:
        super().__init__(next)
        self._redactor = redactor

    def heartbeat(self, *details: Any) -> None:
        super().heartbeat(*redacted(details, self._redactor))


def redacted_error(exc: Exception, redactor: Redactor) -> Exception:
    """``exc`` as it may leave an activity: itself when no text of it (or of what it was raised
    from) holds a secret; else an ``ApplicationError`` standing for it, text redacted."""
    if _passes(exc):
        return exc
    chain = _chain(exc)
    if not any(_holds_secret(link, redactor) for link in chain if not _passes(link)):
        return exc
    rebuilt = [link if _passes(link) else _redacted_link(link, redactor) for link in chain]
    # Relink from the top: each one's cause is the next, and nothing else is shown.
    for new, cause in zip(rebuilt, [*rebuilt[1:], None], strict=True):
        new.__cause__ = cause
        new.__suppress_context__ = True
    return rebuilt[0]


def _passes(exc: BaseException) -> bool:
    """Temporal's own exceptions (a cancellation, an asynchronous completion...) and anything
    that is not an ``Exception`` go through as they are: the SDK acts on their type."""
    return not isinstance(exc, Exception) or (
        not isinstance(exc, ApplicationError) and type(exc).__module__.startswith("temporalio")
    )


def _chain(exc: Exception) -> list[Exception]:
    """``exc`` and what it was raised from (or, unsuppressed, during), as the log shows them."""
    chain: list[Exception] = [exc]
    link: BaseException = exc
    while len(chain) < MAX_CAUSES:
        following = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
        if not isinstance(following, Exception) or following in chain:
            break
        chain.append(following)
        link = following
    return chain


def _holds_secret(exc: Exception, redactor: Redactor) -> bool:
    if isinstance(exc, ApplicationError):
        return (
            redact_error(exc.message, redactor) != exc.message
            or redacted(exc.details, redactor) is not exc.details
        )
    text = str(exc)
    return redact_error(text, redactor) != text


def _redacted_link(exc: Exception, redactor: Redactor) -> ApplicationError:
    """One exception of a chain as an ``ApplicationError`` with its text redacted and the same
    type name, retryability and retry delay: for any other exception, what the SDK would have
    made of it (its class name as the type, retryable)."""
    if isinstance(exc, ApplicationError):
        new = ApplicationError(
            redact_error(exc.message, redactor),
            *redacted(exc.details, redactor),
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
            category=exc.category,
        )
    else:
        new = ApplicationError(redact_error(str(exc), redactor), type=type(exc).__name__)
    return new.with_traceback(exc.__traceback__)
