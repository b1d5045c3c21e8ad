"""Every activity the agent loop calls, with its options: the only agent module that imports
activities (inside the sandbox pass-through).

Each function is one ``workflow.execute_activity_method`` with the options of its kind,
declared once here. Temporal owns every retry: the activities themselves never loop. A failed
activity raises ``ActivityError``; what it means for the run is the caller's decision.

Two failures are never the caller's to judge, because neither is the call's own:

- a store that cannot be reached now (type ``StoreUnavailable``, see ``outages``). Every call
  waits it out here (``_through_outages``): the run shows what it waits for,
  ``wait_for_store`` is retried by Temporal until the store answers, and the same call is made
  again, with its attempts untouched;
- a model call's worker that stopped answering (its heartbeat timed out: the worker died, or is
  too busy to beat). The call is made again at once (``_model_tries``), the run shows that it
  waits for a worker, and no try is spent: only the provider's own errors spend the call's
  ``model_max_attempts``. So a model call is a chain of activities of one attempt each, and
  the provider's backoff (or its ``Retry-After``) is a timer between two of them. A tool call
  whose attempts all lost their worker is made again the same way (``_through_lost_workers``),
  never repeating an effect that may have happened.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol, TypeVar, runtime_checkable

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception
from temporalio.workflow import ActivityCancellationType

from treadle.workflows.agent.messages import hooks
from treadle.workflows.agent.messages.hooks import HookRequest, HookResult
from treadle.workflows.agent.messages.mcp import McpCallRequest, McpListRequest, McpToolList
from treadle.workflows.agent.messages.models import (
    MODEL_CALL_INTERRUPTED,
    AgentConfig,
    LoadedTools,
    LoadedToolsRequest,
    ModelRequest,
    ModelResponse,
    TokenUsage,
    ToolRequest,
    ToolResult,
)
from treadle.workflows.agent.messages.snapshots import (
    SnapshotRequest,
    SnapshotResult,
    snapshot_call,
)
from treadle.workflows.agent.parts.outages import (
    FIRST_PROBE,
    LONGEST_PROBE_INTERVAL,
    MODEL_RETRY_CAP,
    Outage,
    StoreProbe,
    lost_worker,
    pause,
    repeatable_fingerprint,
    retry_delay,
    unreachable_store,
    worker_lost,
)
from treadle.workflows.base import FIRST_RETRY, failure_message

with workflow.unsafe.imports_passed_through():
    # Activity classes are referenced by method (names by object, not string). Their modules
    # load the HTTP client library, which must not be re-imported in the sandbox every run.
    from treadle.activities.hooks import HookActivities
    from treadle.activities.mcp import McpActivities
    from treadle.activities.model.activity import ModelActivities
    from treadle.activities.sent_marks import sent_mark_in
    from treadle.activities.store.probe import StoreProbeActivities
    from treadle.activities.tools.builtin import ToolActivities
    from treadle.activities.tools.loading import list_loaded_tools as list_loaded
    from treadle.activities.workspace import WorkspaceActivities

SUMMARY_TRIES = 2
"""Reflection's summary call is tried twice (its failure falls back to compaction)."""

COMMAND_TIMEOUT_GRACE_SECONDS = 10
"""A command's attempt may outlive its own timeout by this much: time to kill its process
group and collect what it printed, so the command's timeout, not the activity's, ends it."""

_T = TypeVar("_T")


@runtime_checkable
class OutageWatcher(Protocol):
    """What the run shows while a call waits for the store (the agent workflow is one)."""

    def store_outage(self, outage: Outage | None) -> None:
        """The call waits for the store (``outage``), or the store answered (``None``)."""
        ...


# --------------------------------------------------------------------------------------------
# The calls
# --------------------------------------------------------------------------------------------


async def call_model(config: AgentConfig, request: ModelRequest, summary: str) -> ModelResponse:
    """One planning call (``call_model``), tried up to ``model_max_attempts`` times."""
    options = model_call(config, summary)
    if request.interruptible:
        # Cancelled for a user's message, the call answers with its partial reply: wait for it.
        options["cancellation_type"] = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    return await _model_tries(config, request, options, config.model_max_attempts)


def interruption(exc: BaseException) -> str | None:
    """What a model call cut by the run had said so far (``MODEL_CALL_INTERRUPTED``); ``None``
    for any other outcome."""
    cause = exc.cause if isinstance(exc, ActivityError) else None
    if not isinstance(cause, ApplicationError) or cause.type != MODEL_CALL_INTERRUPTED:
        return None
    said = cause.details[0] if cause.details else ""
    return said if isinstance(said, str) else ""


