"""The run's doors: its signals, updates and queries, as a mixin of the workflow class.

Every check is elsewhere (``approvals``, ``threads``, ``client_queries``): a handler checks,
writes the run's state, and leaves a trace line. A refused signal is a trace line and the run
keeps waiting; a refused update is refused in its validator, before anything reaches history.
The loop (``engine``) waits on what these handlers write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.acting import ToolRunner
from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.models import (
    AgentStatus,
    Decision,
    GuideSignal,
    MidTurn,
    PendingApproval,
    SendReceipt,
    ThreadExport,
    Trace,
    UserMessage,
)
from treadle.workflows.agent.messages.progress import ProgressSummary
from treadle.workflows.agent.messages.snapshots import WorkspaceHead
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts import (
    approvals,
    client_queries,
    midturn,
    status,
    threads,
    waiting,
)
from treadle.workflows.agent.parts.approvals import Refused
from treadle.workflows.agent.parts.client_queries import AnswerRefused
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.status import cut
from treadle.workflows.agent.subagents import delegation
from treadle.workflows.agent.subagents import queries as child_queries
from treadle.workflows.agent.subagents import reports as child_reports
from treadle.workflows.base import Frozen, describe_errors

_M = TypeVar("_M", bound=Frozen)

SHAPES = {
    "decide": '{"action": "approve", "call_id": "..."}',
    "send": '{"text": "..."}',
    "answer_query": '{"query_id": "...", "kind": "...", "content": "..."}',
}
"""What each update's one input looks like, for the refusal of a wrong number of inputs."""

SIGNALS = ("approve", "reject", "modify", "guide", "wake")
"""The signals a run understands; any other name is refused in the trace."""


def one_input(update: str, model: type[_M], inputs: tuple[Any, ...]) -> _M:
    """The one JSON object an update takes, parsed.

    Updates take ``*inputs``, as signals take ``*bodies``: typed with one parameter, an update
    given two inputs (``--input`` twice) or none would be refused with a ``TypeError`` about
    positional arguments. Its validator refuses with what it takes instead, before anything
    reaches the history; the handler parses the same input again (validators do not replay)."""
    if len(inputs) != 1:
        raise _input_refused(
            f"{update} takes one JSON object, {SHAPES[update]}; got {len(inputs)} inputs"
        )
    if isinstance(inputs[0], RawValue):
        raise _input_refused(
            f"{update}: the input cannot be decoded (encoding {approvals.encoding(inputs[0])!r})"
        )
    try:
        return model.model_validate(inputs[0])
    except ValidationError as exc:
        raise _input_refused(f"{update}: {describe_errors(exc)}") from None


def _by(name: str | None) -> str:
    """`` by NAME`` for a trace line, when the sender said who they are."""
    return f" by {name}" if name else ""


def _input_refused(message: str) -> ApplicationError:
    return ApplicationError(message, type="InputRefused", non_retryable=True)


