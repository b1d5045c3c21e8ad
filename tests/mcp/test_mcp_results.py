"""How an MCP tool's listing and result become what the model reads (activities/mcp/results.py)."""

from __future__ import annotations

import base64

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)

from treadle.activities.mcp import parse_mcp_config
from treadle.activities.mcp.results import NO_OUTPUT, result_text, tool_info

PNG = base64.b64encode(b"\x89PNG" + b"\x00" * 96).decode()


def test_text_blocks_are_joined_and_binary_is_a_placeholder() -> None:
    """Text reads as text; images, audio and blobs are one line saying what was left out."""
    result = CallToolResult(
        content=[
            TextContent(type="text", text="first"),
            ImageContent(type="image", data=PNG, mime_type="image/png"),
            AudioContent(type="audio", data=PNG, mime_type="audio/wav"),
            ResourceLink(type="resource_link", uri="file:///a.txt", name="a.txt"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="file:///b.txt", text="embedded text"),
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(uri="file:///c.bin", blob=PNG, mime_type="x/y"),
            ),
        ]
    )
    assert result_text(result).splitlines() == [
        "first",
        "[image image/png, 100 bytes, not shown]",
        "[audio audio/wav, 100 bytes, not shown]",
        "[resource link file:///a.txt: a.txt]",
        "embedded text",
        "[resource file:///c.bin: x/y, 100 bytes, not shown]",
    ]


def test_structured_content_speaks_when_there_is_no_text() -> None:
    """A result with only structured content reads as its JSON; an empty one says so."""
    structured = CallToolResult(content=[], structured_content={"temp": 21.5, "city": "Zürich"})
    assert result_text(structured) == '{"temp": 21.5, "city": "Zürich"}'
    assert result_text(CallToolResult(content=[])) == NO_OUTPUT


def test_a_listed_tool_keeps_only_what_the_workflow_needs() -> None:
    """Name, schema (made an object schema), description cut, hints from annotations."""
    server = parse_mcp_config({"servers": [{"name": "s", "command": "x"}]}).servers[0]
    tool = Tool(
        name="t",
        description="d" * 5000,
        input_schema={"type": "object"},
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    info = tool_info(server, tool, "mcp__s__t")
    assert info.input_schema == {"type": "object", "properties": {}}
    assert len(info.description) == 2000
    assert (info.mutating, info.needs_approval) == (True, False)
    bare = tool_info(server, Tool(name="u", input_schema={"type": "object"}), "mcp__s__u")
    assert (bare.mutating, bare.needs_approval, bare.description) == (True, True, "")
