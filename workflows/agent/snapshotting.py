"""Taking a run's workspace snapshot after a step (``after_step``), when its config asks:
the one call the engine makes. The config block, the activity's messages and options are in
``snapshots``; the activity in ``treadle.activities.workspace``.

The workspace follows the run: each tool request names the run's latest snapshot (``sync``); a
worker with ``--workspace-root`` returns the snapshot it took after a call that may change
files, which the run keeps (``keep``) and names in its next call. With snapshots on and no
hooks, a call run in order asks a worker without a root to do the same in the run's own
workspace (``WorkspaceSync.here``): such a step takes no ``snapshot_workspace`` after it. A
step whose hooks ran, or whose calls ran in parallel in one directory, is snapshotted after it.
A step's parallel calls each start from the step's snapshot: theirs are merged in call order,
and a path changed by more than one is reported (``merge_parallel``). A sub-agent's final
snapshot comes back as its ``delegate`` call's and is merged the same way, even alone: the
merge names the paths it changed, which become the call's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.models import AgentConfig, ToolOutcome
from treadle.workflows.agent.messages.snapshots import (
    DEFAULT_IGNORE,
    SnapshotRequest,
    SnapshotResult,
    WorkspaceSync,
    paths_hint,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.toolbox import Toolbox
from treadle.workflows.base import failure_message

__all__ = ["SnapshotCaller", "after_step", "changed_by_child", "keep", "merge_parallel", "sync"]


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
    if _followed(box, outcomes):
        # The worker that ran the step's tools took their snapshots (``--workspace-root``).
        left_out = "".join(
            f" · {o.result.snapshot_left_out}" for o in outcomes if o.result.snapshot_left_out
        )
        pub.record(
            State.POST_TOOLS_HOOK,
            "WorkspaceSnapshot",
            f"step {step}: taken by its calls · manifest {run.workspace_snapshot}{left_out}",
        )
        return
    if not config.snapshots.enabled:
        return
    skipped = _skipped(box, outcomes)
    if skipped is not None:
        # The worker was asked to snapshot in the calls and has no store: so would this.
        pub.record(State.POST_TOOLS_HOOK, "WorkspaceSnapshot", f"step {step}: {skipped}")
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
    # The whole key: ``treadle workspace ID --manifest KEY`` reads the store from it.
    key = f" · manifest {result.manifest}" if result.created else ""
    pub.record(State.POST_TOOLS_HOOK, "WorkspaceSnapshot", result.detail + key)


def _delegated(outcome: ToolOutcome) -> bool:
    """A sub-agent's call: what it changed is known from its snapshot alone."""
    spec = TOOLS.get(outcome.call.name)
    return spec is not None and spec.in_workflow


def changed_by_child(outcome: ToolOutcome) -> tuple[str, ...]:
    """The paths a sub-agent's call changed in the run's workspace (its merged snapshot's),
    for the run's hooks and progress tracking; ``()`` for any other call."""
    return outcome.mutated_paths if _delegated(outcome) else ()


def _may_change(box: Toolbox, name: str) -> bool:
    return box.mutates(name) or name not in TOOLS


def _followed(box: Toolbox, outcomes: Sequence[ToolOutcome]) -> bool:
    """Whether every call of the step that may change files came back with its snapshot
    (results carry one from a worker with ``--workspace-root``, or one asked to take it in
    the run's own workspace: ``WorkspaceSync.here``)."""
    changing = [o for o in outcomes if _may_change(box, o.call.name)]
    return bool(changing) and all(o.result.snapshot for o in changing)


def _skipped(box: Toolbox, outcomes: Sequence[ToolOutcome]) -> str | None:
    """Why the step's calls took no snapshot, when every changing call that came back without
    one says the worker asked to take it has no store (``None``: otherwise)."""
    changing = [o for o in outcomes if _may_change(box, o.call.name) and not o.result.snapshot]
    why = {o.result.snapshot_skipped for o in changing}
    if not changing or None in why:
        return None
    return sorted(w for w in why if w is not None)[0]


