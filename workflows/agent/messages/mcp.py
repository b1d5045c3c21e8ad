"""MCP tools as the workflow sees them: typed messages of the two MCP activities, and the rule
that names an MCP tool for the model.

``list_mcp_tools(McpListRequest) -> McpToolList`` tells a run which tools the worker's MCP
servers offer; ``call_mcp_tool(McpCallRequest) -> ToolResult`` runs one of them. Both live in
``activities/mcp``. This module is pure data (no I/O, no clock), so the workflow sandbox may
import it.

**Names.** The model sees an MCP tool as ``mcp__<server>__<tool>``. OpenAI accepts tool names
matching ``^[a-zA-Z0-9_-]{1,64}$``, and an MCP tool name may hold other characters (``.``,
``/``) and be up to 128 long, so ``namespaced_name`` makes every name fit:

1. every character of the tool name outside ``[a-zA-Z0-9_-]`` becomes ``_``;
2. when that changed the name, or the result is longer than 64 characters, the name is cut to
   55 characters and ``_`` plus 8 hex digits of ``sha256("<server>/<tool>")`` is appended, so
   two tools that sanitise or cut to the same text still get different names.

Names that needed no change stay as they are (``mcp__github__create_issue``). A server name is
``[a-z0-9_-]``, at most 32 characters and never contains ``__``, so the first ``__`` after the
prefix always ends it; the workflow never parses names, though: ``McpToolList.find`` maps a
name back to its ``McpToolInfo`` (server and original tool name).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field, field_validator
from pydantic_core import PydanticSerializationError, to_json

from treadle.workflows.base import Frozen, Lean

__all__ = [
    "ALL_SERVERS",
    "CALL_GRACE_SECONDS",
    "MAX_SCHEMA_BYTES",
    "MCP_PREFIX",
    "NOT_CONFIGURED",
    "TOOL_NAME",
    "McpArgumentsError",
    "McpCallRequest",
    "McpListRequest",
    "McpRelisting",
    "McpToolInfo",
    "McpToolList",
    "call_target",
    "check_server_name",
    "is_mcp_name",
    "is_tool_name",
    "namespaced_name",
    "parse_arguments",
    "server_of",
    "unique_names",
    "vanished",
]

MCP_PREFIX = "mcp__"
"""Every MCP tool's name starts with this; no built-in or custom tool's does."""
MAX_TOOL_NAME_CHARS = 64
"""The longest tool name OpenAI's API accepts."""
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What OpenAI's API accepts as a tool name; every ``namespaced_name`` matches it."""
SERVER_NAME = re.compile(r"^[a-z0-9_-]{1,32}$")
"""A configured server's name (and ``__`` is refused besides: it separates the parts)."""
MAX_DESCRIPTION_CHARS = 2_000
"""A tool description longer than this is cut: it travels with every model call."""
MAX_SCHEMA_BYTES = 64 * 1024
"""A tool whose input schema is larger than this (as compact UTF-8 JSON) is refused: the
worker does not offer it (an ``mcp_tools`` trace line says why) and the server's other tools
are offered as usual. Schemas are stored once and referenced, so the limit is for the
provider's sake (every call sends every offered schema), not the history's."""
CALL_GRACE_SECONDS = 10.0
"""Added to connect and call timeouts for an attempt's start-to-close timeout: time to start a
server, translate its answer and store a long output, so the activity's own timeouts (which say
what happened) fire before Temporal's (which only say that time ran out)."""

ALL_SERVERS = "*"
"""In ``AgentConfig.mcp_servers``: every server the worker has."""
NOT_CONFIGURED = "not configured on this worker"
"""How ``list_mcp_tools`` begins the reason of a server the worker does not have: a run does
not list it again (``workflows/agent/mcp_listing``), as it does a server that did not answer."""
MAX_ARGUMENTS_CHARS = 100_000
"""An MCP call's arguments longer than this (as JSON) are refused before anything runs: they
would sit in history twice (the model's call and the activity's input)."""
TARGET_KEYS = ("path", "file", "filename", "url", "uri", "command", "query", "name", "id")
"""Argument names whose string value says what an MCP call acts on (first match wins)."""

_HASH_CHARS = 8
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def check_server_name(name: str) -> str:
    """``name`` when it can namespace tools; ``ValueError`` saying why not otherwise."""
    if not SERVER_NAME.match(name):
        raise ValueError(
            f"{name!r} is not a server name: use 1-32 of a-z, 0-9, '_' and '-' (it prefixes "
            "the tool names the model sees)"
        )
    if "__" in name:
        raise ValueError(f"{name!r} is not a server name: '__' separates the parts of tool names")
    return name


def namespaced_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server`` (the rule is in the module docstring)."""
    clean = _UNSAFE.sub("_", tool)
    name = f"{MCP_PREFIX}{server}__{clean}"
    if clean == tool and len(name) <= MAX_TOOL_NAME_CHARS:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{name[: MAX_TOOL_NAME_CHARS - _HASH_CHARS - 1]}_{digest}"


def is_mcp_name(name: str) -> bool:
    """Whether a tool name the model used names an MCP tool."""
    return name.startswith(MCP_PREFIX)


def is_tool_name(name: str) -> bool:
    """Whether a name in a run's config can name an MCP tool (known only once listed)."""
    return is_mcp_name(name) and TOOL_NAME.match(name) is not None


