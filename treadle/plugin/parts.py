"""What one Treadle worker runs: its workflows, its activities and the interceptor that guards
what they let out, assembled from the plugin's arguments.

Two forms. The whole worker runs the agent workflow, the jobs', monitors' and scheduled
agents' workflows, and every activity they call (model calls, tools, hooks, snapshots, MCP,
the jobs' own). The tools-only worker serves a run's ``tool_task_queue`` on the machine that
holds its workspace: the workspace's tools, the post-tools hooks and the snapshots, nothing
else (no workflows, no model calls, no MCP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.worker import Interceptor

from treadle.activities import jobs as job_activities
from treadle.activities import threads as thread_activities
from treadle.activities.content import RedactedBlobs, RedactingInterceptor, Redactor
from treadle.activities.content import logs as log_redaction
from treadle.activities.hooks import HookActivities
from treadle.activities.hooks.activity import HOOKS
from treadle.activities.hooks.base import Hook
from treadle.activities.mcp import McpActivities, McpConfig
from treadle.activities.model.activity import ModelActivities, ProviderSettings
from treadle.activities.store.blobs import BlobStore
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.store.probe import StoreProbeActivities
from treadle.activities.tools.builtin import ToolActivities
from treadle.activities.tools.confinement import Confinement
from treadle.activities.tools.loading import list_loaded_tools
from treadle.activities.workspace import WorkspaceActivities
from treadle.activities.workspace.follow import Follower
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.jobs import workflow as job_workflows
from treadle.workflows.monitors import workflow as monitor_workflows
from treadle.workflows.scheduled import workflow as scheduled_workflows

__all__ = ["WORKFLOWS", "WorkerParts", "assemble"]

WORKFLOWS: list[type[Any]] = [
    AgentWorkflow,
    *job_workflows.WORKFLOWS,
    *monitor_workflows.WORKFLOWS,
    *scheduled_workflows.WORKFLOWS,
]
"""Every workflow a whole Treadle worker runs (a replayer of Treadle's histories needs them)."""


@dataclass
class WorkerParts:
    """One worker's activities, and the interceptor that redacts what they let out."""

    activities: list[Callable[..., Any]]
    interceptor: Interceptor


def assemble(
    *,
    tools_only: bool,
    settings: ProviderSettings,
    http: httpx.AsyncClient | None,
    store: BlobStore | None,
    confinement: Confinement,
    mcp: McpActivities | None,
    secrets: Sequence[str],
    workspace_root: Path | None,
    hooks: Sequence[Hook],
) -> WorkerParts:
    """The activities of one worker, over the worker's own store, HTTP client and secrets.

    ``store`` keeps conversation content once, so model calls carry references instead of the
    whole conversation (without one, every call carries it all: history grows quadratically).
    ``mcp`` holds the worker's MCP servers and their sessions; without one the MCP activities
    are still registered, with no servers, so a run that lists MCP tools learns there are none
    instead of waiting for an activity no worker has.

    ``secrets`` are what the worker knows besides the providers' keys: with the keys, they are
    redacted from everything an activity returns, raises, stores, streams or puts on a span or
    logs (``treadle.activities.content``). The redacting interceptor is meant to be the worker's
    last, so the tracing interceptor and the SDK's failure logging see only redacted text.

    ``workspace_root`` makes the workspace follow the run: runs' tools run in this worker's
    copies of their workspaces under it, brought to each run's latest snapshot first and
    snapshotted after (``treadle.activities.workspace.follow``); it needs ``store``.
    """
    # Workspace files go to the store as they are (a check-out must give the same bytes back),
    # except a file holding one of the worker's secrets: withheld, named, never stored.
    known = [k.encode() for k in dict.fromkeys([*settings.api_keys(), *secrets]) if k]
    workspaces = WorkspaceActivities(store, lambda data: any(k in data for k in known))
    follower = None
    if workspace_root is not None:
        if workspaces.snapshotter is None:
            raise ValueError("a workspace root needs a store: the runs' snapshots live there")
        follower = workspaces.follower = Follower(workspace_root, workspaces.snapshotter)
    redactor = Redactor([*settings.api_keys(), *secrets])
    log_redaction.install()  # what activities log while they run, with the same redactor
    if store is not None:
        store = RedactedBlobs(store, redactor)
    conversations = ConversationStore(store) if store is not None else None
    tools = ToolActivities(
        confinement=confinement,
        store=conversations,
        follower=follower,
        snapshotter=workspaces.snapshotter,
    )
    run_hook = HookActivities([*HOOKS, *hooks]).run_hook
    probe = StoreProbeActivities(store)  # a run waits for an unreachable store with it
    interceptor = RedactingInterceptor(redactor)
    if tools_only:
        activities: list[Callable[..., Any]] = [
            tools.run_tool,
            run_hook,
            probe.wait_for_store,
            workspaces.snapshot_workspace,
        ]
        return WorkerParts(activities, interceptor)
    if http is None:
        raise ValueError("a worker that calls models needs an HTTP client")
    if mcp is None:
        mcp = McpActivities(McpConfig())
    if mcp.store is None:
        mcp.store = conversations  # long MCP outputs are stored like every tool's
    models = ModelActivities(settings, http, conversations)
    activities = [
        models.call_model,
        tools.run_tool,
        run_hook,
        workspaces.snapshot_workspace,
        mcp.list_mcp_tools,
        mcp.call_mcp_tool,
        list_loaded_tools,
        probe.wait_for_store,
        *job_activities.ACTIVITIES,
        *thread_activities.ACTIVITIES,
    ]
    return WorkerParts(activities, interceptor)