def interrupted_usage(exc: BaseException) -> TokenUsage | None:
    """The tokens a model call cut by the run had spent, as its stream reported them before
    the cut; ``None`` when it reported none (what it spent is unknown), or for any other
    outcome."""
    cause = exc.cause if isinstance(exc, ActivityError) else None
    if not isinstance(cause, ApplicationError) or cause.type != MODEL_CALL_INTERRUPTED:
        return None
    if len(cause.details) < 2 or not isinstance(cause.details[1], dict):
        return None  # none reported (or cut by a worker that did not send it)
    try:
        return TokenUsage.model_validate(cause.details[1])
    except ValidationError:
        return None


async def summarise(config: AgentConfig, request: ModelRequest, summary: str) -> ModelResponse:
    """Reflection's summary call (``call_model`` tried twice: a failure has a cheap fallback,
    compaction without a model)."""
    return await _model_tries(config, request, model_call(config, summary), SUMMARY_TRIES)


async def _model_tries(
    config: AgentConfig, request: ModelRequest, options: workflow.ActivityConfig, tries: int
) -> ModelResponse:
    """The call, tried until it answers: made again at once when its worker stopped answering
    (no try spent; the run shows it waits for a worker), again after the provider's backoff
    when the provider failed it retryably, up to ``tries`` such failures. Raises the last
    ``ActivityError`` (its ``retry_state`` says whether the tries were spent, as fallback
    models need to know) or a cancellation."""
    asked, failed, lost = request, 0, None
    while True:
        try:
            response: ModelResponse = await _through_outages(
                config,
                None,
                functools.partial(
                    workflow.execute_activity_method, ModelActivities.call_model, asked, **options
                ),
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc) or interruption(exc) is not None:
                raise
            if worker_lost(exc):
                lost = lost_worker(lost, exc, workflow.now())
                _show(lost)
                continue
            failed += 1
            delay = retry_delay(exc, failed)
            if delay is None or failed >= tries:
                raise
            asked = request.model_copy(
                update={"attempt": failed + 1, "repeated": repeatable_fingerprint(exc)}
            )
            await workflow.sleep(delay, summary=f"retry in {delay.total_seconds():g}s")
            continue
        if lost is not None:
            _show(None)
        return response


async def run_tool(
    config: AgentConfig,
    request: ToolRequest,
    summary: str,
    *,
    command: bool,
    tool_timeout: float | None,
) -> ToolResult:
    """One built-in or custom tool call (``run_tool``), on the run's tool queue, made again
    while its worker is lost (``_through_lost_workers``)."""

    def attempt(follows: str | None, marked: bool) -> Awaitable[ToolResult]:
        asked = request
        if follows is not None:
            asked = request.model_copy(update={"follows": follows, "sent_before": marked})
        return workflow.execute_activity_method(
            ToolActivities.run_tool,
            asked,
            **tool_call(config, summary, command=command, tool_timeout=tool_timeout),
        )

    return await _through_lost_workers(config, config.tool_task_queue, request.call.id, attempt)


async def list_loaded_tools(config: AgentConfig) -> LoadedTools:
    """The tools the worker loaded from your own modules (``list_loaded_tools``): a local
    activity, on the worker that checks the run's calls; its answer is one marker in history."""
    loaded: LoadedTools = await workflow.execute_local_activity(
        list_loaded,
        LoadedToolsRequest(),
        summary="list loaded tools",
        start_to_close_timeout=timedelta(seconds=10),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_RETRY, maximum_attempts=config.tool_max_attempts
        ),
    )
    return loaded


async def list_mcp_tools(config: AgentConfig, request: McpListRequest, summary: str) -> McpToolList:
    """The tools of the run's MCP servers (``list_mcp_tools``)."""
    listed: McpToolList = await workflow.execute_activity_method(
        McpActivities.list_mcp_tools, request, **mcp_listing(config, summary)
    )
    return listed


async def call_mcp_tool(
    config: AgentConfig, request: McpCallRequest, summary: str, attempt_timeout: timedelta
) -> ToolResult:
    """One MCP tool call (``call_mcp_tool``), made again while its worker is lost."""

    def attempt(follows: str | None, marked: bool) -> Awaitable[ToolResult]:
        asked = request if follows is None else request.model_copy(update={"sent_before": marked})
        return workflow.execute_activity_method(
            McpActivities.call_mcp_tool, asked, **mcp_call(config, summary, attempt_timeout)
        )

    return await _through_lost_workers(config, None, request.call_id, attempt)


async def run_hook(config: AgentConfig, request: HookRequest, summary: str) -> HookResult:
    """One post-tools hook (``run_hook``), where the workspace's tools run."""
    result: HookResult = await _through_outages(
        config,
        config.tool_task_queue,
        lambda: workflow.execute_activity_method(
            HookActivities.run_hook,
            request,
            **hooks.hook_call(
                summary,
                heartbeat_timeout_seconds=config.heartbeat_timeout_seconds,
                task_queue=config.tool_task_queue,
            ),
        ),
    )
    return result


