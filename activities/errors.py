"""Errors raised by activities, translated at the activity boundary.

The tree::

    TreadleError
    ├── ToolError                    a tool could not do what was asked; becomes an
    │   │                            ``ERROR: ...`` observation, never an activity failure
    │   └── WorkspaceEscapeError     a path that leads out of the run's workspace
    ├── ModelError                   a model call failed; raised as an ``ApplicationError``
    │   ├── ModelConfigError         unknown provider, missing API key  (non-retryable)
    │   ├── ModelHTTPError           the endpoint answered with an error status
    │   │                            (retryable: 408, 409, 429, 5xx; the rest non-retryable)
    │   ├── ModelConnectionError     connect / read failures and timeouts (retryable)
    │   ├── ModelResponseError       a body that breaks the protocol's promises (retryable:
    │   │                            the next attempt may be well-formed)
    │   └── ModelOutputCut           a reply cut by its output limit (finish reason
    │                                ``length`` / ``max_tokens``): never an answer
    │                                (non-retryable: the same limit cuts it again)
    ├── StoreUnavailable             the store cannot be reached or used now (a refused
    │                                connection, a missing mount, a full disk, denied
    │                                access); raised as a non-retryable ``ApplicationError``
    │                                of type ``StoreUnavailable``: the workflow waits for the
    │                                store and calls again, never spending the call's attempts
    └── ThreadUnavailable            a thread cannot take or answer a message from outside:
                                     no such thread, not a thread, closed, ended (one line;
                                     ``send_to_thread`` raises it non-retryable;
                                     ``treadle.client`` translates it into its own)

``ModelHTTPError`` and ``ModelConnectionError`` are made for every wire protocol by
``activities.model.http_errors`` (with ``Retry-After``, keys redacted); ``ModelResponseError``
by each protocol's ``parse_response`` (and by the model activity for a body that is not JSON);
``ModelConfigError`` by the model activity. ``ThreadUnavailable`` by ``activities.thread_turns``.
``StoreUnavailable`` by every store backend (``activities.store``), for whatever the activity
that used the store was doing.
``ModelError.to_application_error()`` is the one place that decides retryability; the
``type`` of the resulting ``ApplicationError`` is the class name, so the workflow and operators
can tell failures apart in the event history.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class TreadleError(Exception):
    """Base of every error Treadle raises on purpose."""


class ToolError(TreadleError):
    """A tool failed in a way the model should see and can react to."""


class WorkspaceEscapeError(ToolError):
    """A path resolved outside the run's workspace (absolute, ``..`` or a symlink)."""


class ModelError(TreadleError):
    """A model call failed."""

    retryable: bool = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def to_application_error(self) -> ApplicationError:
        return ApplicationError(
            str(self),
            type=type(self).__name__,
            non_retryable=not self.retryable,
            next_retry_delay=(
                timedelta(seconds=self.retry_after) if self.retry_after is not None else None
            ),
        )


class ModelConfigError(ModelError):
    retryable = False


class ModelHTTPError(ModelError):
    def __init__(self, message: str, *, status: int, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.status = status
        self.retryable = status in RETRYABLE_STATUS


class ModelConnectionError(ModelError):
    retryable = True


class ModelResponseError(ModelError):
    retryable = True


class ModelOutputCut(ModelError):
    """The reply was cut: no answer, but its tokens were spent (``usage``), so they count."""

    retryable = False
    APPLICATION_ERROR_TYPE = "ModelOutputCut"

    def __init__(self, message: str, *, usage: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.usage = usage or {}

    def to_application_error(self) -> ApplicationError:
        """Non-retryable; its first detail is the cut reply's usage (``TokenUsage`` fields),
        which the run adds to its totals, cost and budget."""
        return ApplicationError(
            str(self), self.usage, type=self.APPLICATION_ERROR_TYPE, non_retryable=True
        )


class StoreUnavailable(TreadleError):
    """The store (``where``: its ``describe()``) cannot be reached or used now. Infrastructure,
    not the call's fault: the call is made again once the store answers."""

    APPLICATION_ERROR_TYPE = "StoreUnavailable"

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message)
        self.where = where

    def to_application_error(self) -> ApplicationError:
        """Non-retryable, so the workflow hears of it at once and waits for the store itself
        (``workflows.agent.calls``) instead of spending the call's attempts; ``where`` is its
        first detail."""
        return ApplicationError(
            str(self), self.where, type=self.APPLICATION_ERROR_TYPE, non_retryable=True
        )


class ThreadUnavailable(TreadleError):
    """A thread that cannot take a message, or ended before answering one; the message says
    which, in one line."""
