"""What ``AgentClient`` raises: one tree, each error one line a person can act on.

The tree::

    AgentClientError                 base of every error the client raises on purpose
    ├── InvalidRequest               what was asked cannot be sent: a body that does not
    │                                validate, a rejection without a reason, arguments the
    │                                tool's schema refuses, a workspace that is not there
    │                                (also a ``ValueError``); nothing was sent
    ├── RunNotFound                  no workflow with that id in the client's namespace
    ├── RunExists                    ``start``: a workflow with that id exists (an id names
    │                                one run: the client never starts a second one under it)
    ├── RunEnded                     the run has closed, so it takes no decision or answer
    ├── Refused                      the run refused it: its update's validator said why
    │                                (``reason``); nothing reached the run's history
    ├── ThreadUnavailable            a thread cannot take or answer a message: no such thread,
    │                                not a thread, closed, ended before it answered
    ├── NoWorkerAnswered             the run did not answer in time: no worker polls its task
    │                                queue, or every one is busy
    ├── RunCannotAnswer              a worker took the question but could not answer it: its
    │                                reason, decoded (it fails the run's workflow task, it
    │                                lacks the key the run was encrypted with, ...)
    ├── TemporalRefused              Temporal itself refused the request (its message)
    ├── NoStream                     the run cannot be watched: it publishes no live stream
    ├── WorkspaceUnavailable         no snapshot to read: none taken yet, no store, or not in
    │                                the store the client reads
    ├── StoredContentUnavailable     an export's stored content cannot be read back: no store,
    │                                or not in the store the client reads
    ├── MemoryRefused                a memory namespace refused a write (no such item, a bad
    │                                namespace or text)
    └── ScheduleError                scheduled agents
        ├── ScheduleNotFound         no scheduled agent of that name
        └── ScheduleConflict         the name is taken by something else (delete it first)

Foreign errors are translated where the client meets them (``raise ... from exc``: the
Temporal error stays readable as ``__cause__``). Two kinds pass through as they are, because
they are about this process's own settings, not about a run: ``treadle.connection``'s
``TemporalConnectionError`` (no server, bad address or profile) and ``treadle.codec``'s
``EncryptionError`` (this client cannot decrypt what it read: its
``TREADLE_ENCRYPTION_KEYS``).
"""

from __future__ import annotations

from temporalio.client import WorkflowUpdateFailedError

__all__ = [
    "AgentClientError",
    "InvalidRequest",
    "MemoryRefused",
    "NoStream",
    "NoWorkerAnswered",
    "Refused",
    "RunCannotAnswer",
    "RunEnded",
    "RunExists",
    "RunNotFound",
    "ScheduleConflict",
    "ScheduleError",
    "ScheduleNotFound",
    "StoredContentUnavailable",
    "TemporalRefused",
    "ThreadUnavailable",
    "WorkspaceUnavailable",
    "update_refusal",
]


class AgentClientError(Exception):
    """Base of every error ``AgentClient`` raises on purpose; ``str()`` is one line."""


class InvalidRequest(AgentClientError, ValueError):
    """What was asked cannot be sent; nothing was."""


class RunNotFound(AgentClientError):
    """No workflow with that id in the client's namespace."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunExists(AgentClientError):
    """A workflow with that id exists already."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunEnded(AgentClientError):
    """The run has closed: it takes no decision, answer or message any more."""


class Refused(AgentClientError):
    """The run refused the request; ``reason`` is its validator's own words."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ThreadUnavailable(AgentClientError):
    """A thread cannot take or answer a message (the message says why)."""


class NoWorkerAnswered(AgentClientError):
    """The run did not answer in time: no worker polls its task queue, or all are busy."""


class RunCannotAnswer(AgentClientError):
    """A worker took the question but could not answer it (its reason, decoded)."""


class TemporalRefused(AgentClientError):
    """Temporal itself refused the request."""


class NoStream(AgentClientError):
    """The run cannot be watched: no such run, or it publishes no live stream."""


class WorkspaceUnavailable(AgentClientError):
    """No workspace snapshot to read (none taken, no store, or not in this store)."""


class StoredContentUnavailable(AgentClientError):
    """What a run keeps in the workers' store cannot be read back from the client's."""


class MemoryRefused(AgentClientError):
    """A memory namespace refused the request (the message says why)."""


class ScheduleError(AgentClientError):
    """Base of the scheduled agents' errors."""


class ScheduleNotFound(ScheduleError):
    """No scheduled agent of that name."""


class ScheduleConflict(ScheduleError):
    """A schedule or monitor of that name exists and is something else."""


def update_refusal(exc: WorkflowUpdateFailedError) -> str:
    """Why the run refused an update: its handler's or validator's error message."""
    cause = exc.cause
    return str(getattr(cause, "message", None) or cause or exc)
