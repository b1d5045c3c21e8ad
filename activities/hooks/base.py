"""What a post-tools hook is, and the two ways it may fail on purpose.

The errors, below ``treadle.activities.errors.TreadleError``::

    HookError
    ├── HookFailed     the hook cannot do its work here (git refused, a bad repository layout):
    │                  becomes a ``failed`` result, the trace records it and the run goes on
    └── HookBusy       something else holds what the hook needs (a git lock): retried by
                       Temporal; the run records a failure only when the retries are over

Anything else a hook raises is a bug or an OS error nobody foresaw: retried, then recorded.
"""

from __future__ import annotations

from typing import Protocol

from treadle.activities.errors import TreadleError
from treadle.workflows.agent.messages.hooks import HookRequest, HookResult

__all__ = ["Hook", "HookBusy", "HookError", "HookFailed"]


class Hook(Protocol):
    """A post-tools hook: a name the run's config lists, and the work, run in an activity.

    ``run`` may be called again for the same request (a retried attempt, a worker killed
    mid-hook): it must not do its work twice.
    """

    @property
    def name(self) -> str: ...

    async def run(self, request: HookRequest) -> HookResult: ...


class HookError(TreadleError):
    """A hook failed in a way it foresaw."""


class HookFailed(HookError):
    """The hook cannot do its work here; retrying would not change that."""


class HookBusy(HookError):
    """Something the hook needs is held by another process; a later attempt may succeed."""
