"""What a closed run answers, asked of a worker once per process: `answer` and `kept`.

A run that has closed never changes, and every query of one is answered by a worker replaying
its whole history (about 60 ms of worker CPU for a 21-step run on the benchmark's machine; up to
about 0.8 s for the longest run of a chain). The browser page asked a finished run for its state
and its conversation on every refresh and read its stream twice when it opened: each a replay.

- `answer(client, workflow_id, what, ask)`: the server is asked first (``describe``: no worker,
  no history read). A run it describes as closed is asked by its run id, so a new run of the
  same workflow id (a reset, a new start) is never answered for it, and the answer is kept:
  the same question of the same run (``what``) is not asked again.
- `closed_run(client, workflow_id)` and `kept(client, workflow_id, run_id, what, ask)`: the
  same in two steps, for a caller with several questions (one ``describe`` for them all) or
  one that has already seen the run closed (the live view, once its own ``describe`` said so).
- An open run is asked every time, and nothing is kept.
- Callers that ask at once share one query (``treadle.shared_calls``); a failure is not kept.
- At most ``KEPT`` answers are kept per process, the one used longest ago dropped first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError

from treadle.shared_calls import SharedCalls

__all__ = ["KEPT", "answer", "closed_run", "kept"]

T = TypeVar("T")

KEPT = 32
"""Answers kept per process: a page's run (its state, its conversation, its stream read from
an offset or two) is about four, so eight finished runs. Counted, not weighed: a kept stream
read holds up to ``events.EVENTS_KEPT`` items and an export a conversation's previews, so a
page process may hold some tens of MB. An answer dropped while still being asked is asked
again by the next caller (one more replay, never a wrong answer)."""

DESCRIBE_TIMEOUT = timedelta(seconds=5)

_OPEN = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)

_KEPT = SharedCalls(most=KEPT)
"""Closed runs' answers, kept as long as there is room: they cannot change."""


async def answer(
    client: Client,
    workflow_id: str,
    what: tuple[Any, ...],
    ask: Callable[[WorkflowHandle[Any, Any]], Awaitable[T]],
) -> T:
    """``ask(handle)``, kept when the server describes the run as closed (see the module)."""
    run_id = await closed_run(client, workflow_id)
    if run_id is None:
        return await ask(client.get_workflow_handle(workflow_id))
    return await kept(client, workflow_id, run_id, what, ask)


async def closed_run(client: Client, workflow_id: str) -> str | None:
    """The id of the workflow's newest run when the server describes it as closed; None while
    it runs, or when it cannot be told (the query that follows says what is wrong)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe(
            rpc_timeout=DESCRIBE_TIMEOUT
        )
    except RPCError:
        return None
    if description.status is None or description.status in _OPEN:
        return None
    return description.run_id


async def kept(
    client: Client,
    workflow_id: str,
    run_id: str,
    what: tuple[Any, ...],
    ask: Callable[[WorkflowHandle[Any, Any]], Awaitable[T]],
) -> T:
    """``ask`` of the closed run ``run_id``, once: its answer is kept (see the module)."""
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id, run_id=run_id)
    return await _KEPT.call((id(client), workflow_id, run_id, *what), lambda: ask(handle))
