"""Activity options of the agent run, declared once per kind of activity.

Each function turns the run's config and the call's Web UI summary into a
``workflow.ActivityConfig`` that the loop spreads into
``workflow.execute_activity_method(..., **options)``.
Temporal owns every retry: the activities themselves never loop.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from workflows.agent.models import AgentConfig
from workflows.base import FIRST_RETRY

COMMAND_TIMEOUT_GRACE_SECONDS = 10
"""A command's attempt may outlive its own timeout by this much: time to kill its process
group and collect what it printed, so the command's timeout, not the activity's, ends it."""


def model_call(config: AgentConfig, summary: str) -> workflow.ActivityConfig:
    """One planning call: backs off up to a minute between attempts (rate limits, overload);
    a 429's ``Retry-After`` replaces the backoff; 4xx other than 408/409/429 fail at once."""
    return workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=timedelta(seconds=config.model_timeout_seconds),
        heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout_seconds),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_RETRY,
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=config.model_max_attempts,
        ),
    )


def summary_call(config: AgentConfig, summary: str) -> workflow.ActivityConfig:
    """Reflection's summary call: two attempts, because a failure has a cheap fallback
    (compaction without a model)."""
    return workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=timedelta(seconds=config.model_timeout_seconds),
        heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout_seconds),
        retry_policy=RetryPolicy(initial_interval=FIRST_RETRY, maximum_attempts=2),
    )


def tool_call(
    config: AgentConfig, summary: str, *, command: bool, tool_timeout: float | None = None
) -> workflow.ActivityConfig:
    """One tool call. Only ``run_command`` runs long enough to heartbeat: file tools finish in
    milliseconds and would trip a heartbeat timeout they never feed."""
    timeout = config.tool_timeout_seconds if tool_timeout is None else tool_timeout
    if command:
        timeout = max(timeout, config.command_timeout_seconds + COMMAND_TIMEOUT_GRACE_SECONDS)
    options = workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=timedelta(seconds=timeout),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_RETRY,
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=config.tool_max_attempts,
        ),
    )
    if command:
        options["heartbeat_timeout"] = timedelta(seconds=config.heartbeat_timeout_seconds)
    if config.tool_task_queue:
        options["task_queue"] = config.tool_task_queue
    return options


def mcp_listing(config: AgentConfig, summary: str) -> workflow.ActivityConfig:
    """Listing the run's MCP servers, once: the activity reports a server that is down instead
    of failing, so its attempts are for a worker that dies; it heartbeats while servers start."""
    return workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=timedelta(minutes=5),
        heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout_seconds),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_RETRY,
            maximum_interval=timedelta(seconds=10),
            maximum_attempts=3,
        ),
    )


def mcp_call(
    config: AgentConfig, summary: str, attempt_timeout: timedelta
) -> workflow.ActivityConfig:
    """One MCP tool call: the server's own timeouts plus a grace bound an attempt (see
    ``McpToolInfo.attempt_timeout``); it heartbeats while the server works, so a dead worker is
    noticed in ``heartbeat_timeout_seconds``; a server that does not answer is retried like
    any tool."""
    return workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=attempt_timeout,
        heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout_seconds),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_RETRY,
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=config.tool_max_attempts,
        ),
    )
