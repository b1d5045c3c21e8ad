"""A message or close that meets a thread between two runs of its chain (Temporal answers
NOT_FOUND to an update that reaches a run as it continues as new) is made again, not reported
as "no thread"; a thread that has really gone is still reported at once.

Temporal's answer is stood in for by the error it gives (the race lasts milliseconds and cannot
be arranged on demand); the thread, and the ``describe`` that tells the race from a thread that
has ended, are real."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from temporalio.service import RPCError, RPCStatusCode

from tests.support.harness import Harness
from tests.support.threads import answered, start_thread
from treadle.activities import thread_turns
from treadle.client import AgentClient, ThreadUnavailable
from treadle.workflows.agent.messages.models import AgentResult, SendReceipt
from treadle.workflows.agent.workflow import AgentWorkflow

T = TypeVar("T")


def _race(times: int, request: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """``request``, answered NOT_FOUND the first ``times`` times, as Temporal answers an update
    that reached a run continuing as new."""
    calls = 0

    async def raced() -> T:
        nonlocal calls
        calls += 1
        if calls <= times:
            raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
        return await request()

    return raced


async def test_a_message_that_meets_a_handover_is_sent_again(harness: Harness) -> None:
    """Two NOT_FOUNDs while the thread runs: the message is sent again and answered once."""
    model = harness.script({"content": "hi"}, {"content": "got it"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    receipt: SendReceipt = await AgentClient(harness.client)._across_handover(
        handle, _race(2, lambda: thread_turns.send_message(handle, "once", update_id="u-1"))
    )
    assert not receipt.queued
    status = await answered(harness, handle, 2)
    assert status.final_answer == "got it"
    await handle.execute_update(AgentWorkflow.close)
    await handle.result()


async def test_a_thread_that_has_ended_is_reported_at_once(harness: Harness) -> None:
    """NOT_FOUND from a thread whose workflow has closed: one line saying so, no retry."""
    model = harness.script({"content": "hi"})
    handle = await start_thread(harness, model)
    await answered(harness, handle, 1)
    await handle.execute_update(AgentWorkflow.close)
    result: AgentResult = await handle.result()
    assert result.answer == "hi"
    attempts: list[Any] = []

    async def send() -> SendReceipt:
        attempts.append(1)
        return await thread_turns.send_message(handle, "too late")

    with pytest.raises(ThreadUnavailable, match=f"the thread {handle.id} has ended"):
        await AgentClient(harness.client)._across_handover(handle, _race(1, send))
    assert attempts == []  # the first NOT_FOUND was final: nothing was sent again