async def snapshot_workspace(
    config: AgentConfig, request: SnapshotRequest, summary: str
) -> SnapshotResult:
    """The workspace after a step, as a manifest in the store (``snapshot_workspace``)."""
    result: SnapshotResult = await _through_outages(
        config,
        config.tool_task_queue,
        lambda: workflow.execute_activity_method(
            WorkspaceActivities.snapshot_workspace,
            request,
            **snapshot_call(
                summary,
                heartbeat_seconds=config.heartbeat_timeout_seconds,
                task_queue=config.tool_task_queue,
            ),
        ),
    )
    return result


# --------------------------------------------------------------------------------------------
# Waiting out a store that cannot be reached
# --------------------------------------------------------------------------------------------


async def _through_outages(
    config: AgentConfig, task_queue: str | None, call: Callable[[], Awaitable[_T]]
) -> _T:
    """``call()``, made again for as long as it finds the store unreachable, each time after
    ``wait_for_store`` (on ``task_queue``, where the call ran) saw the store answer. Any other
    failure is the caller's, as before."""
    outage: Outage | None = None
    waits = 0
    while True:
        try:
            return await call()
        except ActivityError as exc:
            where = unreachable_store(exc)
            if where is None:
                raise
            if outage is None:
                outage = Outage(where=where, since=workflow.now(), reason=failure_message(exc))
        _show(outage)
        if waits:
            # The store answered the probe, yet the call found it unreachable again.
            await workflow.sleep(pause(waits))
        waits += 1
        await workflow.execute_activity_method(
            StoreProbeActivities.wait_for_store,
            StoreProbe(where=outage.where),
            **store_wait(config, outage.where, task_queue),
        )
        _show(None)


TOOLS_WAIT_FOR_WORKERS = "tool-calls-wait-for-lost-workers"
"""The patch under which a tool call whose attempts all lost their worker is made again
(runs recorded before it failed the call)."""


async def _through_lost_workers(
    config: AgentConfig,
    task_queue: str | None,
    call_id: str,
    attempt: Callable[[str | None, bool], Awaitable[ToolResult]],
) -> ToolResult:
    """A tool call, through store outages, made again as a new activity for as long as every
    attempt of the one before lost its worker (its heartbeat timed out: a dead or starved
    worker): a busy worker spends none of the call's ``tool_max_attempts``, and the run shows
    it waits for a worker. The new activity is told the call's first activity (an attempt of
    the call still running on the same worker is waited for, what its command left is killed)
    and whether the one before had marked the call sent (a call not safe to repeat is then not
    run again: outcome unknown)."""
    follows: str | None = None
    marked, lost = False, None
    while True:
        try:
            result = await _through_outages(
                config, task_queue, functools.partial(attempt, follows, marked)
            )
        except ActivityError as exc:
            if not worker_lost(exc) or not workflow.patched(TOOLS_WAIT_FOR_WORKERS):
                raise
            lost = lost_worker(lost, exc, workflow.now())
            _show(lost)
            follows = follows or exc.activity_id  # the call's first activity
            marked = sent_mark_in(exc, call_id) or marked
            continue
        if lost is not None:
            _show(None)
        return result


def _show(outage: Outage | None) -> None:
    watcher = workflow.instance()
    if isinstance(watcher, OutageWatcher):
        watcher.store_outage(outage)


# --------------------------------------------------------------------------------------------
# Their options: each turns the run's config and the call's Web UI summary into a
# ``workflow.ActivityConfig``.
# --------------------------------------------------------------------------------------------


def model_call(config: AgentConfig, summary: str) -> workflow.ActivityConfig:
    """One try of a model call: one attempt (``_model_tries`` decides what follows a failure:
    the provider's backoff, up to a minute, or its ``Retry-After``; 4xx other than
    408/409/429 end the call). ``maximum_interval`` caps what a ``Retry-After`` may ask."""
    return workflow.ActivityConfig(
        summary=summary,
        start_to_close_timeout=timedelta(seconds=config.model_timeout_seconds),
        heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout_seconds),
        retry_policy=RetryPolicy(maximum_interval=MODEL_RETRY_CAP, maximum_attempts=1),
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
    """Listing the run's MCP servers (again, for those it missed): the activity reports a server
    that is down instead of failing, so its attempts are for a worker that dies; it heartbeats
    while servers start."""
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


def store_wait(config: AgentConfig, where: str, task_queue: str | None) -> workflow.ActivityConfig:
    """Waiting for the store: one short probe per attempt, retried with backoff (1 s doubling
    to a minute) for as long as it takes; no attempt limit and no overall timeout, because the
    run must outlive any outage. A failed attempt adds no history event."""
    options = workflow.ActivityConfig(
        summary=f"wait for {where}"[:200],
        start_to_close_timeout=timedelta(minutes=2),
        heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout_seconds),
        retry_policy=RetryPolicy(
            initial_interval=FIRST_PROBE,
            backoff_coefficient=2.0,
            maximum_interval=LONGEST_PROBE_INTERVAL,
            maximum_attempts=0,
        ),
    )
    if task_queue:
        options["task_queue"] = task_queue
    return options