def sync(run: AgentRun) -> WorkspaceSync:
    """What a tool request tells a worker with ``--workspace-root``: the run's latest snapshot.
    Sent whatever ``snapshots.enabled`` says: such a worker snapshots the calls it runs anyway
    (a run's work must not stay on one machine's disk), with the config's ignore patterns.
    With snapshots on, a call run in order and no hooks to run after the step, a worker
    without a root is asked to snapshot the run's own workspace after it (``here``)."""
    config = run.input.config
    snapshots = config.snapshots
    # A hook may change files after the step's calls (``git_commit``: ``.git``'s index and
    # refs), and parallel calls share one directory: both keep the snapshot after the step.
    here = snapshots.enabled and not config.hooks and run.state is not State.PARALLEL_ACTING
    return WorkspaceSync(
        manifest=run.workspace_snapshot,
        step=run.memory.step,
        ignore=None if snapshots.ignore == DEFAULT_IGNORE else snapshots.ignore,
        max_file_bytes=snapshots.max_file_bytes,
        full_walk_every=snapshots.full_walk_every,
        here=here,
    )


def keep(run: AgentRun, outcome: ToolOutcome) -> None:
    """A call run in order: the snapshot it came back with is the run's latest."""
    if outcome.result.snapshot:
        run.workspace_snapshot = outcome.result.snapshot


async def merge_parallel(
    run: AgentRun, pub: Publisher, outcomes: Sequence[ToolOutcome], call: SnapshotCaller
) -> list[ToolOutcome]:
    """A step's parallel calls, each snapshotted on the step's snapshot: one snapshot of them
    all, their changes applied in call order. A path changed by more than one keeps the last
    call's version; the trace says so, and so does each overridden call's observation."""
    before = run.workspace_snapshot
    taken = [
        (n, o.result.snapshot)
        for n, o in enumerate(outcomes)
        if o.result.snapshot and o.result.snapshot != before
    ]
    # A sub-agent's snapshot is merged even alone: the merge says which paths it changed, for
    # the run's progress tracking and hooks (its own calls' say so in their results).
    children = any(_delegated(outcomes[n]) for n, _ in taken)
    if len(taken) <= 1 and not children:
        for _, key in taken:
            run.workspace_snapshot = key
        return list(outcomes)
    config = run.input.config
    request = SnapshotRequest(
        workspace=run.input.workspace,
        workflow_id=workflow.info().workflow_id,
        step=run.memory.step,
        previous=before,
        merge=tuple(key for _, key in taken if key),
        ignore=None if config.snapshots.ignore == DEFAULT_IGNORE else config.snapshots.ignore,
    )
    summary = f"step {run.memory.step} · merge {len(taken)} calls' workspaces"
    if len(taken) == 1:
        summary = f"step {run.memory.step} · merge {outcomes[taken[0][0]].call.id}'s workspace"
    try:
        result = await call(config, request, summary)
    except ActivityError as exc:
        if is_cancelled_exception(exc):
            raise
        # Cannot happen but for a bug (a store outage is waited out): the last call's stands.
        pub.record(run.state, "WorkspaceSnapshotFailed", failure_message(exc))
        run.workspace_snapshot = taken[-1][1]
        return list(outcomes)
    run.workspace_snapshot = result.manifest
    pub.record(run.state, "WorkspaceMerged", f"{result.detail} · manifest {result.manifest}")
    notes: dict[int, list[str]] = {}
    for path, places in result.overlaps.items():
        last = outcomes[taken[places[-1]][0]].call
        for place in places[:-1]:
            notes.setdefault(taken[place][0], []).append(
                f"NOTE: {path} was also changed by a later call of this step ({last.name} "
                f"{last.id}); the workspace keeps that call's version."
            )
    merged = list(outcomes)
    for place, (n, _) in enumerate(taken):
        if _delegated(merged[n]) and place < len(result.paths):
            update = {"mutated_paths": result.paths[place]}
            merged[n] = merged[n].model_copy(
                update={"result": merged[n].result.model_copy(update=update)}
            )
    for n, lines in notes.items():
        result_n = merged[n].result
        text = "\n".join([result_n.output, *lines])
        merged[n] = merged[n].model_copy(
            update={"result": result_n.model_copy(update={"output": text})}
        )
    return merged
