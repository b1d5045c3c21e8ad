"""Asking a run: its queries and updates through the typed client API (``AgentWorkflow.state``,
``AgentWorkflow.decide``: named by object, never by string), and every Temporal error met on
the way translated into the client's own (``treadle.client.errors``), here and nowhere else.

- A query or update of a run whose worker fails its workflow task is answered by Temporal only
  ``Workflow Task in failed state``, which says nothing: the run's history is read for the
  worker's reason (``connection.workflow_task_failure``), decoded, and raised as
  ``RunCannotAnswer`` (a key the worker lacks named by its id).
- A query a worker could not run carries its reason encrypted with the run's payloads
  (``Encoded failure``): it is decoded too (``connection.query_failure``).
- A query of a run whose worker does not take its workflow task waits, and the server keeps
  only a few such queries per run: one more is refused (``consistent query buffer is full``).
  Both are ``NoWorkerAnswered``: the run is not answering.
- An update that reaches a run as it continues as new is answered NOT_FOUND although the run
  goes on: it is made again (same update id: one request), a quarter second apart, for up to ten
  seconds; a run that has really closed is ``RunEnded``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.api.enums.v1 import ResourceExhaustedCause
from temporalio.api.errordetails.v1 import ResourceExhaustedFailure
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from treadle import closed as closed_runs
from treadle.client.errors import (
    NoWorkerAnswered,
    Refused,
    RunCannotAnswer,
    RunEnded,
    RunNotFound,
    TemporalRefused,
    update_refusal,
)
from treadle.codec import EncryptionError, WorkerCannotDecrypt
from treadle.connection import query_failure, workflow_task_failure
from treadle.workflows.agent.messages.models import AgentResult

__all__ = [
    "HANDOVER_ATTEMPTS",
    "HANDOVER_PAUSE_SECONDS",
    "QUERY_TIMEOUT",
    "UPDATE_TIMEOUT",
    "Calls",
]

QUERY_TIMEOUT = timedelta(seconds=10)
"""How long a query may wait for a worker: a run whose worker is gone answers nothing."""
UPDATE_TIMEOUT = timedelta(seconds=10)
"""How long an update may wait for a worker to validate and run it."""
DESCRIBE_TIMEOUT = timedelta(seconds=10)
HANDOVER_ATTEMPTS = 40
HANDOVER_PAUSE_SECONDS = 0.25
"""A run continues as new in milliseconds: an update that met it between two runs is made
again, every quarter second for ten seconds."""

_OPEN = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


class Calls:
    """The queries and updates of runs, on one Temporal client, with their errors translated."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def handle(self, run_id: str, *, run: str | None = None) -> WorkflowHandle[Any, AgentResult]:
        """The run's handle: its latest run (or the run ``run`` of its chain)."""
        return self.client.get_workflow_handle(run_id, run_id=run, result_type=AgentResult)

    async def query(
        self,
        run_id: str,
        query: Any,
        *,
        what: str,
        timeout: timedelta = QUERY_TIMEOUT,
        run: str | None = None,
    ) -> Any:
        """The run's answer to ``query`` (``AgentWorkflow.state``...); ``what`` names it in an
        error (``the state query``); ``run``: one run of its chain (default: the latest)."""
        try:
            return await self.handle(run_id, run=run).query(query, rpc_timeout=timeout)
        except WorkflowQueryFailedError as exc:
            raise await self.query_failed(run_id, exc, what=what) from exc
        except RPCError as exc:
            raise await self.rpc_failed(run_id, exc, what=what) from exc

    async def update(
        self,
        run_id: str,
        update: Any,
        *arg: Any,
        what: str,
        update_id: str | None = None,
        timeout: timedelta = UPDATE_TIMEOUT,
    ) -> Any:
        """The run's answer to ``update`` with ``arg`` (one, or none); ``what`` says what was
        asked in an error (``run 'x' refused to approve: ...``: ``to approve``). ``Refused``
        when its validator says no; made again across a continue-as-new (see the module)."""
        handle = self.handle(run_id)
        for attempt in range(1, HANDOVER_ATTEMPTS + 1):
            try:
                return await handle.execute_update(update, *arg, id=update_id, rpc_timeout=timeout)
            except WorkflowUpdateFailedError as exc:
                reason = update_refusal(exc)
                raise Refused(f"run {run_id!r} refused {what}: {reason}", reason=reason) from exc
            except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
                failing = await self.task_failure(run_id)
                if failing is not None:
                    raise failing from exc
                raise NoWorkerAnswered(
                    f"run {run_id!r} did not answer; is a worker running?"
                ) from exc
            except RPCError as exc:
                if exc.status is not RPCStatusCode.NOT_FOUND:
                    raise await self.rpc_failed(run_id, exc, what=what) from exc
                closed = await self.closed_as(run_id)
                if closed is None and attempt < HANDOVER_ATTEMPTS:
                    await asyncio.sleep(HANDOVER_PAUSE_SECONDS)  # between two runs of its chain
                    continue
                if closed == "missing":
                    raise RunNotFound(self.not_found(run_id), run_id=run_id) from exc
                raise RunEnded(f"run {run_id!r}: {exc.message}") from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def signal(self, run_id: str, signal: Any, arg: Any) -> None:
        """Send the run ``signal`` (fire and forget: the run records what it does with it)."""
        try:
            await self.handle(run_id).signal(signal, arg)
        except RPCError as exc:
            raise await self.rpc_failed(run_id, exc, what="the signal") from exc

    # -- translation ---------------------------------------------------------------------------

    def not_found(self, run_id: str) -> str:
        return f"no run with id {run_id!r} in namespace {self.client.namespace}"

    async def rpc_failed(self, run_id: str, exc: RPCError, *, what: str) -> Exception:
        """The client's error for a Temporal error met asking ``run_id`` for ``what``."""
        if exc.status is RPCStatusCode.NOT_FOUND:
            return RunNotFound(self.not_found(run_id), run_id=run_id)
        if exc.status is RPCStatusCode.FAILED_PRECONDITION:
            failing = await self.task_failure(run_id)
            if failing is not None:
                return failing
        if exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            return NoWorkerAnswered(
                f"run {run_id!r} did not answer {what} ({exc.message}); is a worker running?"
            )
        if _busy_workflow(exc):
            # The server keeps a run's queries while they wait for a worker to take its
            # workflow task, a few at most; one more is refused at once (and again on the
            # client's retries): "consistent query buffer is full". The run is not answering,
            # as a timeout says: a page's status and stream asked together of a run whose worker
            # is gone meet this, not a refusal of the run's own.
            return NoWorkerAnswered(
                f"run {run_id!r} did not answer {what} (its earlier questions still wait for a "
                "worker to take them); is a worker running?"
            )
        return TemporalRefused(f"run {run_id!r}: {exc.message}")

    async def query_failed(
        self, run_id: str, exc: WorkflowQueryFailedError, *, what: str
    ) -> Exception:
        """A worker took the query but failed it: its reason, decoded. This client's own
        ``EncryptionError`` (it cannot decrypt the reason) passes through."""
        reason = await query_failure(self.client, exc)
        if isinstance(reason, WorkerCannotDecrypt):
            return RunCannotAnswer(str(reason))
        if isinstance(reason, EncryptionError):
            return reason
        message = getattr(reason, "message", None) or str(reason)
        return RunCannotAnswer(f"run {run_id!r} could not answer {what}: {message}")

    async def task_failure(self, run_id: str) -> Exception | None:
        """Why the run's worker fails its workflow task, when it does (else None): a
        ``RunCannotAnswer``, or this client's own ``EncryptionError``."""
        try:
            reason = await workflow_task_failure(self.client, run_id)
        except RPCError:
            return None
        if reason is None:
            return None
        if isinstance(reason, EncryptionError) and not isinstance(reason, WorkerCannotDecrypt):
            return reason
        return RunCannotAnswer(str(reason))

    async def closed_as(self, run_id: str) -> str | None:
        """How the workflow's latest run closed (``completed``...), ``missing`` when there is
        none, ``None`` while it runs."""
        try:
            description = await self.handle(run_id).describe(rpc_timeout=DESCRIBE_TIMEOUT)
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return "missing"
            raise await self.rpc_failed(run_id, exc, what="describe") from exc
        if description.status is None or description.status in _OPEN:
            return None
        return description.status.name.lower()

    async def closed_result(self, run_id: str) -> AgentResult | None:
        """The result of a run that has completed, read from its history's last event (no
        worker replays anything; asked once per process, ``treadle.closed``); ``None`` while
        it runs, or when it ended without a result (failed, cancelled, terminated: then only
        a worker's replay can say where it stood)."""
        closed = await closed_runs.closed_run(self.client, run_id)
        if closed is None:
            return None

        async def read(handle: WorkflowHandle[Any, Any]) -> AgentResult | None:
            description = await handle.describe()
            if description.status is not WorkflowExecutionStatus.COMPLETED:
                return None
            pinned = self.client.get_workflow_handle(run_id, run_id=closed, result_type=AgentResult)
            result: AgentResult = await pinned.result(follow_runs=False)
            return result

        try:
            ended: AgentResult | None = await closed_runs.kept(
                self.client, run_id, closed, ("client", "result"), read
            )
        except (RPCError, WorkflowFailureError, ValidationError):
            return None  # asked of a worker instead, as before
        return ended


_BUSY_WORKFLOW = ResourceExhaustedCause.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW


def _busy_workflow(exc: RPCError) -> bool:
    """``exc`` is the server's refusal of one more request of a run it holds too many of
    (RESOURCE_EXHAUSTED, cause BUSY_WORKFLOW), not a rate limit of the namespace."""
    if exc.status is not RPCStatusCode.RESOURCE_EXHAUSTED:
        return False
    details = ResourceExhaustedFailure()
    return any(
        d.Unpack(details) and details.cause == _BUSY_WORKFLOW for d in exc.grpc_status.details
    )