class AgentHandlers:
    """Signals, updates and queries of ``AgentWorkflow``; the engine sets ``_run`` and ``_pub``."""

    _run: AgentRun
    _pub: Publisher
    _tools: ToolRunner

    # ----------------------------------------------------------------------------------------
    # Human approval. Signal handlers take ``*bodies``: a handler that cannot take what arrives
    # would fail the workflow task, which Temporal retries forever. Every body is checked, and a
    # refusal is a trace line, never an exception.
    # ----------------------------------------------------------------------------------------

    @workflow.signal
    def approve(self, *bodies: Any) -> None:
        """``{"call_id": "..."}``: run the pending call as the model asked."""
        self._signal("approve", bodies)

    @workflow.signal
    def reject(self, *bodies: Any) -> None:
        """``{"call_id": "...", "reason": "..."}``: do not run it; the reason is the observation."""
        self._signal("reject", bodies)

    @workflow.signal
    def modify(self, *bodies: Any) -> None:
        """``{"call_id": "...", "arguments": {...}}``: run it with these (checked) arguments."""
        self._signal("modify", bodies)

    @workflow.signal
    def guide(self, *bodies: Any) -> None:
        """``{"guidance": "..."}`` or ``{"halt": true, "reason": "..."}`` for a stuck run; guidance
        also wakes a run parked by the ``wait`` tool, and the model reads it. With
        ``"call_id"``: for the stuck sub-agent that call started, sent on to it."""
        try:
            for_child = delegation.guidance_for_child(bodies)
            if for_child is not None:
                delegation.forward_guidance(self._run, self._pub, for_child)
                return
        except Refused as exc:
            self._refused("guide", exc)
            return
        if self._run.state is State.WAITING:
            self._wake("guide", lambda: waiting.guidance(bodies))
            return
        try:
            signal = approvals.check_guide(self._run, approvals.signal_body("guide", bodies))
        except Refused as exc:
            self._refused("guide", exc)
            return
        self._apply_guide(signal)

    @workflow.signal
    def wake(self, *bodies: Any) -> None:
        """``{"reason": "..."}`` (optional): end the ``wait`` tool's wait now."""
        self._wake("wake", lambda: waiting.wake_reason(bodies))

    def _wake(self, signal: str, why: Callable[[], str]) -> None:
        try:
            reason = why()
        except waiting.WakeRefused as exc:
            self._refused(signal, Refused(str(exc)))
            return
        if not waiting.wake(self._run.waiting, reason):
            self._refused(signal, Refused("the run is not waiting (no wait tool call)"))
            return
        self._pub.record(self._run.state, "SignalReceived", f"{signal}: {cut(reason, 200)}")

    @workflow.signal(name=child_reports.CHILD_WAITING)
    def subagent_waiting(self, *bodies: Any) -> None:
        """From a child run (``delegate``): its report (``child_reports``): what it spent, its
        events, its calls waiting for a human (or none any more). Shown in this run's status
        and stream; its calls are decided through it (``delegation.forward``)."""
        try:
            body = approvals.signal_body(child_reports.CHILD_WAITING, bodies)
            reported = child_reports.ChildReport.model_validate(body)
        except Refused as exc:
            self._refused(child_reports.CHILD_WAITING, exc)
            return
        except ValidationError as exc:
            self._refused(child_reports.CHILD_WAITING, Refused(describe_errors(exc)))
            return
        child_reports.child_reported(self._run, self._pub, reported)

    @workflow.signal(name=child_queries.CLIENT_ANSWER)
    def client_answer(self, *bodies: Any) -> None:
        """From the parent run: an answer to this run's client query (or its child's) that the
        parent's ``answer_query`` took (``child_queries``)."""
        why = child_queries.from_parent(self._run, self._pub, bodies)
        if why is not None:
            self._refused(child_queries.CLIENT_ANSWER, Refused(why))

    @workflow.signal(dynamic=True)
    def unknown_signal(self, name: str, bodies: Sequence[RawValue]) -> None:
        """Any other signal name: Temporal accepts it, so the trace says it was not understood
        (instead of a misspelt ``aprove`` vanishing)."""
        self._refused(name, Refused(f"unknown signal (this run takes: {', '.join(SIGNALS)})"))

    @workflow.update
    def decide(self, *inputs: Any) -> PendingApproval | None:
        """``{"action": "approve", "call_id": "..."}`` (a ``Decision``): approve, reject or
        modify one pending call (returns it as decided), or guide a stuck run (returns nothing);
        guidance also wakes a run parked by the ``wait`` tool."""
        decision = one_input("decide", Decision, inputs)
        for_child = delegation.check_forward_guidance(self._run, decision)
        if for_child is not None:  # a sub-agent's guidance: sent on to it
            try:
                delegation.forward_guidance(self._run, self._pub, for_child)
            except Refused as exc:
                raise ApplicationError(
                    str(exc), type="DecisionRefused", non_retryable=True
                ) from None
            return None
        guidance = self._guidance_while_waiting(decision)
        if guidance is not None:
            self._wake("guide", lambda: guidance)
            return None
        if delegation.check_forward(self._run, decision):  # a child's call: sent on to it
            return delegation.forward(self._run, self._pub, decision)
        checked = approvals.check_update(self._run, decision)
        if isinstance(checked, GuideSignal):
            self._apply_guide(checked)
            return None
        return self._apply(decision.action, checked)

    @decide.validator
    def _validate_decide(self, *inputs: Any) -> None:
        # Raised in the validator, the refusal rejects the update: nothing reaches the history.
        decision = one_input("decide", Decision, inputs)
        if delegation.check_forward_guidance(self._run, decision) is not None:
            return
        if self._guidance_while_waiting(decision) is None:
            if delegation.check_forward(self._run, decision):
                return
            approvals.check_update(self._run, decision)

    def _guidance_while_waiting(self, decision: Decision) -> str | None:
        """Guidance for a run the ``wait`` tool parked: it ends the wait (``None``: not that)."""
        if decision.action != "guide" or self._run.state is not State.WAITING:
            return None
        try:
            return waiting.guidance((decision.body(),))
        except waiting.WakeRefused as exc:
            raise ApplicationError(str(exc), type="DecisionRefused", non_retryable=True) from None

    def _signal(self, action: str, bodies: tuple[Any, ...]) -> None:
        try:
            body = approvals.signal_body(action, bodies)
            decision = delegation.signal_decision(action, body)
            if decision is not None and delegation.forward(self._run, self._pub, decision):
                return  # a child's call: sent on to it
            checked = approvals.check_decision(self._run, action, body)
        except Refused as exc:
            self._refused(action, exc)
            return
        self._apply(action, checked)

    def _refused(self, signal: str, why: Refused) -> None:
        self._pub.record(self._run.state, "SignalRefused", f"{signal[:100]}: {why}")
        self._pub.emit("refused", f"{signal[:100]}: {why}")
        workflow.logger.warning("agent.signal.refused", extra={"signal": signal, "why": str(why)})

    def _apply(self, action: str, checked: approvals.Checked) -> PendingApproval:
        decided = approvals.apply_decision(self._run.memory, checked)
        if checked.call is not None:
            self._tools.replace(checked.call)
        by = _by(decided.decided_by)
        self._pub.record(self._run.state, "SignalReceived", f"{action} {decided.call_id}{by}")
        self._pub.emit(
            "decided",
            f"{action} {decided.call_id}{by}" + (f": {decided.reason}" if decided.reason else ""),
            tool=decided.tool,
            call_id=decided.call_id,
            arguments=decided.arguments,
            decided_by=decided.decided_by,
        )
        self._pub.show()
        return decided

    def _apply_guide(self, signal: GuideSignal) -> None:
        self._run.memory.human_guidance = signal
        what = ("guide: halt" if signal.halt else "guide") + _by(signal.decided_by)
        self._pub.record(self._run.state, "SignalReceived", what)
        self._pub.emit("decided", what, decided_by=signal.decided_by)

    # ----------------------------------------------------------------------------------------
    # Threads: the user's next message, and closing.
    # ----------------------------------------------------------------------------------------

    @workflow.update
    def send(self, *inputs: Any) -> SendReceipt:
        """``{"text": "...", "mode": "steer"}``: the thread's next user message. While a turn
        runs, ``mode`` (else the thread's ``mid_turn``) says what it does: ``queue`` (after the
        turn), ``steer`` (joins it), ``interrupt`` (cuts the model call and joins it) or
        ``reject`` (refused in the validator)."""
        message = one_input("send", UserMessage, inputs)
        run = self._run
        state = run.state
        receipt, where = midturn.take(run, message)
        how = "queued" if receipt.mode in (None, MidTurn.QUEUE) else receipt.mode.value
        waiting.wake(run.waiting, f"a user message arrived ({how}): {cut(message.text, 200)}")
        self._pub.record(state, "UserMessageReceived", f"{where}: {cut(message.text, 200)}")
        self._pub.emit("message", cut(message.text, 2_000))
        return receipt

    @send.validator
    def _validate_send(self, *inputs: Any) -> None:
        message = one_input("send", UserMessage, inputs)
        threads.check_message(self._run, message)
        midturn.check(self._run, message)

    @workflow.update
    def close(self, *inputs: Any) -> AgentStatus:
        """End the thread once it has answered the messages it already has."""
        thread = self._run.thread
        thread.closing = True
        self._pub.record(
            self._run.state, "CloseRequested", f"{len(thread.inbox)} message(s) to answer first"
        )
        return status.status(self._run, workflow.now(), self._pub.stream_end(), self._pub.outage)

    @close.validator
    def _validate_close(self, *inputs: Any) -> None:
        if inputs:
            raise _input_refused(f"close takes no input; got {len(inputs)}")
        threads.check_close(self._run)

    # ----------------------------------------------------------------------------------------
    # Client queries (Loom's server query): the client's answer.
    # ----------------------------------------------------------------------------------------

    @workflow.update
    def answer_query(self, *inputs: Any) -> ClientQuery:
        """``{"query_id": "q1", "kind": "file_read", "content": "..."}`` (or ``"declined"``):
        the answer to the pending client query; returns the query it answered."""
        answer = one_input("answer_query", ClientAnswer, inputs)
        try:
            forwarded = child_queries.forward(self._run, self._pub, answer)
        except AnswerRefused as exc:
            raise ApplicationError(str(exc), type="AnswerRefused", non_retryable=True) from None
        if forwarded is not None:  # a sub-agent's query: sent on to it
            return forwarded
        run, client = self._run, self._run.client
        query = client.query
        if query is None or client.answer is not None:
            # Two answers validated in one activation: the first one counts.
            raise ApplicationError("the query was already answered", type="AnswerRefused")
        client.answer = answer
        self._pub.record(
            run.state,
            "ClientAnswerReceived",
            f"{query.id}: "
            + ("declined" if answer.declined is not None else "answered")
            + _by(answer.decided_by),
        )
        return query

    @answer_query.validator
    def _validate_answer_query(self, *inputs: Any) -> None:
        answer = one_input("answer_query", ClientAnswer, inputs)
        client = self._run.client
        try:
            if child_queries.for_child(self._run, answer) is not None:
                return
            client_queries.check_answer(
                client.query if client.answer is None else None,
                answer,
                self._run.input.config.client_query_max_answer_chars,
            )
        except AnswerRefused as exc:
            raise ApplicationError(str(exc), type="AnswerRefused", non_retryable=True) from None

    # ----------------------------------------------------------------------------------------
    # Queries
    # ----------------------------------------------------------------------------------------

    @workflow.query
    def state(self) -> AgentStatus:
        """Where the run is: state, step, pending approvals, token usage, last event."""
        return status.status(self._run, workflow.now(), self._pub.stream_end(), self._pub.outage)

    @workflow.query
    def export(self) -> ThreadExport:
        """The conversation in Loom's shape: ``agent_state`` and ``conversation.messages``."""
        return threads.export(self._run)

    @workflow.query
    def progress(self) -> ProgressSummary:
        """Nexora's totals: phases completed / total, files, tool calls, tests, elapsed."""
        return self._run.tracker.summary(workflow.now(), self._run.started_at)

    @workflow.query
    def trace(self) -> Trace:
        """The append-only log: step, state, event, data, timestamp."""
        return Trace(entries=tuple(self._run.trace), earlier=self._run.trace_earlier)

    @workflow.query
    def workspace(self) -> WorkspaceHead:
        """The key of the workspace's latest snapshot (``treadle workspace``)."""
        return WorkspaceHead(manifest=self._run.workspace_snapshot, step=self._run.memory.step)
