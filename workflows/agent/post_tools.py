"""Loom's post-tools hook, after a step whose tools ran: each hook of the config in order
(``git_commit`` commits the step), then the workspace's snapshot (``snapshotting``)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from treadle.workflows.agent import calls, snapshotting
from treadle.workflows.agent.messages import hooks
from treadle.workflows.agent.messages.hooks import HookRequest, HookResult
from treadle.workflows.agent.messages.models import ToolOutcome
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.toolbox import Toolbox
from treadle.workflows.base import failure_message


async def run(run: AgentRun, pub: Publisher, box: Toolbox) -> None:
    """Each hook of the config, in order, after a step whose tools changed files. A failed
    hook is a trace line, never the run's end."""
    config = run.input.config
    history = run.memory.history
    last = history[-1] if history else None
    outcomes = [o for o in (last.outcomes if last else ()) if o.success]
    changed = sorted({p for o in outcomes for p in o.mutated_paths})
    if not config.hooks:
        pub.record(
            State.POST_TOOLS_HOOK,
            "HookRun",
            f"changed: {', '.join(changed) if changed else '(by command)'}",
        )
    for name in config.hooks:
        result = await _run_hook(run, box, name, last.step if last else run.memory.step, outcomes)
        pub.record(State.POST_TOOLS_HOOK, "HookRun", hooks.describe(result))
        pub.emit("hook", hooks.describe(result), tool=name, ok=result.outcome != "failed")
    step, done = (last.step, last.outcomes) if last else (run.memory.step, ())
    await snapshotting.after_step(run, pub, box, step, done, calls.snapshot_workspace)


async def _run_hook(
    run: AgentRun, box: Toolbox, name: str, step: int, outcomes: list[ToolOutcome]
) -> HookResult:
    config, info = run.input.config, workflow.info()
    # A sub-agent's call is one when its merged snapshot changed paths.
    mutating = [o for o in outcomes if box.mutates(o.call.name) or snapshotting.changed_by_child(o)]
    request = HookRequest(
        hook=name,
        workspace=run.input.workspace,
        step=step,
        tools=tuple(dict.fromkeys(o.call.name for o in mutating)),
        files=tuple(sorted({p for o in mutating for p in o.mutated_paths})),
        commit_author=config.commit_author,
        workflow_id=info.workflow_id,
        run_id=info.run_id,
    )
    try:
        result = await calls.run_hook(config, request, f"step {step} · hook {name}")
    except ActivityError as exc:
        if is_cancelled_exception(exc):
            raise
        return HookResult.failure(name, failure_message(exc))
    return result
