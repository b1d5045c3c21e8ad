"""Taking a run's workspace snapshot after a step (``after_step``), when its config asks:
the one call the engine makes, behind the ``workspace-snapshots`` patch. The config block, the
activity's messages and options are in ``snapshots``; the activity in ``activities.workspace``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from workflows.agent.catalogue import TOOLS
from workflows.agent.models import AgentConfig, ToolOutcome
from workflows.agent.publishing import Publisher
from workflows.agent.snapshots import (
    DEFAULT_IGNORE,
    WORKSPACE_SNAPSHOTS,
    SnapshotRequest,
    SnapshotResult,
    paths_hint,
)
from workflows.agent.state import AgentRun
from workflows.agent.state_machine import State
from workflows.agent.toolbox import Toolbox
from workflows.base import failure_message

__all__ = ["SnapshotCaller", "after_step"]


SnapshotCaller = Callable[[AgentConfig, SnapshotRequest, str], Awaitable[SnapshotResult]]
"""``calls.snapshot_workspace``."""


async def after_step(
    run: AgentRun,
    pub: Publisher,
    box: Toolbox,
    step: int,
    outcomes: Sequence[ToolOutcome],
    call: SnapshotCaller,
) -> None:
    """Record the workspace after a step whose tools changed files, when the run's config
    asks for it: the manifest's key goes to ``run.workspace_snapshot``, one line to the trace.
    A snapshot that could not be taken is a trace line; the run goes on."""
    config = run.input.config
    if not config.snapshots.enabled or not workflow.patched(WORKSPACE_SNAPSHOTS):
        return
    hint = paths_hint(
        [
            (o.call.name, box.mutates(o.call.name) or o.call.name not in TOOLS, o.mutated_paths)
            for o in outcomes
        ]
    )
    snapshots = config.snapshots
    request = SnapshotRequest(
        workspace=run.input.workspace,
        workflow_id=workflow.info().workflow_id,
        step=step,
        previous=run.workspace_snapshot,
        paths=hint,
        ignore=None if snapshots.ignore == DEFAULT_IGNORE else snapshots.ignore,
        max_file_bytes=snapshots.max_file_bytes,
        full_walk_every=snapshots.full_walk_every,
    )
    try:
        result = await call(config, request, f"step {step} · snapshot workspace")
    except ActivityError as exc:
        if is_cancelled_exception(exc):
            raise
        pub.record(State.POST_TOOLS_HOOK, "WorkspaceSnapshotFailed", failure_message(exc))
        return
    if result.manifest is not None:
        run.workspace_snapshot = result.manifest
    # The whole key: ``starter.py workspace ID --manifest KEY`` reads the store from it.
    key = f" · manifest {result.manifest}" if result.created else ""
    pub.record(State.POST_TOOLS_HOOK, "WorkspaceSnapshot", result.detail + key)
