"""Loom's post-tools hook: the messages of the ``run_hook`` activity and the pure helpers the
workflow needs to call it.

After a step whose tools changed files the run asks each hook of its config, in order, to do
its infrastructure work (the built-in ``git_commit`` commits the workspace). A hook runs in an
activity (``treadle.activities.hooks``); here are only the names it may be asked for, what it is
given,
what it answers, and the activity options. A failed hook is a trace line, never a failed run.

Pure and deterministic: imported in the workflow sandbox (and passed through by the worker).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Literal

from pydantic import Field, field_validator, model_validator
from temporalio import workflow
from temporalio.common import RetryPolicy

from treadle.workflows.base import FIRST_RETRY, Frozen

__all__ = [
    "DEFAULT_COMMIT_AUTHOR",
    "HOOK_MAX_ATTEMPTS",
    "HOOK_TIMEOUT_SECONDS",
    "KNOWN_HOOKS",
    "HookOutcome",
    "HookRequest",
    "HookResult",
    "check_hook_names",
    "describe",
    "hook_call",
    "known_hooks",
    "parse_author",
    "register",
]

KNOWN_HOOKS: Mapping[str, str] = MappingProxyType(
    {
        "git_commit": "commit what the step changed, in a workspace that is a git repository",
    }
)
"""The built-in hooks, by name, with what they do: the names a run's config may list.
``treadle.activities.hooks.HOOKS`` implements exactly these (a test holds the two together)."""

_REGISTERED: dict[str, str] = {}
"""Your own hooks' names and what they do, named by this process (``register``: what
``TreadlePlugin(hooks=...)`` does when it is made, in the worker and in the client that starts
runs). Written while the process sets itself up, read-only once its worker runs."""


def register(hooks: Mapping[str, str]) -> None:
    """Let a run's config name these hooks (name -> what it does) beside the built-in ones.

    The same name again is nothing new; a built-in name, or a name that does not fit, is a
    ``ValueError`` and nothing of the batch is added."""
    for name in hooks:
        if name in KNOWN_HOOKS:
            raise ValueError(f"hook name {name!r} is built in: name yours otherwise")
        if not _HOOK_NAME.match(name):
            raise ValueError(f"hook name {name!r} does not match {_HOOK_NAME.pattern}")
    _REGISTERED.update(hooks)


def known_hooks() -> Mapping[str, str]:
    """Every hook a run's config may name here: the built-in ones, then this process's own."""
    return MappingProxyType({**KNOWN_HOOKS, **_REGISTERED})


_HOOK_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

DEFAULT_COMMIT_AUTHOR = "Treadle <treadle@localhost>"
"""Author and committer of the hook's commits when the run's config names none."""

HOOK_TIMEOUT_SECONDS = 120.0
"""Start-to-close timeout of one hook attempt: staging a large workspace takes a while."""
HOOK_MAX_ATTEMPTS = 5
"""Attempts of one hook call. Retried are a repository locked by another git process and
errors nobody foresaw; with the backoff below the lock gets about 15 seconds to go away."""

HookOutcome = Literal["done", "nothing", "skipped", "failed"]
"""``done``: the hook did its work (``commit`` names the commit, if it made one);
``nothing``: there was nothing to do (no change); ``skipped``: the hook does not apply here
(not a git repository); ``failed``: it could not, and ``detail`` says why."""

_AUTHOR = re.compile(r"(?P<name>[^<>\x00-\x1f]*[^<>\s])\s*<(?P<email>[^<>\s]+)>")
"""Git refuses ``<``, ``>`` and line breaks in a name and an email."""


def parse_author(text: str) -> tuple[str, str]:
    """``"Name <email>"`` as ``(name, email)``; ``ValueError`` saying what is wrong otherwise."""
    match = _AUTHOR.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"commit author {text!r} is not in the form 'Name <email>'")
    return match["name"].strip(), match["email"]


def check_hook_names(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as a tuple, or ``ValueError`` naming the unknown and repeated ones.

    For the config's validator: an unknown hook is a config error when the run starts, not a
    surprise after its first step.
    """
    listed, hooks = tuple(names), known_hooks()
    unknown = [name for name in listed if name not in hooks]
    if unknown:
        known = ", ".join(sorted(hooks))
        raise ValueError(f"unknown hook(s): {', '.join(unknown)} (known: {known})")
    repeated = sorted({name for name in listed if listed.count(name) > 1})
    if repeated:
        raise ValueError(f"hook(s) listed more than once: {', '.join(repeated)}")
    return listed


class HookRequest(Frozen):
    """Input of ``run_hook``: one hook, after one step whose tools changed files."""

    hook: str = Field(min_length=1, max_length=100)
    """The hook to run, by name (one of ``known_hooks()``)."""
    workspace: str = Field(min_length=1)
    """The run's workspace, as the tools received it."""
    step: int = Field(ge=0)
    """The step whose tools ran; with the two ids it names the hook call for idempotence."""
    tools: tuple[str, ...] = ()
    """Names of the step's tools that changed files, in call order (for the commit message)."""
    files: tuple[str, ...] = ()
    """Paths the tools reported changed, relative to the workspace. Commands do not report
    theirs, so a hook that can see the changes itself (git can) asks the workspace instead."""
    commit_author: str | None = None
    """``"Name <email>"``, author and committer of a commit; ``DEFAULT_COMMIT_AUTHOR`` if unset."""
    workflow_id: str = Field(min_length=1)
    run_id: str = Field(min_length=1)
    """The run whose step this is: named in the commit message, and part of its idempotence key."""

    @field_validator("commit_author")
    @classmethod
    def _check_author(cls, value: str | None) -> str | None:
        if value is not None:
            parse_author(value)
        return value


class HookResult(Frozen):
    """Output of ``run_hook``: what one hook did, as the trace records it."""

    hook: str
    outcome: HookOutcome
    detail: str
    """One line for the trace: what was done, or why nothing was."""
    commit: str | None = None
    """The full id of the commit made (or found already made) for this step."""

    @model_validator(mode="after")
    def _commit_only_when_done(self) -> HookResult:
        if self.commit is not None and self.outcome != "done":
            raise ValueError(f"a hook result with outcome {self.outcome!r} names no commit")
        return self

    @classmethod
    def failure(cls, hook: str, detail: str) -> HookResult:
        """The result the workflow records when the activity itself failed (retries over)."""
        return cls(hook=hook, outcome="failed", detail=detail)


def describe(result: HookResult) -> str:
    """The trace line of one hook's result: ``git_commit: done — committed 2 files as 1a2b3c4``."""
    return f"{result.hook}: {result.outcome} — {result.detail}"


def hook_call(
    summary: str,
    *,
    heartbeat_timeout_seconds: float,
    timeout_seconds: float = HOOK_TIMEOUT_SECONDS,
    task_queue: str | None = None,
) -> workflow.ActivityConfig:
    """Options of one ``run_hook`` call, for ``execute_activity_method(..., **options)``.

    It heartbeats, so a worker killed mid-hook is noticed after the heartbeat timeout and the
    next attempt (on another worker) finds the commit the first one may have made.
    """
    options = workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=timedelta(seconds=timeout_seconds),
        heartbeat_timeout=timedelta(seconds=heartbeat_timeout_seconds),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_RETRY,
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=10),
            maximum_attempts=HOOK_MAX_ATTEMPTS,
        ),
    )
    if task_queue:
        options["task_queue"] = task_queue  # the hook works in the workspace, as tools do
    return options
