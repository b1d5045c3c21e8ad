"""Human in the loop: which calls wait for a human, and what a decision about them may do.

Two doors lead to the same checks. The signals ``approve`` / ``reject`` / ``modify`` / ``guide``
take small plain JSON bodies, so the stock ``temporal workflow signal`` works; the update
``decide`` runs the same checks in its validator, so a client hears "refused, because ..."
synchronously and a refused update leaves no history.

Everything here is pure: checks raise ``Refused`` (the workflow records it in the trace), and
``apply_decision`` returns the decided call (the workflow records that too).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.models import (
    MAX_MODIFY_ARGUMENTS_BYTES,
    ApprovalDecision,
    ApproveSignal,
    Decision,
    GuideSignal,
    ModifySignal,
    PendingApproval,
    RejectSignal,
    ToolCall,
    ToolOutcome,
    Turn,
)
from treadle.workflows.agent.messages.state_machine import Event, State
from treadle.workflows.agent.parts.memory import AgentMemory
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.toolbox import CheckedCall, Toolbox
from treadle.workflows.base import Frozen, describe_errors


class Refused(Exception):
    """A decision the run cannot take: malformed, or not fitting its current situation."""


@dataclass(frozen=True)
class Checked:
    """A decision that passed every check, ready to apply."""

    pending: PendingApproval
    update: dict[str, Any]
    new_arguments: str | None = None
    call: CheckedCall | None = None
    """A ``modify``'s call as the toolbox checked it: what runs instead of the model's."""


DECISION_BODIES: dict[str, type[ApproveSignal | RejectSignal | ModifySignal]] = {
    "approve": ApproveSignal,
    "reject": RejectSignal,
    "modify": ModifySignal,
}


def approvals_needed(
    calls: tuple[CheckedCall, ...], require_approval: Collection[str], step: int, now: datetime
) -> tuple[PendingApproval, ...]:
    """The calls of one response that must wait for a human, with their checked arguments.
    Calls whose arguments did not parse never run, so nobody needs to approve them."""
    return tuple(
        PendingApproval(
            call_id=c.call.id,
            tool=c.call.name,
            arguments=c.arguments,
            step=step,
            requested_at=now,
        )
        for c in calls
        if c.call.name in require_approval and c.arguments is not None
    )


def check_decision(run: AgentRun, action: str, body: Any) -> Checked:
    """Everything that could refuse ``approve`` / ``reject`` / ``modify``, changing nothing."""
    signal = _parse(DECISION_BODIES[action], body)
    check_approver(run, signal.decided_by)
    if isinstance(signal, ModifySignal):
        size = len(signal.model_dump_json())
        if size > MAX_MODIFY_ARGUMENTS_BYTES:
            raise Refused(
                f"the new arguments are {size // 1024} KiB; at most "
                f"{MAX_MODIFY_ARGUMENTS_BYTES // 1024} KiB"
            )
    pending, by = _find_pending(run, signal.call_id), signal.decided_by
    if isinstance(signal, ApproveSignal):
        return Checked(pending, {"decision": ApprovalDecision.APPROVED, "decided_by": by})
    if isinstance(signal, RejectSignal):
        rejected = {"decision": ApprovalDecision.REJECTED, "reason": signal.reason}
        return Checked(pending, {**rejected, "decided_by": by})
    calls = [c for c in run.memory.current_tool_calls if c.id == pending.call_id]
    call = calls[0] if calls else ToolCall(id=pending.call_id, name=pending.tool)
    checked = Toolbox(run.input.config, run.mcp, run.loaded_tools).check(call, signal.arguments)
    if checked.arguments is None:
        raise Refused(checked.problem or "the arguments do not parse")
    new_arguments = checked.request_arguments(previews=True)  # the call as people see it
    return Checked(
        pending,
        {
            "decision": ApprovalDecision.MODIFIED,
            "arguments": checked.arguments,
            "decided_by": by,
        },
        new_arguments=new_arguments,
        call=replace(checked, call=call.model_copy(update={"arguments": new_arguments})),
    )


def apply_decision(memory: AgentMemory, checked: Checked) -> PendingApproval:
    """Record a checked decision on its pending call (and new arguments on the call itself)."""
    call_id = checked.pending.call_id
    if checked.new_arguments is not None:
        memory.current_tool_calls = tuple(
            c.model_copy(update={"arguments": checked.new_arguments}) if c.id == call_id else c
            for c in memory.current_tool_calls
        )
    decided = checked.pending.model_copy(update=checked.update)
    memory.pending_approvals = tuple(
        decided if p.call_id == call_id else p for p in memory.pending_approvals
    )
    return decided


def check_update(run: AgentRun, decision: Decision) -> GuideSignal | Checked:
    """The ``decide`` update's checks (the same as the signals'): a refusal is the
    non-retryable ``DecisionRefused`` error that rejects the update, which in its validator
    means before anything reaches the history."""
    try:
        if decision.action == "guide":
            return check_guide(run, decision.body())
        return check_decision(run, decision.action, decision.body())
    except Refused as exc:
        raise ApplicationError(str(exc), type="DecisionRefused", non_retryable=True) from None


def check_guide(run: AgentRun, body: Any) -> GuideSignal:
    """A ``guide`` body for a run that waits for guidance, or ``Refused``."""
    signal = _parse(GuideSignal, body)
    check_approver(run, signal.decided_by)
    if run.state is not State.WAITING_FOR_HUMAN or run.memory.pending_guidance is None:
        raise Refused("the run is not waiting for guidance")
    return signal


def check_approver(run: AgentRun, name: str | None) -> None:
    """A run that names its ``approvers`` takes decisions from them only. The name is what the
    sender wrote (attribution): who may signal the run at all is the server's authorizer's job."""
    approvers = run.input.config.approvers
    if approvers is None or name in approvers:
        return
    listed = ", ".join(approvers) or "none"
    if name is None:
        raise Refused(
            f"this run takes decisions from its approvers only ({listed}); "
            "say who decides with decided_by (treadle approve --as NAME)"
        )
    raise Refused(f"{name!r} is not one of this run's approvers ({listed})")


def all_decided(memory: AgentMemory) -> bool:
    return all(p.decision is not None for p in memory.pending_approvals)


def rejected_outcomes(memory: AgentMemory) -> tuple[ToolOutcome, ...]:
    """A rejected call's observation is the human's reason, as an error the model reads."""
    call_by_id = {c.id: c for c in memory.current_tool_calls}
    return tuple(
        ToolOutcome.of(
            call_by_id[p.call_id],
            f"ERROR: a human rejected this call: {p.reason}",
            success=False,
        )
        for p in memory.pending_approvals
        if p.decision is ApprovalDecision.REJECTED
    )


def resolve(memory: AgentMemory, *, parallel: bool) -> Event:
    """Once every pending call is decided: rejected calls become observations, and the event
    says what runs next (nothing, several at once, modified, or as asked)."""
    memory.observations = rejected_outcomes(memory)
    rejected = {o.call.id for o in memory.observations}
    runnable = [c for c in memory.current_tool_calls if c.id not in rejected]
    if not runnable:
        return Event.HUMAN_REJECTED
    if len(runnable) > 1 and parallel:
        return Event.HUMAN_APPROVED_PARALLEL
    if any(p.decision is ApprovalDecision.MODIFIED for p in memory.pending_approvals):
        return Event.HUMAN_MODIFIED
    return Event.HUMAN_APPROVED


def follow_guidance(run: AgentRun) -> Event:
    """A human answered a stuck run: halt it, or pass the guidance to the model and give the
    progress tracker a fresh window."""
    m = run.memory
    guide, reason = m.human_guidance, m.pending_guidance
    m.human_guidance = None
    m.pending_guidance = None
    if guide is None or guide.halt:
        m.error = f"halted by a human: {guide.reason if guide and guide.reason else reason}"
        return Event.HUMAN_HALTED
    m.history = (*m.history, Turn(step=m.step, note=f"Guidance from a human: {guide.guidance}"))
    run.tracker.reset_after_recovery()
    run.recovery.stuck_reason = None
    return Event.HUMAN_GUIDED


def signal_body(action: str, bodies: tuple[Any, ...]) -> Any:
    """The one body a signal carries. Signal handlers take any number of payloads, because a
    handler called with the wrong number would fail the workflow task (and Temporal retries a
    failed task forever): two bodies (``--input`` given twice) are refused here instead, and so
    is a body the converter could not decode (it arrives raw)."""
    if len(bodies) > 1:
        raise Refused(f"{action} takes one JSON body; got {len(bodies)}")
    body = bodies[0] if bodies else None
    if isinstance(body, RawValue):
        raise Refused(f"the body cannot be decoded (encoding {encoding(body)!r})")
    return body


def encoding(value: RawValue) -> str:
    """The encoding an undecodable payload claims: the converter hands such a payload over raw
    (``treadle.payloads``), where the SDK alone would drop the signal with a log line."""
    return value.payload.metadata.get("encoding", b"<none>").decode(errors="replace")


_S = TypeVar("_S", bound=Frozen)


def _parse(schema: type[_S], body: Any) -> _S:
    """Validate a body from outside, and make sure the run could write it to history."""
    try:
        signal = schema.model_validate({} if body is None else body)
    except ValidationError as exc:
        raise Refused(describe_errors(exc)) from None
    try:
        signal.model_dump_json()
    except PydanticSerializationError:
        # A lone UTF-16 surrogate ("\ud800") decodes from JSON but can never be encoded again.
        raise Refused("the body contains text that is not valid Unicode") from None
    return signal


def _find_pending(run: AgentRun, call_id: str | None) -> PendingApproval:
    waiting = [p for p in run.memory.pending_approvals if p.decision is None]
    if run.state is not State.WAITING_FOR_HUMAN or not waiting:
        raise Refused("no tool call is waiting for approval")
    if call_id is None:
        if len(waiting) > 1:
            ids = ", ".join(p.call_id for p in waiting)
            raise Refused(f"several calls are waiting ({ids}); say which with call_id")
        return waiting[0]
    for p in waiting:
        if p.call_id == call_id:
            return p
    ids = ", ".join(p.call_id for p in waiting)
    raise Refused(f"no pending call with id {call_id!r} (waiting: {ids})")
