"""The toolbox: every tool a run can call, built-in, your own or an MCP server's, as one kind
of thing, and the one place a call is checked.

Like pydantic-ai's toolsets (``get_tools`` / ``call_tool``, which its function tools and its
MCP servers both implement), the loop never asks what kind of tool it holds: it asks the
toolbox which tools the run offers (``offered``) and to check a call (``check``), and it runs
the ``CheckedCall`` it gets back (``acting``). A call is checked once, when the model asks for
it: its arguments parsed and validated, its target derived. The checked form is what a human
approves and what runs; a ``modify`` is checked here too and replaces it. A long argument value
(a file's content) arrives as a marker of stored text (``content_refs``): it is checked as a
string of its length, shown as its preview and size, and resolved by the tool's activity.

Pure and deterministic: the workflow, approvals and the activities' clients may all use it.
MCP's naming rule (``mcp__<server>__<tool>``) lives in ``mcp``, and only this module and that
one ask whether a name is an MCP tool's.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from treadle.workflows.agent.messages import content_refs, mcp
from treadle.workflows.agent.messages.catalogue import (
    MEMORY_TOOLS,
    TOOLS,
    ToolArgs,
    ToolArgumentsError,
    ToolSpec,
    parse_arguments,
)
from treadle.workflows.agent.messages.mcp import McpToolInfo, McpToolList
from treadle.workflows.agent.messages.models import AgentConfig, ToolCall, ToolSchema

SUMMARY_TARGET_CHARS = 60
"""An activity summary names its target ("step 4 · read_file src/main.rs") up to this long."""


def short_target(target: str) -> str:
    """``target`` cut to ``SUMMARY_TARGET_CHARS``."""
    if len(target) > SUMMARY_TARGET_CHARS:
        return target[: SUMMARY_TARGET_CHARS - 1] + "…"
    return target


Runs = Literal["workflow", "activity", "mcp"]
"""Where a tool runs: in the workflow itself (``start_phase``, ``ask_client``), in the
``run_tool`` activity (built-in and your own), or in ``call_mcp_tool`` (an MCP server's)."""


@dataclass(frozen=True)
class OfferedTool:
    """One tool as the run knows it, whatever its kind."""

    name: str
    """What the model calls it."""
    runs: Runs
    mutating: bool
    """A successful call may change something (files, a server's state)."""
    needs_approval: bool
    """Declared by the tool (or, for an MCP tool, hinted by its server)."""
    spec: ToolSpec | None = None
    """A catalogue tool's entry: its argument model, target and timeout."""
    mcp: McpToolInfo | None = None
    """An MCP tool's listing: its server, own name, schema and timeouts."""

    def schema(self) -> ToolSchema:
        """The tool as the model is shown it, for tools outside the catalogue (whose schemas
        the model activity builds by name)."""
        if self.mcp is None:
            raise ValueError(f"{self.name} is a catalogue tool: it is offered by name")
        info = self.mcp
        if info.schema_ref is None:  # inline: a worker without a store, or a recorded run
            return ToolSchema(
                name=info.name, description=info.description, parameters=info.input_schema
            )
        return ToolSchema(
            name=info.name,
            description=info.description,
            parameters_ref=info.schema_ref,
            parameters_chars=info.schema_chars,
        )


@dataclass(frozen=True)
class CheckedCall:
    """One call, checked: the tool it names, its parsed arguments and what it acts on.

    ``problem`` says why it cannot run (an unknown tool, arguments that do not parse or do not
    match the schema, an MCP tool the run does not offer); its observation is ``error``.
    ``arguments`` is set whenever they parsed, even for a tool the run does not offer, so a
    human can still be asked about it."""

    call: ToolCall
    tool: OfferedTool | None
    arguments: dict[str, Any] | None
    """What a human decides on: the schema-checked arguments (a catalogue tool), or the JSON
    object (an MCP tool: its server checks its own schema)."""
    args: ToolArgs | None
    """A catalogue tool's validated argument model."""
    target: str
    """The file, command or thing the call acts on; ``""`` when it cannot be told."""
    problem: str | None = None
    placeholders: content_refs.Placeholders = field(default_factory=dict)
    """Stored argument values (``content_refs``): ``args`` holds placeholders for them,
    ``arguments`` and the tool activity's request their markers."""

    @property
    def error(self) -> str | None:
        """The call's observation when it cannot run."""
        return None if self.problem is None else f"ERROR: {self.problem}"

    @property
    def short_target(self) -> str:
        """``target`` cut to a line's worth, for summaries and events."""
        return short_target(self.target)

    @property
    def progress_target(self) -> str:
        """What progress tracking counts the call against (the tool's name when the call
        was malformed, or for an MCP call whose arguments name nothing)."""
        if self.call.name in TOOLS:
            return self.target if self.args is not None else self.call.name
        return self.target or self.call.name

    def with_id(self, call_id: str) -> CheckedCall:
        """The same check for the call renamed to a run-unique id."""
        if call_id == self.call.id:
            return self
        return replace(self, call=self.call.model_copy(update={"id": call_id}))

    def request_arguments(self, *, previews: bool = False) -> str:
        """The arguments as the tool's activity receives them: the checked model as JSON, with
        stored values as their markers (which the activity resolves; without their previews,
        which are for people, unless ``previews``)."""
        if self.args is not None and self.placeholders:
            dumped = content_refs.restore(
                self.args.model_dump(mode="json"), self.placeholders, previews=previews
            )
            return json.dumps(dumped, separators=(",", ":"), ensure_ascii=False)
        if self.args is not None:
            return self.args.model_dump_json()
        return json.dumps(self.arguments or {}, separators=(",", ":"))


def may_delegate(config: AgentConfig) -> bool:
    """The run offers ``delegate``: sub-agents are on and its children stay within depth."""
    sub = config.subagents
    return sub is not None and sub.depth < sub.max_depth


def _catalogue_tool(spec: ToolSpec) -> OfferedTool:
    return OfferedTool(
        name=spec.name,
        runs="workflow" if spec.in_workflow else "activity",
        mutating=spec.mutating,
        needs_approval=spec.needs_approval,
        spec=spec,
    )


def _mcp_tool(info: McpToolInfo) -> OfferedTool:
    return OfferedTool(
        name=info.name,
        runs="mcp",
        mutating=info.mutating,
        needs_approval=info.needs_approval,
        mcp=info,
    )


class Toolbox:
    """The tools one run knows: the catalogue's (built-in and your own), the ones the worker
    loaded from your modules that the run listed, and the MCP tools it listed. Built from the
    run's config and listings, whenever needed (it holds no state)."""

    def __init__(
        self,
        config: AgentConfig,
        listed: McpToolList | None = None,
        loaded: Collection[str] | None = None,
    ) -> None:
        self.config = config
        self.listed = listed
        self.loaded = frozenset(loaded or ())

    def knows(self, name: str) -> bool:
        """A catalogue tool this run may call: not one the worker loaded that the run's
        recorded listing does not name (another worker's, or loaded after the run began)."""
        spec = TOOLS.get(name)
        return spec is not None and (not spec.loaded or name in self.loaded)

    # ----------------------------------------------------------------------------------------
    # What the run offers
    # ----------------------------------------------------------------------------------------

    def offered_names(self) -> tuple[str, ...]:
        """The catalogue tools this run offers: its choice (``config.tools``, or all of them)
        less blacklisted ones, less ``run_command`` unless the run allows it, less
        ``ask_client`` without client queries, less ``wait`` when ``max_wait_seconds`` is 0,
        less ``delegate`` unless the run may start children
        (``may_delegate``), less the memory tools without ``memory``. In the catalogue's
        order."""
        config = self.config
        chosen = TOOLS if config.tools is None else config.tools
        return tuple(
            name
            for name in TOOLS
            if name in chosen
            and self.knows(name)
            and name not in config.blacklisted_tools
            and (name != "run_command" or config.allow_run_command)
            and (name != "ask_client" or config.client_queries)
            and (name != "wait" or config.max_wait_seconds > 0)
            and (name != "delegate" or may_delegate(config))
            and (name not in MEMORY_TOOLS or config.memory is not None)
        )

    def offered_mcp(self) -> tuple[OfferedTool, ...]:
        """The listed MCP tools this run offers: all of them, or those ``config.tools`` names;
        less blacklisted ones."""
        config = self.config
        if self.listed is None:
            return ()
        return tuple(
            _mcp_tool(info)
            for info in self.listed.tools
            if (config.tools is None or info.name in config.tools)
            and info.name not in config.blacklisted_tools
        )

    def offered(self) -> tuple[OfferedTool, ...]:
        """Every tool the model is shown, catalogue tools first."""
        return (*(_catalogue_tool(TOOLS[n]) for n in self.offered_names()), *self.offered_mcp())

    def approval_required(self) -> frozenset[str]:
        """Tools whose calls wait for a human in this run: the run's ``require_approval``,
        every tool that declares ``needs_approval``, and the MCP tools ``config.mcp_approval``
        picks (``hints``: those the server does not mark safe; ``all``; ``listed``: none)."""
        declared = {name for name, spec in TOOLS.items() if spec.needs_approval}
        policy = self.config.mcp_approval
        hinted = {
            tool.name
            for tool in self.offered_mcp()
            if policy == "all" or (policy == "hints" and tool.needs_approval)
        }
        return frozenset(self.config.require_approval) | declared | hinted

    def mutates(self, name: str) -> bool:
        """Whether a call of tool ``name`` may change things (files, a server's state)."""
        spec = TOOLS.get(name)
        if spec is not None:
            return spec.mutating
        listed = self.listed.find(name) if self.listed is not None else None
        return listed.mutating if listed is not None else False

    def missing(self) -> tuple[str, ...]:
        """MCP tools ``config.tools`` names that no listed server offers."""
        return tuple(
            sorted(
                name
                for name in self.config.tools or ()
                if mcp.is_mcp_name(name) and (self.listed is None or self.listed.find(name) is None)
            )
        )

    # ----------------------------------------------------------------------------------------
    # Checking a call: once
    # ----------------------------------------------------------------------------------------

    def check(self, call: ToolCall, arguments: Mapping[str, Any] | None = None) -> CheckedCall:
        """``call`` checked against the tool it names (with ``arguments`` instead of its own,
        for a human's ``modify``)."""
        raw: str | Mapping[str, Any] = call.arguments if arguments is None else arguments
        if mcp.is_mcp_name(call.name):
            return self._check_mcp(call, raw)
        if call.name in TOOLS and not self.knows(call.name):
            return CheckedCall(
                call, None, None, None, "", f"tool {call.name} is not offered in this run"
            )
        try:
            args, placeholders = parse_with_refs(call.name, raw)
        except ToolArgumentsError as exc:
            return CheckedCall(call, None, None, None, "", problem=str(exc))
        spec = TOOLS[call.name]
        checked: dict[str, Any] = content_refs.restore(args.model_dump(), placeholders)
        return CheckedCall(
            call, _catalogue_tool(spec), checked, args, spec.target(args), None, placeholders
        )

    def _check_mcp(self, call: ToolCall, raw: str | Mapping[str, Any]) -> CheckedCall:
        offered = next((t for t in self.offered_mcp() if t.name == call.name), None)
        arguments: dict[str, Any] | None = None
        problem: str | None = None
        try:
            arguments = mcp.parse_arguments(call.name, raw if isinstance(raw, str) else dict(raw))
        except mcp.McpArgumentsError as exc:
            problem = str(exc)
        target = mcp.call_target(arguments) if arguments is not None else ""
        if offered is None:
            why = self.listed.why_not_offered(call.name) if self.listed is not None else ""
            problem = f"tool {call.name} is not offered in this run{why}"
        return CheckedCall(call, offered, arguments, None, target, problem)


def parse_with_refs(
    tool: str, arguments: str | Mapping[str, Any]
) -> tuple[ToolArgs, content_refs.Placeholders]:
    """``parse_arguments`` for arguments that may hold markers of stored values: each is
    checked as a string of its length (``content_refs.with_placeholders``)."""
    decoded: Any = arguments
    if isinstance(arguments, str):
        if content_refs.REF not in arguments:
            return parse_arguments(tool, arguments), {}
        try:
            decoded = json.loads(arguments)
        except (ValueError, RecursionError):
            return parse_arguments(tool, arguments), {}  # its error says why
    if not isinstance(decoded, Mapping):
        return parse_arguments(tool, arguments), {}
    replaced, placeholders = content_refs.with_placeholders(dict(decoded))
    args = parse_arguments(tool, replaced)
    # A schema that rewrites strings (strips, lowers) would turn a placeholder into text the
    # tool then writes: such a tool cannot take stored values.
    kept = content_refs.restore(args.model_dump(mode="json"), placeholders)
    if {r[content_refs.REF] for r in content_refs.refs_in(kept)} != {
        r[content_refs.REF] for r in placeholders.values()
    }:
        raise ToolArgumentsError(f"arguments for {tool}: a stored value does not fit its schema")
    return args, placeholders


def call_target(tool: str, arguments: str | Mapping[str, Any]) -> str:
    """The file or command a call acts on, shortened for a line; ``""`` if it cannot be told.
    (For a call the run has not checked: a client's view of a pending approval.)"""
    if mcp.is_mcp_name(tool):
        raw = dict(arguments) if isinstance(arguments, Mapping) else arguments
        return short_target(mcp.call_target(raw))
    try:
        args, _ = parse_with_refs(tool, arguments)
    except ToolArgumentsError:
        return ""
    return short_target(TOOLS[tool].target(args))


def progress_target(call: ToolCall) -> str:
    """What a past call acted on, for summaries of the history (the tool's name when the call
    was malformed)."""
    spec = TOOLS.get(call.name)
    if spec is None:
        # An MCP tool: what its arguments name (the same call repeated is the same target).
        return (mcp.call_target(call.arguments) if mcp.is_mcp_name(call.name) else "") or call.name
    try:
        return spec.target(parse_with_refs(call.name, call.arguments)[0])
    except ToolArgumentsError:
        return call.name
