"""The tool catalogue: names, descriptions and pydantic argument schemas.

Pure data, shared by the workflow (which validates arguments before anything runs, so a bad call
becomes an observation and a ``modify`` signal can be checked), by the model activity (which sends
the schemas to the model as JSON Schema) and by the tool activity (which runs them).

The built-in tools are declared here; your own tools are added with ``register`` by the module
that holds them (``activities/tools/registry.py``, when the worker imports it). The catalogue
never imports a tool module: the workflow layer imports no activity code for its data.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, Protocol

from pydantic import Field, ValidationError, model_validator
from pydantic_core import PydanticSerializationError

from treadle.workflows.agent.messages.content_refs import full_chars
from treadle.workflows.agent.messages.tool_args import (
    ToolArgs as ToolArgs,  # re-exported: the tools use it
)
from treadle.workflows.base import describe_errors


class ReadFileArgs(ToolArgs):
    path: str = Field(description="File path relative to the workspace.")
    offset: int = Field(1, ge=1, description="First line to return (1-based).")
    limit: int | None = Field(None, ge=1, description="Maximum number of lines to return.")


class WriteFileArgs(ToolArgs):
    path: str = Field(description="File path relative to the workspace; parents are created.")
    content: str = Field(description="The complete new content of the file.")


class EditFileArgs(ToolArgs):
    path: str = Field(description="File path relative to the workspace.")
    old_text: str = Field(min_length=1, description="Exact text to replace; must occur once.")
    new_text: str = Field(description="Replacement text.")


class ListDirArgs(ToolArgs):
    path: str = Field(".", description="Directory relative to the workspace.")


class SearchFilesArgs(ToolArgs):
    pattern: str = Field(min_length=1, description="Text to search for.")
    path: str = Field(".", description="Directory (or file) to search, relative to the workspace.")
    regex: bool = Field(False, description="Treat the pattern as a Python regular expression.")
    max_results: int = Field(50, ge=1, le=1000, description="Maximum matching lines to return.")


class RunCommandArgs(ToolArgs):
    command: str = Field(
        min_length=1,
        description="Program and arguments, split like a shell would (no pipes, no expansion).",
    )
    timeout_seconds: float | None = Field(
        None, gt=0, description="Optional shorter timeout than the run's default."
    )


class StartPhaseArgs(ToolArgs):
    description: str = Field(min_length=1, max_length=500, description="What this phase does.")
    number: int | None = Field(None, ge=1, description="Phase number; default: the next one.")
    total_phases: int | None = Field(
        None, ge=1, le=1000, description="How many phases the whole task has, if known."
    )


class AskClientArgs(ToolArgs):
    kind: Literal["file_read", "environment", "question"] = Field(
        description="file_read: a file on the user's machine; environment: an environment "
        "variable there; question: anything else only the user can tell."
    )
    what: str = Field(
        min_length=1,
        max_length=2_000,
        description="The file path (relative to the user's working directory), the variable "
        "name, or the question.",
    )


class WaitArgs(ToolArgs):
    seconds: float | None = Field(None, gt=0, description="Seconds to wait (or give until).")
    until: datetime | None = Field(None, description="ISO 8601 time to wake at.")
    reason: str = Field(min_length=1, max_length=500, description="What the run waits for.")

    @model_validator(mode="after")
    def _one_of(self) -> WaitArgs:
        if (self.seconds is None) == (self.until is None):
            raise ValueError("give exactly one of seconds and until")
        return self


class DelegateArgs(ToolArgs):
    task: str = Field(
        min_length=1,
        max_length=20_000,
        description="The sub-task, complete and self-contained: the sub-agent sees only this.",
    )
    tools: tuple[str, ...] | None = Field(
        None, description="Tools the sub-agent may use (default: the same as yours)."
    )
    model: str | None = Field(
        None, max_length=200, description="provider:model for the sub-agent (default: yours)."
    )
    max_steps: int | None = Field(
        None, ge=1, description="Step limit of the sub-agent (default and most: yours)."
    )


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args: type[ToolArgs]
    mutating: bool
    """A successful call may have changed files; the post-tools hook runs after it."""
    target: Callable[[Any], str]
    repeatable: bool = True
    """Running a call twice has the effect of running it once (reading, listing, writing a
    whole file). A call that is not (a command, an edit, a custom tool that changes things and
    is not declared idempotent) is marked sent before it runs, and a retried attempt that finds
    the mark reports an unknown outcome instead of running it again
    (``treadle.activities.sent_marks``)."""
    """The file or command a call acts on, for activity summaries and progress tracking."""
    in_workflow: bool = False
    """Changes only the run's own state, so the workflow handles it: no activity, no I/O."""
    needs_approval: bool = False
    """Every call waits for a human, whatever the run's ``require_approval`` says."""
    timeout_seconds: float | None = None
    """Start-to-close timeout of one call, instead of the run's ``tool_timeout_seconds``."""
    custom: bool = False
    """One of your own tools (``activities/tools/registry.py``, or loaded by the worker)."""
    loaded: bool = False
    """Loaded by this worker (``treadle worker --tools``, a ``treadle.tools`` entry point), not part
    of the code: offered only to runs whose recorded listing names it (``Toolbox``)."""

    def json_schema(self) -> dict[str, Any]:
        """The arguments' JSON Schema, built once per tool (every model request offers it)."""
        # A fresh copy each time, parsed from its text: four times cheaper than a deepcopy.
        result: dict[str, Any] = json.loads(_schema_of(self.args))
        return result


