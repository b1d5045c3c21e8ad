"""A thread's next message sent from outside the thread, and the wait for the turn that answers
it: what ``treadle.client`` does for a person (``send --wait``, ``chat``, the page, Python) and
what the ``send_to_thread`` activity (``activities.threads``) does for a scheduled message. It
lives here, below both, because activities import nothing of ``treadle`` above them; the client
is its front door (``AgentClient.send``, ``.wait_for_answer``, ``.close``).

When is a message answered? A thread answers its queued messages in order and waits for its
user only once its inbox is empty, so after a ``send`` it accepted (or after it started with
its first message), the thread seen waiting with nothing queued, or ended, has answered it.
That needs no count of the turns answered before, which continue-as-new would make wrong: only
the trace's tail is carried to the next run. (If other clients queue messages behind it, the
answer seen is the thread's answer to the last of them.)

A thread whose workflow closed without ending its turn (terminated, timed out) still answers
queries with the state it was left in, so a wait also asks Temporal, now and then, whether the
workflow still runs, and asks it again whenever a query fails (a closed thread whose worker
cannot replay it answers none): no input leaves a client waiting for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities.errors import ThreadUnavailable
from treadle.workflows.agent.messages.models import AgentStatus, MidTurn, SendReceipt, UserMessage
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

__all__ = [
    "POLL_SECONDS",
    "QUERY_TIMEOUT",
    "check_thread",
    "missing",
    "poll_delays",
    "refusal",
    "send_message",
    "turn_is_over",
    "turn_over",
    "wait_for_answer",
    "why_not",
]

POLL_SECONDS = 0.2
"""How often a person's client (``chat``, ``send --wait``) asks the thread how far it is."""
QUICK_SECONDS = 10.0
"""How long a wait that backs off first asks at its first pace."""
QUERY_TIMEOUT = timedelta(seconds=10)
ENDED_CHECK_SECONDS = 5.0
"""How often a wait asks Temporal whether the thread's workflow still runs."""


# --------------------------------------------------------------------------------------------
# Sending
# --------------------------------------------------------------------------------------------


async def send_message(
    handle: WorkflowHandle[Any, Any],
    text: str,
    *,
    update_id: str | None = None,
    mode: MidTurn | None = None,
) -> SendReceipt:
    """Send the thread ``text`` (its ``send`` update). The same ``update_id`` again is the same
    message: Temporal answers it once (within one run of the thread's chain).

    ``ThreadUnavailable`` when the thread refuses it (closed, not a thread) or does not run;
    a ``text`` that is no ``UserMessage`` is a ``ValidationError``; other RPC errors propagate,
    among them the NOT_FOUND of a run that had just continued as new (``why_not``): sent
    again, the message reaches the new run.
    """
    try:
        receipt: SendReceipt = await handle.execute_update(
            AgentWorkflow.send, UserMessage(text=text, mode=mode), id=update_id
        )
    except WorkflowUpdateFailedError as exc:
        raise ThreadUnavailable(refusal(exc)) from exc
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
        raise ThreadUnavailable(await why_not(handle, exc)) from exc
    return receipt


async def check_thread(client: Client, thread_id: str) -> AgentStatus:
    """The status of a running thread that can take a message; ``ThreadUnavailable`` (one
    line) for no such workflow, one that has ended, is no thread, or does not answer."""
    handle = client.get_workflow_handle(thread_id)
    try:
        description = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise ThreadUnavailable(f"no thread with id {thread_id!r}") from exc
        raise
    if description.status is not WorkflowExecutionStatus.RUNNING:
        ended = description.status.name.lower() if description.status else "closed"
        raise ThreadUnavailable(f"the thread {thread_id} has ended ({ended})")
    if description.workflow_type != AgentWorkflow.__name__:
        raise ThreadUnavailable(
            f"{thread_id!r} is a {description.workflow_type} workflow, not a thread"
        )
    try:
        status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as exc:
        raise ThreadUnavailable(
            f"the thread {thread_id} did not answer ({exc.message}); is a worker polling its "
            f"task queue {description.task_queue}?"
        ) from exc
    except WorkflowQueryFailedError as exc:  # a worker answered, but could not run the query
        raise ThreadUnavailable(
            f"the thread {thread_id} could not answer its state query ({exc.message}); does "
            f"the worker on its task queue {description.task_queue} run this Treadle's code?"
        ) from exc
    if not status.thread:
        raise ThreadUnavailable(f"{thread_id!r} is a single-task run, not a thread")
    if status.state.is_terminal:
        raise ThreadUnavailable(f"the thread {thread_id} has ended ({status.state.value})")
    return status


