"""Sub-agents: a ``delegate`` call starts a child ``AgentWorkflow`` and waits for it, durably.

One family, one set of rules:

- **Bounded.** A run offers ``delegate`` only with ``config.subagents``; a child's config
  carries its parent's depth plus one, and a run starts at most ``max_children`` children in
  all. A call beyond either bound, or asking for tools, a model or a step limit beyond the
  parent's own, is refused: its ``ERROR:`` observation, no child.
- **One budget.** A child's token budget is a share reserved from what its parent has left
  (``share``): the parent's budget, less what it spent, less what its running children hold,
  split evenly between the step's delegate calls still to start and the parent itself. When
  the child ends, what it spent (its ``AgentResult`` usage, its own children's included) is
  counted in the parent's usage and its reservation is released, so the family as a whole never
  spends more than the top run's budget. A child that ended without a result (crashed,
  terminated, timed out) counts its whole share: what it spent is unknown. A cost cap
  (``max_cost_usd``) is shared the same way (``cost_share``, ``cost_cap``).
- **One place to answer.** A child reports to its parent while it runs (``child_reports``);
  a decision sent to the parent that names a child's call is sent on to it (``forward``).
- **One lifetime.** A child's workflow id is its parent's plus the call's id. A cancelled parent
  cancels its children and waits for them to end. A child that fails, times out or halts is
  that call's ``ERROR:`` observation, never a failed parent. A child may outlive its parent's
  run (``ParentClosePolicy.ABANDON``), so the parent continues as new while children run
  (``acting``): how its end reaches the newest run is ``child_ends``.

Several ``delegate`` calls in one reply run as ParallelActing runs any calls: concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

from treadle.workflows.agent.messages import search_attributes as sa
from treadle.workflows.agent.messages.catalogue import DelegateArgs
from treadle.workflows.agent.messages.family import SEPARATOR, ChildRun
from treadle.workflows.agent.messages.models import (
    AgentInput,
    AgentResult,
    ApprovalDecision,
    Decision,
    GuideSignal,
    PendingApproval,
    ToolCall,
    ToolOutcome,
)
from treadle.workflows.agent.parts import cost_cap
from treadle.workflows.agent.parts.approvals import Refused, check_approver
from treadle.workflows.agent.parts.planning import MIN_COMPLETION_TOKENS
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import cut
from treadle.workflows.agent.subagents import ends as child_ends
from treadle.workflows.base import describe_errors

DELEGATE = "delegate"


async def delegate(
    run: AgentRun, pub: Publisher, call: ToolCall, args: DelegateArgs, offered: Collection[str]
) -> ToolOutcome:
    """Run one ``delegate`` call: a refusal, or a child run awaited to its end."""
    waited = child_ends.carried(run, call.id)
    if waited is not None:  # started by an earlier run of this workflow id, still running
        return await child_ends.awaited(run, pub, call, waited, None, run.workspace_snapshot)
    refused = refusal(run, call, args, offered)
    if refused is not None:
        return ToolOutcome.of(call, refused, success=False)
    child = _reserve(run, call, args)
    # The child starts from the parent's workspace as its history says it is, and hands its
    # own back (``snapshotting.merge_parallel`` merges it): wherever their tools run.
    start = run.workspace_snapshot
    pub.record(
        run.state,
        "SubagentStarted",
        f"{child.workflow_id} ({child.model}, "
        f"{'budget ' + str(child.token_budget) if child.token_budget else 'no budget'}"
        f"{f', cost cap ${child.cost_budget_usd:.6f}' if child.cost_budget_usd else ''}): "
        f"{child.task}",
    )
    pub.emit("tool_started", child.task, tool=DELEGATE, call_id=call.id, target=child.workflow_id)
    given = child_input(run, args, child).model_copy(update={"workspace_snapshot": start})
    try:
        handle = await workflow.start_child_workflow(
            workflow.info().workflow_type,
            given,
            id=child.workflow_id,
            search_attributes=sa.start_attributes(given),  # what it shows first: no upsert of it
            result_type=AgentResult,
            # A hand-over closes the parent's run, and REQUEST_CANCEL would cancel the child:
            # a cancelled parent cancels its children itself (``child_ends.awaited``).
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"sub-agent · {cut(args.task, 180)}",
            static_details=(
                f"delegated by {workflow.info().workflow_id} (call {call.id}, step {child.step}); "
                f"depth {_depth(run) + 1}; model {child.model}; token budget "
                f"{child.token_budget if child.token_budget is not None else 'none'}"
            ),
        )
        child = child.model_copy(update={"run_id": handle.first_execution_run_id})
        run.family.replace(child)
        return await child_ends.awaited(run, pub, call, child, handle, start)
    except (ChildWorkflowError, WorkflowAlreadyStartedError) as exc:
        if run_cancelled():
            raise  # the parent itself is cancelled: its children were, and so is it
        return child_ends.ended_without_result(run, pub, call, child, exc)


def refusal(
    run: AgentRun, call: ToolCall, args: DelegateArgs, offered: Collection[str]
) -> str | None:
    """Why this call starts no child (its ``ERROR:`` observation), or ``None``."""
    config = run.input.config
    sub = config.subagents
    if sub is None:
        return "ERROR: delegate is not offered in this run (subagents is off)"
    if sub.depth >= sub.max_depth:
        return (
            f"ERROR: delegate refused: this run is a sub-agent at depth {sub.depth}, the deepest "
            f"subagents.max_depth ({sub.max_depth}) allows; do this sub-task yourself"
        )
    if len(run.family.children) >= sub.max_children:
        return (
            f"ERROR: delegate refused: this run has started {len(run.family.children)} "
            f"sub-agent(s), all subagents.max_children allows; do this sub-task yourself"
        )
    missing = [name for name in args.tools or () if name not in offered]
    if missing:
        return (
            f"ERROR: delegate refused: this run does not have the tool(s) {', '.join(missing)} "
            f"to give (it has: {', '.join(offered)})"
        )
    if args.model is not None and args.model not in allowed_models(run):
        return (
            f"ERROR: delegate refused: model {args.model} is not one this run may give "
            f"(allowed: {', '.join(allowed_models(run))})"
        )
    if args.max_steps is not None and args.max_steps > config.max_steps:
        return (
            f"ERROR: delegate refused: max_steps {args.max_steps} is more than this run's own "
            f"({config.max_steps})"
        )
    budget = share(run, call)
    if budget is not None and budget < MIN_COMPLETION_TOKENS:
        return (
            f"ERROR: delegate refused: the token budget has {budget_left(run)} tokens left, too "
            "few to share with a sub-agent"
        )
    return _cost_refusal(run, call, args)


def _cost_refusal(run: AgentRun, call: ToolCall, args: DelegateArgs) -> str | None:
    """Why the cost cap starts no child: its model has no price, or its share would not pay
    for the smallest call."""
    dollars = cost_share(run, call)
    if dollars is None:
        return None
    config = run.input.config
    price = cost_cap.worst_price(config, (args.model or run.model, *config.fallback_models))
    if isinstance(price, str):
        return f"ERROR: delegate refused: {price}"
    if dollars * cost_cap.MILLION < MIN_COMPLETION_TOKENS * price.completion or dollars <= 0:
        return (
            f"ERROR: delegate refused: the cost cap has ${cost_cap.left(run) or 0:.6f} left, "
            "too little to share with a sub-agent"
        )
    return None


def allowed_models(run: AgentRun) -> tuple[str, ...]:
    """The models a child may be given: the run's own, the models its config names, its
    fallbacks, and ``subagents.models``."""
    config = run.input.config
    extra = config.subagents.models if config.subagents else ()
    named = (run.model, run.input.model, *config.models.values(), *config.fallback_models, *extra)
    return tuple(dict.fromkeys(named))


def budget_left(run: AgentRun) -> int | None:
    """What the run may still give out: its budget, less what it (and its ended children)
    spent, less what its running children hold. ``None``: it has no budget."""
    budget = run.input.config.token_budget
    if budget is None:
        return None
    return max(0, budget - run.memory.usage.total_tokens - run.family.reserved())


def share(run: AgentRun, call: ToolCall) -> int | None:
    """The token budget a child started by ``call`` gets: what is left, split evenly between
    the step's delegate calls from this one on and the parent itself (which needs room to read
    the answers). Deterministic: the calls start in the step's order."""
    left = budget_left(run)
    if left is None:
        return None
    return left // (_later(run, call) + 1)


