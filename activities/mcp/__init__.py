"""MCP servers' tools as Treadle tools: ``list_mcp_tools`` and ``call_mcp_tool``, two activities
over the ``mcp`` SDK, configured per worker by a TOML file (``config``).

Why the ``mcp`` SDK inside our own activities, and not ``temporalio-mcp`` (0.2.0, read in full
before deciding): both run MCP operations as activities, so both are durable in the same basic
way; the difference is what each does with failures, results and names, and there ours serves a
durable agent loop better.

- **Tool failures are data.** temporalio-mcp fails the activity with a non-retryable
  ``MCPProtocolError`` for an unknown tool or invalid arguments, and returns the raw
  ``CallToolResult`` otherwise. Here every answer of the server, including those, is a
  ``ToolResult(success=False, "ERROR: ...")`` like any tool's, a vanished tool is named as such,
  and only a server that does not answer fails the attempt, retryably.
- **Heartbeats and timeouts.** temporalio-mcp's activities do not heartbeat ("do not set
  heartbeat_timeout"), and an activity timeout does not stop the MCP request on the worker.
  Here calls heartbeat (``treadle.activities.heartbeat``), so a dead worker is noticed within the
  heartbeat timeout and a cancelled run cancels the request; each call and listing carries the
  server's configured timeout, after which the session is replaced.
- **History stays small.** temporalio-mcp returns whole ``CallToolResult``/``ListToolsResult``
  dicts into history; here long output goes to the conversation store (preview + reference, the
  same path as built-in tools) and listings carry only what the model needs.
- **Typed messages and names by object.** temporalio-mcp registers one set of seven activities
  per server under string names (``temporalio.mcp.<server>.call-tool``) taking dicts, and puts
  ``mcp``/``mcp_types`` through the sandbox. Here two activities take pydantic models, the
  workflow refers to them by method, and the sandbox imports only
  ``treadle.workflows.agent.messages.mcp``.
- **Listing per worker.** temporalio-mcp caches a listing per workflow-side client object;
  issue 12 asks for one listing per worker, cached and refreshed on demand, with a server that is
  down reported as unavailable rather than failing the run.
- **Configuration.** temporalio-mcp takes Python factories; operators here write a file whose
  secrets stay in the worker's environment.

What we take from it: keeping connections per worker (``sessions``), because a stdio server is a
process, and retiring a connection on a transport failure or timeout rather than on every error.
Like it, calls are at-least-once: a tool with side effects may run again when a worker dies
after the server acted; the workflow's approval and the server's own idempotency are the guard.

Measured with tests/support/mcp_server.py (a Python ``MCPServer``), median of repeated ``add``
calls:
over a kept stdio session 4 ms a call; a fresh stdio session 1.3 s to start the server and
call once, plus 0.3 s to stop it. Streamable HTTP: 6 ms a call kept, 56 ms fresh. Hence one
kept session per server and worker (``sessions`` says how it stays safe).
"""

from treadle.activities.mcp.activity import McpActivities
from treadle.activities.mcp.config import (
    McpConfig,
    McpServerConfig,
    load_mcp_config,
    parse_mcp_config,
)
from treadle.activities.mcp.errors import (
    McpConfigError,
    McpError,
    McpTimeoutError,
    McpUnavailableError,
)

__all__ = [
    "McpActivities",
    "McpConfig",
    "McpConfigError",
    "McpError",
    "McpServerConfig",
    "McpTimeoutError",
    "McpUnavailableError",
    "load_mcp_config",
    "parse_mcp_config",
]
