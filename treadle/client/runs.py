"""``AgentClient``'s runs: start one, read it (status, trace, result, its conversation, the
list), decide what it waits for, answer its client queries, wake it, watch its live stream.

Every query and update goes through ``calls.Calls`` (named by object: ``AgentWorkflow.decide``),
so each Temporal error becomes one of ``treadle.client.errors``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from treadle import closed as closed_runs
from treadle.client.base import ClientBase
from treadle.client.errors import (
    AgentClientError,
    InvalidRequest,
    NoStream,
    Refused,
    RunCannotAnswer,
    RunEnded,
    RunExists,
    RunNotFound,
    TemporalRefused,
)
from treadle.client.results import Decided, RunOverview, RunSummary, StartedRun, Woken
from treadle.client.workdirs import make_workspace
from treadle.stream import StreamItem, StreamNotice, StreamUnavailable, read_items, watch_events
from treadle.workflows.agent.messages import catalogue
from treadle.workflows.agent.messages import search_attributes as sa
from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.models import (
    AgentInput,
    AgentResult,
    AgentStatus,
    Decision,
    PendingApproval,
    RunStatus,
    ThreadExport,
    Trace,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.toolbox import parse_with_refs
from treadle.workflows.agent.parts.waiting import WakeSignal
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import describe_errors

__all__ = ["FILTERS", "Runs", "check_arguments", "outcome", "waiting_for"]

LIST_LIMIT = 50
MAX_NESTING = 8
"""How many generations of parents a wait's filter climbs from a waiting sub-agent."""
LIST_STATUS_TIMEOUT = timedelta(seconds=3)
"""How long a listed run's worker has to answer its status before it is listed without it."""
_UNANSWERED = "('Halted', 'Error', 'Cancelled')"
"""The end states a completed run sends (one that answers may send none)."""
FILTERS: dict[str, str] = {
    "WaitingForHuman": "AgentState = 'WaitingForHuman'",
    "WaitingForClient": "AgentState = 'WaitingForClient'",
    "WaitingForUserInput": "AgentState = 'WaitingForUserInput'",
    "running": "ExecutionStatus = 'Running'",
    "done": f"ExecutionStatus = 'Completed' AND AgentState NOT IN {_UNANSWERED}",
    "error": (
        f"ExecutionStatus != 'Running' AND (ExecutionStatus != 'Completed' "
        f"OR AgentState IN {_UNANSWERED})"
    ),
}
"""What ``list_runs`` can keep to: the three waits, and running / done / error. A run that
answers from one of its steps ends on its close status, ``AgentState`` left at that step's
state (``publishing``): a completed run is done unless its state says it halted or failed."""
_WAITS = {
    "WaitingForHuman": "a person: approve a call or guide the run",
    "WaitingForClient": "its client: answer a question",
    "WaitingForUserInput": "its user: the next message",
}


def waiting_for(state: str) -> str | None:
    """Who a run in ``state`` waits for, in words (``None``: nobody)."""
    return _WAITS.get(state)


def check_arguments(tool: str, arguments: dict[str, Any]) -> None:
    """New arguments for a call of ``tool``, checked against its schema before they are sent
    (a stored value's marker may stay as it is); the run checks them again. A tool the catalogue
    does not know (an MCP server's) is left to the run. ``InvalidRequest`` saying why."""
    if tool in catalogue.TOOLS:
        try:
            parse_with_refs(tool, arguments)
        except catalogue.ToolArgumentsError as exc:
            raise InvalidRequest(str(exc)) from exc