def cost_share(run: AgentRun, call: ToolCall) -> float | None:
    """The cost cap a child started by ``call`` gets: what is left of the parent's, split as
    the token budget is (``share``). ``None``: the parent has no cost cap."""
    left = cost_cap.left(run)
    if left is None:
        return None
    return round(left / (_later(run, call) + 1), 9)


def _later(run: AgentRun, call: ToolCall) -> int:
    """The step's delegate calls from ``call`` on (at least one: ``call``)."""
    calls = run.memory.current_tool_calls
    ids = [c.id for c in calls]
    position = ids.index(call.id) if call.id in ids else len(ids)
    return sum(1 for c in calls[position:] if c.name == DELEGATE) or 1


def child_input(run: AgentRun, args: DelegateArgs, child: ChildRun) -> AgentInput:
    """What the child runs: the sub-task, in the parent's workspace, under the parent's config
    narrowed to what the call asked for, one level deeper, with its share of the budget. It
    asks the client as the parent does (answered through the parent: ``child_queries``)."""
    config = run.input.config
    sub = config.subagents
    narrowed = config.model_copy(
        update={
            "max_steps": args.max_steps or config.max_steps,
            "tools": args.tools if args.tools is not None else config.tools,
            "token_budget": child.token_budget,
            "max_cost_usd": child.cost_budget_usd,
            "models": {},
            "subagents": sub.model_copy(update={"depth": sub.depth + 1}) if sub else None,
        }
    )
    return AgentInput(
        task=args.task,
        model=child.model,
        workspace=run.input.workspace,
        task_type=run.input.task_type,
        config=narrowed,
    )


