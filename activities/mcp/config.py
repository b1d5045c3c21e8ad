"""The worker's MCP servers: a TOML file read once at start-up (``treadle worker --mcp-config``).

TOML, like the ``temporal.toml`` that holds the worker's Temporal connection: comments for the
operator, ``tomllib`` from the standard library, and Codex CLI's MCP configuration is TOML too.
One ``[[servers]]`` table per server::

    [[servers]]
    name = "files"                       # namespace: the model sees mcp__files__<tool>
    command = "npx"                      # stdio: the worker starts this process
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"]
    env = ["GITHUB_TOKEN"]               # NAMES of worker variables passed through, no values
    cwd = "/srv"                         # relative: to this file's directory
    timeout_seconds = 60                 # one tool call
    list_timeout_seconds = 10            # starting or reaching the server, listing its tools

    [[servers]]
    name = "search"
    url = "https://mcp.example.com/mcp"  # streamable HTTP
    headers_from_env = { Authorization = "SEARCH_MCP_AUTHORIZATION" }  # header -> variable

Secrets never sit in the file: ``env`` and ``headers_from_env`` name variables of the worker's
environment, read when a server is started or reached (and checked to exist at start-up). A
stdio server inherits only what the ``mcp`` SDK passes by default (``HOME``, ``LOGNAME``,
``PATH``, ``SHELL``, ``TERM``, ``USER``) plus the variables named. Unknown keys are an error,
so a typo fails loudly instead of being ignored.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator

from treadle.activities.mcp.errors import McpConfigError
from treadle.workflows.agent.messages.mcp import check_server_name
from treadle.workflows.base import Frozen, describe_errors

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP header name (RFC 9110 token)."""
MAX_ERRORS_SHOWN = 3
"""A config error is one line: at most this many problems, then "(and N more)"."""


class McpServerConfig(Frozen):
    """One MCP server: a ``command`` the worker starts (stdio) or a ``url`` (streamable HTTP)."""

    name: str
    """Namespace of the server's tools (``mcp__<name>__<tool>``): ``[a-z0-9_-]``, 1-32."""
    command: str | None = Field(None, min_length=1)
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    """Names of worker environment variables passed to the process (never values)."""
    cwd: Path | None = None
    url: str | None = Field(None, min_length=1)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """HTTP header name -> the worker environment variable holding its value."""
    timeout_seconds: float = Field(60.0, gt=0, le=24 * 3600)
    """How long one tool call may take."""
    list_timeout_seconds: float = Field(10.0, gt=0, le=600)
    """How long starting (or reaching) the server and listing its tools may take."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_server_name(value)

    @field_validator("env", mode="before")
    @classmethod
    def _env_is_names(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            raise ValueError(
                "list the NAMES of worker environment variables to pass through "
                '(env = ["API_TOKEN"]); values never go in this file'
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [name for name in value if not ENV_NAME.match(name)]
        if bad:
            raise ValueError(f"not an environment variable name: {', '.join(map(repr, bad))}")
        return value

    @field_validator("headers_from_env")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for header, variable in value.items():
            if not HEADER_NAME.match(header):
                raise ValueError(f"{header!r} is not an HTTP header name")
            if not ENV_NAME.match(variable):
                raise ValueError(
                    f"{header}: {variable!r} is not an environment variable name (the value "
                    "is read from the worker's environment, never written here)"
                )
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise ValueError("credentials in the URL: pass them with headers_from_env instead")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        if self.url is not None:
            stdio_only = [f for f in ("args", "env", "cwd") if f in self.model_fields_set]
            if stdio_only:
                raise ValueError(f"{', '.join(stdio_only)}: only for a command (stdio) server")
        elif self.headers_from_env:
            raise ValueError("headers_from_env: only for a url (streamable HTTP) server")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def variables(self) -> tuple[str, ...]:
        """Every environment variable this server needs from the worker."""
        return (*self.env, *self.headers_from_env.values())


class McpConfig(Frozen):
    """Every MCP server of one worker. Empty: the worker offers no MCP tools."""

    servers: tuple[McpServerConfig, ...] = ()

    @field_validator("servers")
    @classmethod
    def _unique(cls, servers: tuple[McpServerConfig, ...]) -> tuple[McpServerConfig, ...]:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"server name(s) used twice: {', '.join(duplicates)}")
        return servers

    def get(self, name: str) -> McpServerConfig | None:
        return next((server for server in self.servers if server.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(server.name for server in self.servers)


def load_mcp_config(path: Path, environ: Mapping[str, str]) -> McpConfig:
    """Read and check the config file; ``McpConfigError`` (one line) when it cannot be used.

    A relative ``cwd`` is made relative to the file's directory. Every variable the servers
    name must be set in ``environ``: a missing secret is found at start-up, not at the first
    call of a run.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise McpConfigError(f"MCP config {path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"MCP config {path}: cannot read it ({_one_line(exc)})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise McpConfigError(f"MCP config {path}: not valid TOML: {_one_line(exc)}") from exc
    config = parse_mcp_config(data, where=f"MCP config {path}")
    missing = [
        f"server {server.name!r} needs {variable}"
        for server in config.servers
        for variable in server.variables()
        if variable not in environ
    ]
    if missing:
        raise McpConfigError(
            f"MCP config {path}: environment variable(s) not set: {'; '.join(missing)}"
        )
    servers = tuple(
        server.model_copy(update={"cwd": path.parent.absolute() / server.cwd})
        if server.cwd is not None and not server.cwd.is_absolute()
        else server
        for server in config.servers
    )
    return config.model_copy(update={"servers": servers})


def parse_mcp_config(data: Any, *, where: str = "MCP config") -> McpConfig:
    """Validate parsed TOML (or JSON-like data); problems name the server and field."""
    if not isinstance(data, Mapping):
        raise McpConfigError(f"{where}: expected a table with [[servers]] entries")
    unknown = sorted(set(data) - {"servers"})
    if unknown:
        raise McpConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} (only [[servers]] tables belong here)"
        )
    raw_servers = data.get("servers", [])
    if not isinstance(raw_servers, list):
        raise McpConfigError(f"{where}: servers must be [[servers]] tables")
    problems: list[str] = []
    servers: list[McpServerConfig] = []
    for index, raw in enumerate(raw_servers, start=1):
        label = _label(index, raw)
        try:
            servers.append(McpServerConfig.model_validate(raw))
        except ValidationError as exc:
            problems.append(f"{label}: {describe_errors(exc, root=None, limit=MAX_ERRORS_SHOWN)}")
    if problems:
        shown = "; ".join(problems[:MAX_ERRORS_SHOWN])
        more = len(problems) - MAX_ERRORS_SHOWN
        raise McpConfigError(f"{where}: {shown}" + (f" (and {more} more)" if more > 0 else ""))
    try:
        return McpConfig(servers=tuple(servers))
    except ValidationError as exc:
        raise McpConfigError(f"{where}: {describe_errors(exc, root=None)}") from exc


def _label(index: int, raw: Any) -> str:
    """How a problem names its server: by name when the entry has a usable one."""
    name = raw.get("name") if isinstance(raw, Mapping) else None
    if isinstance(name, str) and name:
        return f"server {name!r}"
    return f"server #{index}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
