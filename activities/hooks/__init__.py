"""Loom's post-tools hooks: the ``run_hook`` activity (``activity``), what a hook is and how it
fails (``base``), and the built-in ``git_commit`` (``git_commit``)."""

from treadle.activities.hooks.activity import HOOKS, HookActivities
from treadle.activities.hooks.base import Hook, HookBusy, HookError, HookFailed
from treadle.activities.hooks.git_commit import GitCommit

__all__ = ["HOOKS", "GitCommit", "Hook", "HookActivities", "HookBusy", "HookError", "HookFailed"]