class Runs(ClientBase):
    """Agent runs (a thread is a run too: everything here applies to it)."""

    # -- starting ------------------------------------------------------------------------------

    async def start(
        self,
        agent_input: AgentInput,
        *,
        id: str | None = None,
        task_queue: str | None = None,
        summary: str | None = None,
        create_workspace: bool = False,
        search_attributes: TypedSearchAttributes | None = None,
    ) -> StartedRun:
        """Start a run (a thread when ``agent_input.thread``) on ``task_queue`` (default: the
        client's). ``id`` names it (default ``agent-<random>`` / ``thread-<random>``): never a
        second run under an existing id (``RunExists``). ``create_workspace`` makes the
        input's workspace directory first if it is missing (else it must exist)."""
        prefix = "thread" if agent_input.thread else "agent"
        workflow_id = id or f"{prefix}-{uuid.uuid4().hex[:12]}"
        workspace = Path(agent_input.workspace)
        if create_workspace:
            await asyncio.to_thread(make_workspace, workspace)
        if summary is None:
            summary = (
                f"thread: {agent_input.task[:190]}"
                if agent_input.thread
                else agent_input.task[:200]
            )
        queue = task_queue or self.task_queue
        try:
            handle = await self.temporal.start_workflow(
                AgentWorkflow.run,
                agent_input,
                id=workflow_id,
                task_queue=queue,
                static_summary=summary,
                static_details=f"model {agent_input.model} · workspace {agent_input.workspace}",
                # An id names one run for approve/status/trace; never silently start a second.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                # What it shows first, set as it starts: no upsert (billed) to show it.
                search_attributes=sa.start_attributes(agent_input, search_attributes),
            )
        except WorkflowAlreadyStartedError as exc:
            raise RunExists(
                f"a run with id {workflow_id!r} already exists", run_id=workflow_id
            ) from exc
        except RPCError as exc:
            raise TemporalRefused(f"Temporal refused the request: {exc.message}") from exc
        return StartedRun(
            id=handle.id,
            run_id=handle.result_run_id or "",
            task_queue=queue,
            thread=agent_input.thread,
        )

    # -- reading -------------------------------------------------------------------------------

    async def status(self, run_id: str) -> AgentStatus:
        """The run's status (its ``state`` query): state, step, usage, what it waits for. A
        run that completed is read from its result (``closed_result``): no worker needed."""
        ended = await self.closed_result(run_id)
        if ended is not None and ended.final is not None:
            return ended.final
        status: AgentStatus = await self._calls.query(
            run_id, AgentWorkflow.state, what="the state query"
        )
        return status

    async def trace(self, run_id: str) -> Trace:
        """The run's trace: the append-only log of what each state did (a completed run's:
        the tail its result carries, read with no worker)."""
        ended = await self.closed_result(run_id)
        if ended is not None and ended.trace is not None:
            return ended.trace
        trace: Trace = await self._calls.query(run_id, AgentWorkflow.trace, what="the trace query")
        return trace

    async def closed_result(self, run_id: str) -> AgentResult | None:
        """The result of a run that has completed, read from its history (no worker asked);
        ``None`` while it runs or when it ended without one (see ``Calls.closed_result``)."""
        return await self._calls.closed_result(run_id)

    async def result(self, run_id: str) -> AgentResult:
        """The run's result, once it is over (waits for it); a failed, terminated, cancelled or
        timed-out run is an error result."""
        try:
            return await outcome(self._calls.handle(run_id))
        except RPCError as exc:
            raise await self._calls.rpc_failed(run_id, exc, what="its result") from exc

    async def overview(self, run_id: str) -> RunOverview:
        """The run's status and its conversation (``None`` when its worker cannot answer the
        export). A closed run is asked once per process: it cannot change, and each query of
        a closed run is a replay by a worker (``treadle.closed``)."""
        closed = await closed_runs.closed_run(self.temporal, run_id)

        async def ask(what: str, query: Any) -> Any:
            if closed is None:
                return await self._calls.query(run_id, query, what=what)

            async def asked(handle: WorkflowHandle[Any, Any]) -> Any:
                # Pinned to the closed run: a newer run of the same id is never answered for it.
                return await self._calls.query(run_id, query, what=what, run=closed)

            return await closed_runs.kept(self.temporal, run_id, closed, ("client", what), asked)

        ended = await self.closed_result(run_id) if closed is not None else None
        if ended is not None and ended.final is not None:
            return RunOverview(status=ended.final, export=ended.export)
        status: AgentStatus = await ask("the state query", AgentWorkflow.state)
        exported: ThreadExport | None
        try:
            exported = await ask("the export query", AgentWorkflow.export)
        except AgentClientError:
            exported = None
        return RunOverview(status=status, export=exported)

    async def list_runs(
        self, filter: str | None = None, *, limit: int = LIST_LIMIT
    ) -> list[RunSummary]:
        """The newest runs and threads, from Temporal visibility (``filter``: one of
        ``FILTERS``); the open ones are asked their status, all at once with a short deadline,
        and one whose worker does not answer is listed from visibility alone."""
        query = "WorkflowType = 'AgentWorkflow'"
        if filter:
            if filter not in FILTERS:
                raise InvalidRequest(f"no filter {filter!r}; one of {', '.join(FILTERS)}")
            query += f" AND {FILTERS[filter]}"
        executions: list[WorkflowExecution] = []
        try:
            async for execution in self.temporal.list_workflows(query, limit=limit):
                executions.append(execution)
            if filter in _WAITS:
                executions += await self._waiting_ancestors(executions)
        except RPCError as exc:
            raise TemporalRefused(f"Temporal refused the list: {exc.message}") from exc
        statuses = await asyncio.gather(*(self._listed_status(e) for e in executions))
        return [_summary(e, s) for e, s in zip(executions, statuses, strict=True)]

    async def _waiting_ancestors(self, waiting: list[WorkflowExecution]) -> list[WorkflowExecution]:
        """The running parents (and theirs) of sub-agents listed as waiting: a parent is
        ``Acting`` in visibility while its ``delegate`` call waits, yet it waits as much as its
        child does, so a wait's filter lists it too (its row says for which sub-agent)."""
        listed = {e.id for e in waiting}
        found: list[WorkflowExecution] = []
        parents = {e.parent_id for e in waiting if e.parent_id} - listed
        for _ in range(MAX_NESTING):
            if not parents:
                break
            described = await asyncio.gather(
                *(self.temporal.get_workflow_handle(p).describe() for p in sorted(parents)),
                return_exceptions=True,
            )
            running = [
                d
                for d in described
                if isinstance(d, WorkflowExecution)
                and d.status is WorkflowExecutionStatus.RUNNING
                and d.workflow_type == "AgentWorkflow"
            ]
            found += running
            listed |= {d.id for d in running}
            parents = {d.parent_id for d in running if d.parent_id} - listed
        return found

    async def _listed_status(self, execution: WorkflowExecution) -> AgentStatus | None:
        if execution.status is not WorkflowExecutionStatus.RUNNING:
            return None  # a closed run's query would replay its whole history on a worker
        try:
            status: AgentStatus = await self._calls.handle(execution.id).query(
                AgentWorkflow.state, rpc_timeout=LIST_STATUS_TIMEOUT
            )
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
            return None  # no worker, or one that cannot answer: listed from visibility alone
        return status

    # -- deciding ------------------------------------------------------------------------------

    async def decide(self, run_id: str, decision: Decision) -> Decided:
        """Send a decision through the run's ``decide`` update: the run's validator checks it
        at once (``Refused`` with its reason: nothing waits, an unknown call id, arguments its
        schema refuses, a name its ``approvers`` do not list...)."""
        if decision.action == "reject" and not decision.reason:
            raise InvalidRequest("a rejection needs a reason (the model reads it)")
        if decision.action == "modify" and decision.arguments is None:
            raise InvalidRequest("a modification needs the call's new arguments")
        if decision.action == "guide" and bool(decision.halt) == bool(decision.guidance):
            raise InvalidRequest("give the model guidance (to continue), or halt the run")
        decided: PendingApproval | None = await self._calls.update(
            run_id, AgentWorkflow.decide, decision, what=f"to {decision.action}"
        )
        if decided is None:  # guidance: nothing waited on a call
            return Decided(
                run_id=run_id,
                action=decision.action,
                call_id=decision.call_id,
                halted=bool(decision.halt),
            )
        return Decided(
            run_id=run_id, action=decision.action, call_id=decided.call_id, tool=decided.tool
        )

    async def approve(
        self, run_id: str, *, call_id: str | None = None, decided_by: str | None = None
    ) -> Decided:
        """Approve the call waiting (``call_id``: needed when several wait)."""
        return await self.decide(
            run_id, _decision(action="approve", call_id=call_id, decided_by=decided_by)
        )

    async def reject(
        self,
        run_id: str,
        reason: str,
        *,
        call_id: str | None = None,
        decided_by: str | None = None,
    ) -> Decided:
        """Reject the call waiting; the model reads ``reason``."""
        return await self.decide(
            run_id,
            _decision(action="reject", call_id=call_id, reason=reason, decided_by=decided_by),
        )

    async def modify(
        self,
        run_id: str,
        arguments: dict[str, Any],
        *,
        call_id: str | None = None,
        tool: str | None = None,
        decided_by: str | None = None,
    ) -> Decided:
        """Run the call waiting with ``arguments`` instead; with ``tool`` (the call's), they
        are checked against its schema here first (``check_arguments``)."""
        if tool is not None:
            check_arguments(tool, arguments)
        return await self.decide(
            run_id,
            _decision(action="modify", call_id=call_id, arguments=arguments, decided_by=decided_by),
        )

    async def guide(
        self,
        run_id: str,
        guidance: str | None = None,
        *,
        halt: bool = False,
        reason: str | None = None,
        child: str | None = None,
        decided_by: str | None = None,
    ) -> Decided:
        """A stuck run waiting for a human: continue with ``guidance``, or ``halt`` it
        (``reason``: why). ``child``: a stuck sub-agent's call (``call_1``, ``call_1/call_2``),
        which the run sends it on to."""
        return await self.decide(
            run_id,
            _decision(
                action="guide",
                guidance=guidance,
                halt=halt,
                reason=reason,
                call_id=child,
                decided_by=decided_by,
            ),
        )

    # -- client queries ------------------------------------------------------------------------

    async def answer(self, run_id: str, answer: ClientAnswer) -> ClientQuery:
        """Answer (or decline) a client query through the run's ``answer_query`` update;
        ``Refused`` when the run will not take it (no such query, too long...)."""
        answered: ClientQuery = await self._calls.update(
            run_id, AgentWorkflow.answer_query, answer, what="the answer"
        )
        return answered

    async def answer_query(
        self,
        run_id: str,
        query_id: str,
        content: str | None = None,
        *,
        declined: str | None = None,
        decided_by: str | None = None,
    ) -> ClientQuery:
        """Answer the query ``query_id`` the run waits on with ``content``, or decline it
        (``declined``: why); its kind is read from the run's status. A sub-agent's query is
        answered through its parent (``call_1/q1``)."""
        if (content is None) == (declined is None):
            raise InvalidRequest("give the answer's content, or why it is declined")
        status = await self.status(run_id)
        waiting = (*((status.client_query,) if status.client_query else ()), *status.child_queries)
        query = next((q for q in waiting if q.id == query_id), None)
        if query is None and status.client_query is not None and not status.child_queries:
            query = status.client_query  # its id is checked by the run, which says what waits
        if query is None and not waiting:
            raise InvalidRequest(f"run {run_id} has no client query waiting")
        if query is None:
            named = ", ".join(q.id for q in waiting)
            raise InvalidRequest(
                f"run {run_id} has no client query {query_id!r} waiting (waiting: {named})"
            )
        try:
            answer = ClientAnswer(
                query_id=query_id,
                kind=query.kind,
                content=content,
                declined=declined,
                decided_by=decided_by,
            )
        except ValidationError as exc:
            raise InvalidRequest(f"invalid answer: {describe_errors(exc)}") from exc
        return await self.answer(run_id, answer)

    # -- waking --------------------------------------------------------------------------------

    async def wake(self, run_id: str, reason: str = "") -> Woken:
        """End the wait of a run the ``wait`` tool parked, now (the model reads ``reason``);
        ``Refused`` when it is not waiting."""
        status = await self.status(run_id)
        if status.state is not State.WAITING:
            why = f"it is not waiting (it is {status.state.value})"
            raise Refused(
                f"run {run_id} is not waiting (it is {status.state.value}); wake ends a wait "
                "of the wait tool",
                reason=why,
            )
        await self._calls.signal(run_id, AgentWorkflow.wake, WakeSignal(reason=reason))
        return Woken(run_id=run_id, would_have_woken_at=status.wakes_at)

    # -- cancelling ----------------------------------------------------------------------------

    async def cancel(self, run_id: str) -> str:
        """Ask Temporal to cancel the run (a thread too): the request is recorded in its
        history and the workflow ends as cancelled (a second request changes nothing). Returns
        ``cancelling``; ``RunEnded`` when it is over, ``RunNotFound`` when there is none."""
        closed = await self._calls.closed_as(run_id)
        if closed == "missing":
            raise RunNotFound(self._calls.not_found(run_id), run_id=run_id)
        if closed is not None:
            raise RunEnded(f"run {run_id!r} is over ({closed}); nothing to cancel")
        try:
            await self._calls.handle(run_id).cancel()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                ended = await self._calls.closed_as(run_id)
                if ended not in (None, "missing"):
                    raise RunEnded(f"run {run_id!r} is over ({ended}); nothing to cancel") from exc
            raise await self._calls.rpc_failed(run_id, exc, what="the cancellation") from exc
        return "cancelling"

    # -- watching ------------------------------------------------------------------------------

    async def watch(
        self,
        run_id: str,
        *,
        from_offset: int | None = 0,
        on_notice: Callable[[StreamNotice], None] | None = None,
    ) -> AsyncGenerator[StreamItem, None]:
        """The run's live stream from ``from_offset`` (``None``: from now) until the run is
        over: every event (``AgentEvent``) and the model's text as it comes (``TokenDelta``),
        read by queries, so watching adds nothing to the run's history. ``on_notice`` hears
        what is not an item (no worker answers now, items no longer kept...). ``NoStream``
        when the run publishes none."""
        stream = watch_events(self.temporal, run_id, from_offset=from_offset, on_notice=on_notice)
        async with contextlib.aclosing(stream):
            try:
                async for item in stream:
                    yield item
            except StreamUnavailable as exc:
                raise NoStream(str(exc)) from exc

    async def read_stream(self, run_id: str, *, from_offset: int = 0) -> list[StreamItem]:
        """What the run's stream keeps now from ``from_offset``, in one read (no waiting)."""
        try:
            return await read_items(self.temporal, run_id, from_offset=from_offset)
        except StreamUnavailable as exc:
            raise NoStream(str(exc)) from exc
        except WorkflowQueryFailedError as exc:
            raise await self._calls.query_failed(run_id, exc, what="its stream") from exc
        except WorkflowQueryRejectedError as exc:
            raise RunCannotAnswer(f"run {run_id!r} could not answer its stream: {exc}") from exc
        except RPCError as exc:
            raise await self._calls.rpc_failed(run_id, exc, what="its stream") from exc


