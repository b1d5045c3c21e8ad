"""Errors of the MCP activities, translated at their boundary.

The tree (under ``treadle.activities.errors.TreadleError``)::

    McpError
    ├── McpConfigError        the worker's MCP config file is unreadable or invalid: the worker
    │                         refuses to start (exit code 2), one line naming server and field
    └── McpUnavailableError   a server could not be reached or did not answer in time: the
        │                     attempt fails with a retryable ``ApplicationError``; Temporal
        │                     retries it, then the workflow makes the failure an observation
        └── McpTimeoutError   a connect or call outlived its timeout

Whatever a server *answers* is data, never an exception: an ``isError`` result, a JSON-RPC
error response (unknown tool, invalid arguments) or a malformed result all become
``ToolResult(success=False, output="ERROR: ...")``. Only a server that does not answer at all
fails the attempt. ``McpUnavailableError.to_application_error()`` is the one place that decides
how such a failure looks in the event history.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from treadle.activities.errors import TreadleError


class McpError(TreadleError):
    """Base of the MCP activities' errors."""


class McpConfigError(McpError):
    """The MCP config file cannot be used; the message is one line."""


class McpUnavailableError(McpError):
    """A server could not be reached, closed the connection, or failed at the transport."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server!r} {reason}")
        self.server = server
        self.reason = reason

    def to_application_error(self) -> ApplicationError:
        # Retryable: a server process restarts, a network heals. The workflow's retry policy
        # bounds the attempts, then the failure becomes an ERROR observation.
        return ApplicationError(str(self), type=type(self).__name__, non_retryable=False)


class McpTimeoutError(McpUnavailableError):
    """Connecting or a call took longer than the server's configured timeout."""