def _depth(run: AgentRun) -> int:
    sub = run.input.config.subagents
    return sub.depth if sub else 0


def _reserve(run: AgentRun, call: ToolCall, args: DelegateArgs) -> ChildRun:
    """Record the child before anything is awaited: siblings started in the same step see its
    share held, in the step's order."""
    child = ChildRun(
        call_id=call.id,
        workflow_id=f"{workflow.info().workflow_id}.{call.id}",
        task=cut(args.task.strip().split("\n", 1)[0], 120),
        model=args.model or run.model,
        step=run.memory.step,
        token_budget=share(run, call),
        cost_budget_usd=cost_share(run, call),
    )
    run.family.children = [*run.family.children, child]
    return child


def run_cancelled() -> bool:
    """This run's own cancellation (not its child's) reached the awaiting task."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


# --------------------------------------------------------------------------------------------
# One place to answer: a child's approvals decided through its parent (``child_reports``
# shows them)
# --------------------------------------------------------------------------------------------


def for_child(run: AgentRun, decision: Decision) -> tuple[ChildRun, PendingApproval] | None:
    """The child's pending call an approve, reject or modify names, or ``None``."""
    if decision.action == "guide":
        return None
    return run.family.waiting_call(decision.call_id)


def forward(run: AgentRun, pub: Publisher, decision: Decision) -> PendingApproval | None:
    """A parent: send a decision on to the child whose call it names (the child checks it as
    its own); returns that call as decided, or ``None`` when it names no child's call. A name
    the run does not take decisions from is refused here too (``Refused``)."""
    found = for_child(run, decision)
    if found is None:
        return None
    child, pending = found
    check_approver(run, decision.decided_by)
    body = {**decision.body(), "call_id": pending.call_id}
    remaining = tuple(p for p in child.pending_approvals if p.call_id != pending.call_id)
    run.family.replace(child.model_copy(update={"pending_approvals": remaining}))
    by = f" by {decision.decided_by}" if decision.decided_by else ""
    named = f"{child.call_id}/{pending.call_id}"
    pub.record(
        run.state, "SignalForwarded", f"{decision.action} {named}{by} to {child.workflow_id}"
    )
    handle = workflow.get_external_workflow_handle(child.workflow_id)
    # Handlers are not coroutines here: the signal goes out as a task of the run's own loop
    # (deterministic: it is scheduled in this workflow task, as any command is).
    asyncio.get_running_loop().create_task(_send(handle, decision.action, body))
    return pending.model_copy(
        update={
            "call_id": named,
            "decision": _DECIDED[decision.action],
            "decided_by": decision.decided_by,
        }
    )


