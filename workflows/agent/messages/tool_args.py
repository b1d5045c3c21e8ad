"""What a tool module imports from the workflow side: the base of every tool's argument model
(built-in, your own) and the run's tool policy. Apart from the catalogue and the run's models,
so a tool module imports neither (and the catalogue never imports a tool module)."""

from __future__ import annotations

from treadle.workflows.base import Frozen, Lean

DEFAULT_COMMAND_ALLOWLIST = (
    "cat", "diff", "echo", "grep", "head", "ls", "pwd", "sort", "tail", "wc",
)  # fmt: skip
"""Programs that only read and print. Interpreters (python, node, sh) and git (hooks, aliases,
``-c``) run arbitrary code as the worker's user: add them only for workers you would let run
anything, e.g. in a container."""


class ToolArgs(Frozen):
    """Base of every argument schema: unknown keys are an error, not silently dropped."""


class ToolPolicy(Lean):
    """The part of the run's config a tool activity needs (in every tool call's input: the
    fields at their defaults are left out of history)."""

    allow_run_command: bool = False
    command_allowlist: tuple[str, ...] = DEFAULT_COMMAND_ALLOWLIST
    command_timeout_seconds: float = 60
    max_output_chars: int = 12_000
    memory_namespace: str | None = None
    """The run's long-term memory namespace (``config.memory``): the memory tools' only one."""
    memory_ttl_seconds: float | None = None