def refusal(exc: WorkflowUpdateFailedError) -> str:
    """The thread's validator's reason for refusing an update."""
    cause = exc.cause
    return f"refused: {getattr(cause, 'message', None) or cause or exc}"


async def why_not(handle: WorkflowHandle[Any, Any], exc: RPCError) -> str:
    """Why Temporal refused a message or close: no such thread, or one that has ended.

    A NOT_FOUND while the thread still runs is no reason: the request reached a run that had
    just continued as new. Then ``exc`` itself is raised again, for the caller to retry (sent
    again, the request goes to the new run). A ``describe`` that fails for another reason than
    a missing workflow (the server did not answer) raises its own error.
    """
    if exc.status is RPCStatusCode.NOT_FOUND:
        try:
            description = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as failed:
            if failed.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return f"no thread with id {handle.id!r}"
            raise
        if description.status is WorkflowExecutionStatus.RUNNING:
            raise exc
        if description.status is not None:
            return f"the thread {handle.id} has ended ({description.status.name.lower()})"
    return missing(handle.id, exc)


def missing(workflow_id: str, exc: RPCError) -> str:
    if exc.status is RPCStatusCode.NOT_FOUND:
        return f"no thread with id {workflow_id!r}"
    return f"Temporal refused the request: {exc.message}"


# --------------------------------------------------------------------------------------------
# Waiting for the answer
# --------------------------------------------------------------------------------------------


def turn_is_over(status: AgentStatus) -> bool:
    """The thread has ended, or waits for its user with nothing queued: every message it had
    taken is answered."""
    if status.state.is_terminal:
        return True
    return status.state is State.WAITING_FOR_USER_INPUT and not status.queued_messages


async def turn_over(handle: WorkflowHandle[Any, Any]) -> AgentStatus | None:
    """The thread's status once its messages are answered (``turn_is_over``), else None."""
    status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    return status if turn_is_over(status) else None


async def wait_for_answer(
    handle: WorkflowHandle[Any, Any],
    *,
    seen: Callable[[AgentStatus], None] | None = None,
    poll_seconds: float = POLL_SECONDS,
    max_poll_seconds: float | None = None,
) -> AgentStatus:
    """Poll until the thread has answered the messages it took (``turn_is_over``); ``seen``
    is shown each status on the way (to show its approvals). Every ``poll_seconds``, or with
    ``max_poll_seconds`` backing off to it (see ``poll_delays``).

    ``ThreadUnavailable`` if the thread's workflow closed without ending its turn (terminated,
    timed out), whether its queries still answer or fail; a query that fails while the thread
    runs (no worker, one that cannot replay it) raises its error."""
    loop = asyncio.get_running_loop()
    next_check = loop.time() + ENDED_CHECK_SECONDS
    delays = poll_delays(poll_seconds, max_poll_seconds)
    while True:
        status = await _state(handle)
        if turn_is_over(status):
            return status
        if seen is not None:
            seen(status)
        if loop.time() >= next_check:
            next_check = loop.time() + ENDED_CHECK_SECONDS
            ended = await _closed_as(handle)
            if ended is not None:
                final = await _state(handle)  # it may have ended just now
                if turn_is_over(final):
                    return final
                raise ThreadUnavailable(
                    f"the thread {handle.id} ended ({ended}) in {status.state.value}, "
                    "before it answered"
                )
        await asyncio.sleep(next(delays))


def poll_delays(first: float, cap: float | None = None) -> Iterator[float]:
    """The pauses between a wait's queries: ``first`` for ever without a ``cap``; with one,
    ``first`` for the first ``QUICK_SECONDS`` (a turn answered soon, as in the tests, is seen
    soon), then doubling up to ``cap``. A thread evicted from its worker's cache replays its
    history (up to ~1,000 events) for every query: one left waiting for hours is asked every
    ``cap`` seconds, not every second."""
    delay, spent = first, 0.0
    while True:
        yield delay
        spent += delay
        if cap is not None and spent >= QUICK_SECONDS:
            delay = min(delay * 2, cap)


async def _state(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    """The thread's status. When the query fails, ``ThreadUnavailable`` if the thread's
    workflow has closed (no answer will ever come), else the query's error."""
    try:
        status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError) as exc:
        ended = await _closed_as(handle)
        if ended is None:
            raise
        raise ThreadUnavailable(
            f"the thread {handle.id} ended ({ended}) with no answer to read: "
            f"its state query fails ({exc.message})"
        ) from exc
    return status


async def _closed_as(handle: WorkflowHandle[Any, Any]) -> str | None:
    """How the thread's latest run closed (``terminated``...); None while it runs."""
    try:
        description = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return "deleted"
        raise
    if description.status in (None, WorkflowExecutionStatus.RUNNING):
        return None
    return description.status.name.lower()
