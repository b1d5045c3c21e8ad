"""Agent runs on a worker with real MCP servers: the type of the ``mcp_harness`` fixture
(``tests/mcp/conftest.py``) and the helpers its tests script and read requests with."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from tests.support.harness import Harness

McpHarness = Callable[..., AbstractAsyncContextManager[Harness]]
"""``async with mcp_harness(entry, ...) as h``: a worker whose MCP config holds the entries."""


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted tool call."""
    return {"name": name, "arguments": arguments}


def offered(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tools one recorded chat-completions request offered, by name."""
    return {tool["function"]["name"]: tool["function"] for tool in body.get("tools", [])}