def server_of(name: str) -> str | None:
    """The server an MCP tool's name names (``None``: not an MCP tool's name). Only for
    config checks: the workflow maps a listed name back with ``McpToolList.find``."""
    if not is_mcp_name(name):
        return None
    return name.removeprefix(MCP_PREFIX).split("__", 1)[0]


class McpArgumentsError(ValueError):
    """An MCP call's arguments are not a JSON object (the model reads why, as an ``ERROR:``)."""


def parse_arguments(name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    """The model's arguments for MCP tool ``name`` as a JSON object, or ``McpArgumentsError``.

    Only the shape is checked here: the server checks its own schema and a refusal comes back
    as the call's ``ERROR:`` observation (the workflow does not carry a JSON Schema validator).
    """
    if isinstance(arguments, dict):
        value: Any = arguments
        size = len(json.dumps(arguments, default=str))
    else:
        size = len(arguments)
        if size > MAX_ARGUMENTS_CHARS:
            raise McpArgumentsError(
                f"arguments for {name} are {size} characters; at most {MAX_ARGUMENTS_CHARS}"
            )
        try:
            value = json.loads(arguments or "{}")
        except (ValueError, RecursionError) as exc:
            raise McpArgumentsError(f"arguments for {name} are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise McpArgumentsError(
            f"arguments for {name} must be a JSON object, not {type(value).__name__}"
        )
    if size > MAX_ARGUMENTS_CHARS:
        raise McpArgumentsError(
            f"arguments for {name} are {size} characters; at most {MAX_ARGUMENTS_CHARS}"
        )
    try:
        # What parses may still not encode again (a lone surrogate, nesting past the
        # serialiser's depth): the activity's input must, or the workflow task fails.
        to_json(value)
    except (PydanticSerializationError, ValueError, RecursionError) as exc:
        raise McpArgumentsError(f"arguments for {name} cannot be sent: {exc}") from None
    return value


def call_target(arguments: str | dict[str, Any]) -> str:
    """What an MCP call acts on, for progress tracking and one-line summaries: the first string
    among ``TARGET_KEYS``, else the arguments as compact JSON (so the same call repeated is the
    same target); ``""`` when they do not parse."""
    try:
        args = parse_arguments("", arguments)
    except McpArgumentsError:
        return ""
    for key in TARGET_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return json.dumps(args, sort_keys=True, separators=(",", ":"), default=str) if args else ""


def vanished(server: str, tool: str) -> str:
    """The text of a call to a tool its server no longer offers (without ``ERROR: ``); the
    activity answers it and the workflow then stops offering the tool."""
    return f"tool {tool} is no longer offered by server {server}"


class McpToolInfo(Frozen):
    """One tool an MCP server offers, as listed by ``list_mcp_tools``."""

    name: str = Field(pattern=TOOL_NAME.pattern)
    """What the model sees and calls: ``mcp__<server>__<tool>`` (see ``namespaced_name``)."""
    server: str
    """The configured server's name."""
    tool: str
    """The tool's own name on its server: what ``McpCallRequest.tool`` carries."""
    description: str = ""
    """The server's description (or title), cut to ``MAX_DESCRIPTION_CHARS``."""
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    """The JSON Schema of the arguments, as the server declared it (an object schema), when
    it travels inline: from a worker that keeps no store. With ``schema_ref`` set it is this
    placeholder, and the model activity reads the schema from the store."""
    schema_ref: str | None = None
    """The input schema as a blob in the worker's store (compact JSON), stored once per
    distinct schema: the workflow carries this key, never the schema, so neither the listing
    nor any model request puts it in history."""
    schema_chars: int | None = None
    """The stored schema's length in characters (for the run's token estimates)."""
    mutating: bool = True
    """``False`` only when the server marks the tool read-only (``readOnlyHint``): a tool
    without annotations may change anything, so it counts as mutating."""
    needs_approval: bool = True
    """A hint from the server's annotations: mutating and not marked non-destructive
    (``destructiveHint: false``). Annotations come from the server, so the run's own approval
    policy decides; this is what to do when it names nothing."""
    timeout_seconds: float = Field(60.0, gt=0)
    """How long one call may take on the server (the server's ``timeout_seconds``)."""
    connect_timeout_seconds: float = Field(10.0, gt=0)
    """How long starting or reaching the server may take (its ``list_timeout_seconds``)."""

    def attempt_timeout(self, timeout_seconds: float | None = None) -> timedelta:
        """The start-to-close timeout for one ``call_mcp_tool`` attempt: connecting, the
        call (``timeout_seconds`` when the request overrides the server's) and a grace."""
        call = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        return timedelta(seconds=self.connect_timeout_seconds + call + CALL_GRACE_SECONDS)


class McpToolList(Frozen):
    """What ``list_mcp_tools`` answers: the tools of the servers that answered, and why the
    others did not."""

    tools: tuple[McpToolInfo, ...] = ()
    unavailable: dict[str, str] = Field(default_factory=dict)
    """server name -> why its tools are missing (not configured, down, too slow...); and the
    namespaced name of a tool the worker refused (``mcp__...``, see ``refused``) -> why (its
    schema too large or unusable). A server's name never starts with ``mcp__`` (it holds no
    ``__``), so the two kinds of key never meet."""
    listed_at: datetime
    """When the oldest of these listings was made (the worker caches listings)."""

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, tools: tuple[McpToolInfo, ...]) -> tuple[McpToolInfo, ...]:
        names = [tool.name for tool in tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate tool name(s): {', '.join(duplicates)}")
        return tools

    def find(self, name: str) -> McpToolInfo | None:
        """The tool the model calls ``name``, if one of these servers offers it."""
        return next((tool for tool in self.tools if tool.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)

    def servers(self) -> tuple[str, ...]:
        """The servers that answered, in listing order."""
        return tuple(dict.fromkeys(tool.server for tool in self.tools))

    def without(self, name: str) -> McpToolList:
        """This list less the tool the model calls ``name`` (it vanished from its server)."""
        return self.model_copy(update={"tools": tuple(t for t in self.tools if t.name != name)})

    def refused(self) -> dict[str, str]:
        """Tools a server listed that the worker does not offer -> why (see ``unavailable``)."""
        return {name: why for name, why in self.unavailable.items() if is_mcp_name(name)}

    def servers_unavailable(self) -> dict[str, str]:
        """Servers whose tools are all missing -> why."""
        return {name: why for name, why in self.unavailable.items() if not is_mcp_name(name)}

    def why_not_offered(self, name: str) -> str:
        """What to add to "tool ``name`` is not offered in this run": why it was refused, or
        which servers could not be listed (``""``: neither)."""
        refused = self.refused().get(name)
        if refused is not None:
            return f": refused by the worker, {refused}"
        servers = self.servers_unavailable()
        return f" (MCP servers unavailable: {', '.join(servers)})" if servers else ""

    def describe(self) -> str:
        """One trace line: how many tools from which servers, which servers are missing and
        which tools were refused, each with why."""
        servers = ", ".join(self.servers()) or "no server"
        line = f"{len(self.tools)} MCP tool(s) from {servers}"
        missing = self.servers_unavailable()
        if missing:
            line += "; unavailable: " + "; ".join(f"{name}: {why}" for name, why in missing.items())
        refused = self.refused()
        if refused:
            line += "; refused: " + "; ".join(f"{name}: {why}" for name, why in refused.items())
        return line


class McpListRequest(Frozen):
    """Input of ``list_mcp_tools``."""

    servers: tuple[str, ...] = ()
    """The servers to list, by configured name; empty: every server the worker has."""
    refresh: bool = False
    """Ask the servers again instead of answering from the worker's cache."""


class McpRelisting(Frozen):
    """A run's listing again of the MCP servers its listings missed
    (``workflows/agent/mcp_listing``), carried across continue-as-new."""

    tries: int = Field(0, ge=0)
    """Listings made again so far."""
    due: int = Field(ge=0)
    """The next one is made when the run's step count reaches this (before step ``due + 1``)."""


class McpCallRequest(Lean):
    """Input of ``call_mcp_tool``: one call the workflow has decided to run."""

    server: str = Field(min_length=1, max_length=32)
    tool: str = Field(min_length=1, max_length=256)
    """The tool's own name on the server (``McpToolInfo.tool``), not the namespaced one."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The model's arguments, already parsed from JSON; the server checks them against its
    schema (a refusal comes back as ``success=False``)."""
    call_id: str = Field(min_length=1, max_length=200)
    step: int = Field(0, ge=0)
    timeout_seconds: float | None = Field(None, gt=0, le=24 * 3600)
    """Overrides the server's ``timeout_seconds`` for this call."""
    max_output_chars: int = Field(12_000, ge=100)
    """The run's ``ToolPolicy.max_output_chars``: longer text is cut, as for built-in tools."""
    sent_before: bool = False
    """An earlier activity of this call, lost with its worker, had marked it sent: a tool not
    safe to repeat is not called again (``ToolRequest.sent_before``)."""


def unique_names(pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """``namespaced_name`` for each (server, tool), with a counter mixed into the hash in the
    (astronomically unlikely) case that two hashes collide, so every name is unique."""
    taken: dict[str, tuple[str, str]] = {}
    result: dict[tuple[str, str], str] = {}
    for server, tool in pairs:
        if (server, tool) in result:
            continue
        name, attempt = namespaced_name(server, tool), 0
        while name in taken:
            attempt += 1
            digest = hashlib.sha256(f"{server}/{tool}#{attempt}".encode()).hexdigest()
            name = f"{name[: MAX_TOOL_NAME_CHARS - _HASH_CHARS - 1]}_{digest[:_HASH_CHARS]}"
        taken[name] = (server, tool)
        result[(server, tool)] = name
    return result