@functools.cache
def _schema_of(args: type[ToolArgs]) -> str:
    return json.dumps(args.model_json_schema())


def _path(args: Any) -> str:
    return str(args.path)


_TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "read_file",
            "Read a text file from the workspace, optionally a range of lines.",
            ReadFileArgs,
            mutating=False,
            target=_path,
        ),
        ToolSpec(
            "write_file",
            "Create or overwrite a text file in the workspace.",
            WriteFileArgs,
            mutating=True,
            target=_path,
        ),
        ToolSpec(
            "edit_file",
            "Replace one exact occurrence of old_text with new_text in a workspace file.",
            EditFileArgs,
            mutating=True,
            target=_path,
            repeatable=False,  # new_text may hold old_text: a second run edits again
        ),
        ToolSpec(
            "list_dir",
            "List the entries of a workspace directory.",
            ListDirArgs,
            mutating=False,
            target=_path,
        ),
        ToolSpec(
            "search_files",
            "Search workspace text files for a string or regular expression.",
            SearchFilesArgs,
            mutating=False,
            target=lambda args: str(args.pattern),
        ),
        ToolSpec(
            "run_command",
            "Run an allowed program in the workspace and return its exit code and output.",
            RunCommandArgs,
            mutating=True,
            target=lambda args: str(args.command),
            repeatable=False,
        ),
        ToolSpec(
            "start_phase",
            "Declare that the task moves to its next phase (completing the current one), "
            "for long multi-phase work; progress tracking starts fresh for the new phase.",
            StartPhaseArgs,
            mutating=False,
            target=lambda args: f"phase {args.number or 'next'}",
            in_workflow=True,
        ),
        ToolSpec(
            "ask_client",
            "Ask the user's client for something only it has: a file on the user's machine, "
            "an environment variable there, or an answer only the user knows. The run waits "
            "for the answer, which comes back as this call's result.",
            AskClientArgs,
            mutating=False,
            target=lambda args: f"{args.kind} {args.what}",
            in_workflow=True,
        ),
        ToolSpec(
            "wait",
            "Pause the run on a durable timer (e.g. to check a build again later); a user "
            "message or a wake signal ends it early.",
            WaitArgs,
            mutating=False,
            target=lambda args: f"{args.seconds:g}s" if args.seconds else str(args.until),
            in_workflow=True,
        ),
        ToolSpec(
            "delegate",
            "Hand a self-contained sub-task to a sub-agent (a run of its own, sharing your "
            "workspace and your token budget); its final answer comes back as this call's "
            "result. Several delegate calls in one reply run in parallel.",
            DelegateArgs,
            mutating=True,
            target=lambda args: str(args.task).split("\n", 1)[0],
            in_workflow=True,
        ),
    )
}
TOOLS: Mapping[str, ToolSpec] = MappingProxyType(_TOOLS)
"""Every tool by name: the built-in ones, then your own in the order they were registered (a
read-only view: ``register`` adds to it)."""
BUILT_IN = tuple(TOOLS)

REMEMBER, RECALL, FORGET = "remember", "recall", "forget"
MEMORY_TOOLS = frozenset({REMEMBER, RECALL, FORGET})
"""Long-term memory's tools (``activities/memory/tools.py``): offered only to a run with
``config.memory``, on its namespace."""
"""The built-in tools' names, in the order they are offered."""

_TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class DeclaredTool(Protocol):
    """What the catalogue reads of one of your own tools (``treadle.activities.tools.custom.Tool``):
    its schema and facts; its function runs only in the tool activity."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def args(self) -> type[ToolArgs]: ...
    @property
    def mutating(self) -> bool: ...
    @property
    def idempotent(self) -> bool: ...
    @property
    def needs_approval(self) -> bool: ...
    @property
    def timeout_seconds(self) -> float | None: ...
    @property
    def target(self) -> Callable[[Any], str]: ...


def register(tools: Iterable[DeclaredTool], *, loaded: bool = False) -> None:
    """Add your own tools to the catalogue, after the built-in ones (``loaded``: by this
    worker, from a module it was pointed at). A bad registration (a name that does not fit, or
    is taken; arguments that are not ``ToolArgs``) is a programming error: ``ValueError``, and
    nothing of the batch is added, so the worker does not start."""
    specs: dict[str, ToolSpec] = {}
    for tool in tools:
        if not _TOOL_NAME.match(tool.name):
            raise ValueError(f"tool name {tool.name!r} does not match {_TOOL_NAME.pattern}")
        if tool.name in _TOOLS or tool.name in specs:
            raise ValueError(f"tool name {tool.name!r} is registered twice")
        if not (isinstance(tool.args, type) and issubclass(tool.args, ToolArgs)):
            raise ValueError(f"tool {tool.name!r}: args must subclass ToolArgs")
        specs[tool.name] = ToolSpec(
            tool.name,
            tool.description,
            tool.args,
            mutating=tool.mutating,
            target=tool.target,
            repeatable=not tool.mutating or tool.idempotent,
            needs_approval=tool.needs_approval,
            timeout_seconds=tool.timeout_seconds,
            custom=True,
            loaded=loaded,
        )
    _TOOLS.update(specs)


def loaded_names() -> tuple[str, ...]:
    """The tools this worker loaded, in the order they were registered."""
    return tuple(name for name, spec in _TOOLS.items() if spec.loaded)


class ToolArgumentsError(ValueError):
    """The model (or a human's ``modify``) gave arguments the tool cannot take."""


def parse_arguments(tool: str, arguments: str | Mapping[str, Any]) -> ToolArgs:
    """Validate raw model arguments (JSON text or a mapping) against the tool's schema."""
    spec = TOOLS.get(tool)
    if spec is None:
        raise ToolArgumentsError(
            f"unknown tool {tool[:100]!r}; available tools: {', '.join(sorted(TOOLS))}"
        )
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolArgumentsError(
                f"arguments for {tool} are not valid JSON ({exc.msg} at position {exc.pos})"
            ) from exc
        except RecursionError:
            raise ToolArgumentsError(f"arguments for {tool} are nested too deeply") from None
    else:
        decoded = dict(arguments)
    if not isinstance(decoded, dict):
        raise ToolArgumentsError(
            f"arguments for {tool} must be a JSON object, got {type(decoded).__name__}"
        )
    try:
        args = spec.args.model_validate(decoded)
    except ValidationError as exc:
        problems = describe_errors(exc, root="(arguments)")
        raise ToolArgumentsError(
            f"arguments for {tool} do not match its schema: {problems}"
        ) from exc
    try:
        args.model_dump_json()
    except PydanticSerializationError:
        # JSON can spell a lone UTF-16 surrogate ("\ud800") that no JSON encoder can write
        # back; such a call could never reach its activity, so it is an error observation.
        raise ToolArgumentsError(
            f"arguments for {tool} contain text that is not valid Unicode"
        ) from None
    return args


@functools.cache
def _schema_chars(name: str) -> int:
    return len(json.dumps(TOOLS[name].json_schema()))


def estimate_prompt_tokens(messages: Sequence[Any], tools: Sequence[str]) -> int:
    """A deterministic, slightly generous estimate of a request's prompt tokens (~4 chars each):
    the whole conversation (stored contents by their length) plus each offered tool's schema."""
    chars = sum(
        (m.content_chars if m.content_ref else len(m.content or "")) + len(m.tool_calls) * 40
        for m in messages
    )
    chars += sum(full_chars(c.arguments) for m in messages for c in m.tool_calls)
    chars += sum(_schema_chars(n) + 40 for n in tools if n in TOOLS)
    return chars // 4 + 8 * len(messages)
