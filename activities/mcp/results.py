"""Translating the ``mcp`` SDK's types into Treadle's: a listed tool into ``McpToolInfo``, a
tool's result into the text the model reads."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from treadle.activities.mcp.config import McpServerConfig
from treadle.workflows.agent.messages.mcp import MAX_DESCRIPTION_CHARS, McpToolInfo

NO_OUTPUT = "(no output)"


def tool_info(server: McpServerConfig, tool: Tool, name: str) -> McpToolInfo:
    """What the workflow needs of one listed tool; ``name`` is its unique namespaced name."""
    annotations = tool.annotations
    mutating = not (annotations is not None and annotations.read_only_hint is True)
    destructive = annotations is None or annotations.destructive_hint is not False
    description = tool.description or tool.title or (annotations.title if annotations else None)
    return McpToolInfo(
        name=name,
        server=server.name,
        tool=tool.name,
        description=_cut(description or "", MAX_DESCRIPTION_CHARS),
        input_schema=object_schema(tool.input_schema),
        mutating=mutating,
        needs_approval=mutating and destructive,
        timeout_seconds=server.timeout_seconds,
        connect_timeout_seconds=server.list_timeout_seconds,
    )


def object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The tool's input schema as a function-calling API wants it: an object with properties."""
    fixed = dict(schema)
    fixed.setdefault("type", "object")
    if fixed["type"] == "object":
        fixed.setdefault("properties", {})
    return fixed


def result_text(result: CallToolResult) -> str:
    """The text of a tool's result: its content blocks in order, one per paragraph; binary
    content as a one-line placeholder; the structured content when there is no other."""
    parts = [block_text(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return text or NO_OUTPUT


def block_text(block: ContentBlock) -> str:
    match block:
        case TextContent():
            return block.text
        case ImageContent() | AudioContent():
            kind = "image" if isinstance(block, ImageContent) else "audio"
            return f"[{kind} {block.mime_type}, {_decoded_size(block.data)} bytes, not shown]"
        case ResourceLink():
            return f"[resource link {block.uri}" + (f": {block.name}]" if block.name else "]")
        case EmbeddedResource():
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                return resource.text
            if isinstance(resource, BlobResourceContents):
                mime = resource.mime_type or "application/octet-stream"
                size = _decoded_size(resource.blob)
                return f"[resource {resource.uri}: {mime}, {size} bytes, not shown]"
    return f"[{type(block).__name__} content, not shown]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