async def outcome(handle: WorkflowHandle[Any, Any]) -> AgentResult:
    """The result of the run ``handle`` names, once it is over (``AgentClient.result``): an
    error result for a failed, terminated, cancelled or timed-out run."""
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        return AgentResult(status=RunStatus.ERROR, error=getattr(cause, "message", str(cause)))
    if isinstance(result, AgentResult):
        return result
    return AgentResult.model_validate(result)


def _decision(**fields: Any) -> Decision:
    try:
        return Decision(**fields)
    except ValidationError as exc:
        raise InvalidRequest(f"invalid decision: {describe_errors(exc)}") from exc


def _ended(state: str) -> bool:
    """``state`` is an end state (a run sends none when it answers from one of its steps)."""
    return state in {s.value for s in State if s.is_terminal}


def _summary(execution: WorkflowExecution, status: AgentStatus | None) -> RunSummary:
    attrs = execution.typed_search_attributes
    state = attrs.get(sa.AGENT_STATE) or ""
    running = execution.status is WorkflowExecutionStatus.RUNNING
    if status is not None:
        state = status.state.value
    elif execution.status is WorkflowExecutionStatus.COMPLETED and state and not _ended(state):
        state = State.DONE.value  # it answered from a step: its close status says it ended
    elif not running and execution.status is not None and not state:
        state = execution.status.name.title()
    state = state or "Starting"
    return RunSummary(
        id=execution.id,
        state=state,
        execution=execution.status.name.lower() if execution.status else "unknown",
        step=status.step if status is not None else attrs.get(sa.AGENT_STEP),
        model=status.model if status is not None else attrs.get(sa.AGENT_MODEL),
        started=execution.start_time,
        closed=execution.close_time,
        task=status.task[:200] if status is not None else None,
        thread=status.thread if status is not None else None,
        last=status.last_event if status is not None else None,
        waiting_for=_waiting(state, status) if running else None,
        waiting_on=_busy_child(status),
        answered=status is not None,
    )


def _busy_child(status: AgentStatus | None) -> str | None:
    """The sub-agent a run waits for (its ``delegate`` call is running), if any."""
    if status is None or status.state.is_terminal:
        return None
    return next((c.workflow_id for c in status.children if c.status == "running"), None)


def _waiting(state: str, status: AgentStatus | None) -> str | None:
    """Who a running run waits for: a person, its client or user, or its sub-agent (a parent
    that delegated is ``Acting`` while its child works or waits for someone)."""
    own = waiting_for(state)
    child_id = _busy_child(status)
    if own is not None or status is None or child_id is None:
        return own
    child = next(c for c in status.children if c.workflow_id == child_id)
    theirs = waiting_for(child.state or "")
    return f"its sub-agent {child_id}" + (f", which waits for {theirs}" if theirs else "")
