"""A namespace's memory, written and read: ``MemoryWorkflow``'s updates and queries through the
typed client API. The first ``remember`` starts the namespace (update-with-start); reading a
namespace nobody wrote to finds nothing. Shared by the memory tools and ``treadle.client``."""

from __future__ import annotations

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities.errors import TreadleError
from treadle.workflows.memory.models import (
    Edit,
    Forget,
    MemoryItem,
    MemoryState,
    Recall,
    Recalled,
    Remember,
    memory_workflow_id,
)
from treadle.workflows.memory.workflow import MemoryWorkflow

__all__ = ["MemoryRefused", "edit", "forget", "items", "recall", "remember"]


class MemoryRefused(TreadleError):
    """The namespace refused a write (no such item, say): its one-line reason."""


async def remember(
    client: Client,
    task_queue: str,
    namespace: str,
    asked: Remember,
    *,
    update_id: str | None = None,
) -> MemoryItem:
    """Keep ``asked`` in ``namespace``, starting its workflow if none runs. The same
    ``update_id`` again is the same item (a retried tool call keeps one)."""
    start = WithStartWorkflowOperation(
        MemoryWorkflow.run,
        MemoryState(namespace=namespace),
        id=memory_workflow_id(namespace),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"long-term memory of {namespace}",
    )
    try:
        item: MemoryItem = await client.execute_update_with_start_workflow(
            MemoryWorkflow.remember, asked, start_workflow_operation=start, id=update_id
        )
    except WorkflowUpdateFailedError as exc:
        raise MemoryRefused(_why(exc)) from exc
    return item


async def recall(client: Client, namespace: str, asked: Recall) -> Recalled:
    """The items of ``namespace`` that match ``asked`` (none for a namespace never written)."""
    handle = client.get_workflow_handle_for(MemoryWorkflow.run, memory_workflow_id(namespace))
    try:
        found: Recalled = await handle.query(MemoryWorkflow.recall, asked)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return Recalled()
        raise
    except WorkflowQueryFailedError as exc:
        raise MemoryRefused(str(exc)) from exc
    return found


async def items(client: Client, namespace: str) -> Recalled:
    """Every live item of ``namespace``, oldest first."""
    handle = client.get_workflow_handle_for(MemoryWorkflow.run, memory_workflow_id(namespace))
    try:
        found: Recalled = await handle.query(MemoryWorkflow.items)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return Recalled()
        raise
    return found


async def forget(client: Client, namespace: str, item_id: str) -> MemoryItem:
    """Remove one item; ``MemoryRefused`` when the namespace has no such item."""
    handle = client.get_workflow_handle_for(MemoryWorkflow.run, memory_workflow_id(namespace))
    try:
        item: MemoryItem = await handle.execute_update(MemoryWorkflow.forget, Forget(id=item_id))
    except WorkflowUpdateFailedError as exc:
        raise MemoryRefused(_why(exc)) from exc
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise MemoryRefused(f"memory {namespace!r} holds nothing") from exc
        raise
    return item


async def edit(client: Client, namespace: str, asked: Edit) -> MemoryItem:
    """Replace one item's text; ``MemoryRefused`` when the namespace has no such item."""
    handle = client.get_workflow_handle_for(MemoryWorkflow.run, memory_workflow_id(namespace))
    try:
        item: MemoryItem = await handle.execute_update(MemoryWorkflow.edit, asked)
    except WorkflowUpdateFailedError as exc:
        raise MemoryRefused(_why(exc)) from exc
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise MemoryRefused(f"memory {namespace!r} holds nothing") from exc
        raise
    return item


def _why(exc: WorkflowUpdateFailedError) -> str:
    cause = exc.cause
    return str(getattr(cause, "message", None) or cause or exc)
