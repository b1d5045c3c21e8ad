"""Your own tools: an argument model, an async function, and a few declared facts.

A tool is one module::

    from pydantic import Field

    from treadle.activities.tools.custom import Tool, ToolArgs, ToolContext, ToolOutput

    class GitDiffArgs(ToolArgs):
        path: str = Field(".", description="File or directory to diff, relative to the workspace.")

    async def git_diff(args: GitDiffArgs, context: ToolContext) -> ToolOutput:
        ...

    TOOLS = (
        Tool(
            name="git_diff",
            description="Show uncommitted changes in the workspace's git repository.",
            args=GitDiffArgs,
            run=git_diff,
            target=lambda args: args.path,
        ),
    )

and a worker pointed at it: ``treadle worker --tools my_pkg.tools`` (or a ``treadle.tools``
entry point of an installed package; see ``activities/tools/loading.py``). The examples that
ship with Treadle are one line each in ``activities/tools/registry.py``. The argument model's
field descriptions become the JSON Schema the model sees; the workflow validates every call
against it before anything runs, so a bad call is an ``ERROR:`` observation. Your tools get
what the built-in ones get: approval (``needs_approval``, or the run's ``require_approval``),
the blacklist, the run's choice of tools (``AgentConfig.tools``), parallel execution, progress
tracking by ``target`` and ``mutating``, summaries in the Web UI, the trace and the live stream.

The function runs inside the ``run_tool`` activity, on the worker: it may do I/O. It returns a
``ToolOutput`` (or a plain string), and raises ``ToolError`` for a failure the model should read
("no such branch"); anything else is a bug, which Temporal retries. Long outputs are capped and
stored like the built-in tools' outputs.

The worker adds the tools to the catalogue
(``treadle.workflows.agent.messages.catalogue.register``) when it
loads them: the workflow layer never imports a tool module. Keep tool modules' top-level imports
light, and do the I/O inside the functions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from treadle.activities.errors import ToolError
from treadle.activities.tools.output import ToolOutput
from treadle.activities.tools.workspace import resolve
from treadle.workflows.agent.messages.tool_args import ToolArgs, ToolPolicy

__all__ = ["Tool", "ToolArgs", "ToolContext", "ToolError", "ToolOutput"]

A = TypeVar("A", bound=ToolArgs)


@dataclass(frozen=True)
class ToolContext:
    """What a tool function may use: its run's workspace (every path confined to it) and the
    run's tool policy (output cap, command timeout)."""

    workspace: Path
    policy: ToolPolicy

    def path(self, relative: str) -> Path:
        """``relative`` resolved inside the workspace; ``ToolError`` if it leads out."""
        return resolve(self.workspace, relative)


def _no_target(args: Any) -> str:
    return ""


@dataclass(frozen=True)
class Tool(Generic[A]):
    """A tool the model can call: its schema, its function and its facts."""

    name: str
    """What the model calls it: ``^[a-z][a-z0-9_]{0,63}$``, unique among all tools."""
    description: str
    args: type[A]
    run: Callable[[A, ToolContext], Awaitable[ToolOutput | str]]
    mutating: bool = True
    """A call may change files: its workspace is snapshotted after it, progress tracking counts
    it, the post-tools hook runs. A tool may change files unless declared read-only:
    ``mutating=False``."""
    idempotent: bool = False
    """A changing call run twice has the effect of running it once (it sets, never adds). A
    ``mutating`` tool that is not idempotent is marked sent before it runs, and a retry after a
    lost attempt tells the model the outcome is unknown instead of running it again
    (``treadle.activities.sent_marks``; one heartbeat more per call)."""
    needs_approval: bool = False
    """Every call waits for a human, in every run (runs add more with ``require_approval``)."""
    timeout_seconds: float | None = None
    """Start-to-close timeout of one call; default: the run's ``tool_timeout_seconds``."""
    target: Callable[[A], str] = field(default=_no_target)
    """The file or thing a call acts on, for summaries, the trace and progress tracking."""