def guidance_for_child(bodies: tuple[Any, ...]) -> GuideSignal | None:
    """A ``guide`` signal's body that names a child's call, or ``None`` (the run's own
    guidance, whose checks say why a body is wrong)."""
    if len(bodies) != 1 or not isinstance(bodies[0], dict) or "call_id" not in bodies[0]:
        return None
    try:
        return GuideSignal.model_validate(bodies[0])
    except ValidationError as exc:
        raise Refused(describe_errors(exc)) from None


def guided_child(run: AgentRun, signal: GuideSignal) -> tuple[ChildRun, str | None]:
    """The running child a guidance names, and the rest of its path (a grandchild's call, for
    the child to send on), or ``Refused``: no such child, or it does not wait for guidance."""
    outer, _, inner = (signal.call_id or "").partition(SEPARATOR)
    child = next((c for c in run.family.running() if c.call_id == outer), None)
    if child is None:
        running = ", ".join(c.call_id for c in run.family.running()) or "none"
        raise Refused(f"no running sub-agent was started by call {outer!r} (running: {running})")
    own = child.stuck is not None and child.stuck_at is None  # not a stuck run below it
    if not inner and (not own or child.state != "WaitingForHuman"):
        raise Refused(f"sub-agent {child.workflow_id} is not waiting for guidance")
    check_approver(run, signal.decided_by)
    return child, inner or None


def forward_guidance(run: AgentRun, pub: Publisher, signal: GuideSignal) -> None:
    """A parent: send guidance (or a halt) on to the stuck child it names (``call_id``); the
    child takes it as its own, or sends it on to its child. ``Refused`` as ``guided_child``."""
    child, inner = guided_child(run, signal)
    body = signal.model_dump(exclude_none=True, exclude={"call_id"})
    if inner is not None:
        body["call_id"] = inner
    else:  # shown as guided until the child reports again
        run.family.replace(child.model_copy(update={"stuck": None}))
    what = "halt" if signal.halt else "guide"
    by = f" by {signal.decided_by}" if signal.decided_by else ""
    pub.record(run.state, "SignalForwarded", f"{what} {signal.call_id}{by} to {child.workflow_id}")
    pub.emit("decided", f"{what} sub-agent {signal.call_id}{by}", decided_by=signal.decided_by)
    handle = workflow.get_external_workflow_handle(child.workflow_id)
    asyncio.get_running_loop().create_task(_send(handle, "guide", body))
    pub.show()


def check_forward_guidance(run: AgentRun, decision: Decision) -> GuideSignal | None:
    """The ``decide`` validator's part: a guidance naming a child's call (a refusal rejects the
    update), or ``None``: not one."""
    if decision.action != "guide" or decision.call_id is None:
        return None
    try:
        signal = GuideSignal.model_validate(decision.body())
        guided_child(run, signal)
    except (Refused, ValidationError) as exc:
        why = describe_errors(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ApplicationError(why, type="DecisionRefused", non_retryable=True) from None
    return signal


_DECIDED = {
    "approve": ApprovalDecision.APPROVED,
    "reject": ApprovalDecision.REJECTED,
    "modify": ApprovalDecision.MODIFIED,
}


def check_forward(run: AgentRun, decision: Decision) -> bool:
    """The ``decide`` validator's part: the decision names a child's call (and comes from a
    name the run takes decisions from, else it is refused like the run's own)."""
    if for_child(run, decision) is None:
        return False
    try:
        check_approver(run, decision.decided_by)
    except Refused as exc:
        raise ApplicationError(str(exc), type="DecisionRefused", non_retryable=True) from None
    return True


def signal_decision(action: str, body: Any) -> Decision | None:
    """An approve, reject or modify signal's body as a decision, if it is one (the run's own
    checks say why a body that is not)."""
    if not isinstance(body, dict):
        return None
    try:
        return Decision.model_validate({**body, "action": action})
    except ValueError:
        return None


async def _send(handle: workflow.ExternalWorkflowHandle[Any], action: str, body: Any) -> None:
    try:
        await handle.signal(action, body)
    except ApplicationError as exc:  # the child ended meanwhile: nothing waits any more
        workflow.logger.warning("agent.subagent.forward_failed", extra={"why": exc.message})
