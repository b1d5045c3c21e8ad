"""An MCP server whose tools list schemas of any size or shape: what a worker refuses, and
what it stores once, is tested against it.

    python -m tests.mcp.schema_server --wide-bytes N   # stdio, from the project root

``ping(text)`` (read-only) answers ``pong: <text>`` and lists its ordinary schema. Tools listed
only when asked for (each answers like ``ping``, whatever its listed schema says):
``huge`` with a valid schema of ``--huge-bytes``; ``wide`` with a valid schema of about
``--wide-bytes`` (its padding holds ``MARKER``); ``remote`` with a ``$ref`` to another
document and ``dangling`` with a ``$ref`` to nothing (both ``--broken``). (The SDK's
server refuses to list a schema that is not an object schema, so none is tested here.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from tests.support.processes import ROOT

MARKER = "schema-padding-7f3a"
"""Repeated in the padding of ``wide``'s schema: its bytes, if they reach a history."""


def padded_schema(size: int) -> dict[str, Any]:
    """A valid object schema of about ``size`` bytes (a long description of ``text``)."""
    padding = (MARKER + " ") * (max(0, size - 200) // (len(MARKER) + 1) + 1)
    return {
        "type": "object",
        "properties": {"text": {"type": "string", "description": padding[: max(1, size - 200)]}},
        "required": ["text"],
    }


class SchemaServer(MCPServer):
    """Lists the tools this process was asked for, with their made-up schemas."""

    def __init__(self, schemas: dict[str, dict[str, Any]]) -> None:
        super().__init__("treadle-schemas", log_level="WARNING")
        self.schemas = schemas
        for name in ("ping", *schemas):
            self.add_tool(pong, name=name, annotations=ToolAnnotations(read_only_hint=True))

    async def list_tools(self) -> Any:
        tools = await super().list_tools()
        for tool in tools:
            if tool.name in self.schemas:
                tool.input_schema = self.schemas[tool.name]
        return tools


def pong(text: str) -> str:
    """Answer the text."""
    return f"pong: {text}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--huge-bytes", type=int, default=0)
    parser.add_argument("--wide-bytes", type=int, default=0)
    parser.add_argument("--broken", action="store_true")
    args = parser.parse_args(argv)
    schemas: dict[str, dict[str, Any]] = {}
    if args.huge_bytes:
        schemas["huge"] = padded_schema(args.huge_bytes)
    if args.wide_bytes:
        schemas["wide"] = padded_schema(args.wide_bytes)
    if args.broken:
        schemas["remote"] = {
            "type": "object",
            "properties": {"text": {"$ref": "https://example.com/schemas/text.json"}},
        }
        schemas["dangling"] = {
            "type": "object",
            "properties": {"text": {"$ref": "#/$defs/Missing"}},
        }
    SchemaServer(schemas).run("stdio")


def entry(name: str, *arguments: str) -> dict[str, Any]:
    """A ``[[servers]]`` entry that starts this server over stdio with ``arguments``."""
    return {
        "name": name,
        "command": sys.executable,
        "args": ["-m", "tests.mcp.schema_server", *arguments],
        "cwd": str(ROOT),
        "timeout_seconds": 60,
        "list_timeout_seconds": 60,
    }


if __name__ == "__main__":
    main()
