"""``MemoryWorkflow``: one namespace of long-term memory, as a durable entity.

Runs write to it with updates (``remember``, ``edit``, ``forget``: each validated before it
reaches history) started by update-with-start, so the first ``remember`` creates it; they read
it with the ``recall`` and ``items`` queries. Expired items are left out of every answer and
dropped at the next write; a full namespace drops its oldest item. It continues as new when
Temporal suggests it, carrying its items. Deterministic: time is ``workflow.now()``.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from treadle.workflows.memory.models import (
    MAX_ITEMS,
    Edit,
    Forget,
    MemoryItem,
    MemoryState,
    Recall,
    Recalled,
    Remember,
    expiry,
    recall,
)

__all__ = ["WORKFLOWS", "MemoryWorkflow"]


def _refused(why: str) -> ApplicationError:
    return ApplicationError(why, type="MemoryRefused", non_retryable=True)


@workflow.defn
class MemoryWorkflow:
    """One namespace's long-term memory."""

    @workflow.init
    def __init__(self, state: MemoryState) -> None:
        self._state = state

    @workflow.run
    async def run(self, state: MemoryState) -> None:
        """Hold the namespace's memory until Temporal suggests continuing as new."""
        await workflow.wait_condition(lambda: workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self._kept())

    @workflow.update
    def remember(self, asked: Remember) -> MemoryItem:
        now = workflow.now()
        number = self._state.numbered + 1
        item = MemoryItem(
            id=f"m{number}",
            text=asked.text,
            created_at=now,
            updated_at=now,
            expires_at=expiry(now, asked.ttl_seconds),
            by=asked.by,
        )
        items = (*self._live(), item)[-MAX_ITEMS:]
        self._state = self._state.model_copy(update={"items": items, "numbered": number})
        return item

    @workflow.update
    def edit(self, asked: Edit) -> MemoryItem:
        now = workflow.now()
        old = self._find(asked.id)
        new = old.model_copy(update={"text": asked.text, "updated_at": now, "by": asked.by})
        items = tuple(new if i.id == asked.id else i for i in self._live())
        self._state = self._state.model_copy(update={"items": items})
        return new

    @edit.validator
    def _validate_edit(self, asked: Edit) -> None:
        self._find(asked.id)

    @workflow.update
    def forget(self, asked: Forget) -> MemoryItem:
        old = self._find(asked.id)
        items = tuple(i for i in self._live() if i.id != asked.id)
        self._state = self._state.model_copy(update={"items": items})
        return old

    @forget.validator
    def _validate_forget(self, asked: Forget) -> None:
        self._find(asked.id)

    @workflow.query
    def recall(self, asked: Recall) -> Recalled:
        return Recalled(items=recall(self._state.items, asked, workflow.now()))

    @workflow.query
    def items(self) -> Recalled:
        """Every live item, oldest first."""
        return Recalled(items=self._live())

    def _live(self) -> tuple[MemoryItem, ...]:
        now = workflow.now()
        return tuple(i for i in self._state.items if i.live(now))

    def _kept(self) -> MemoryState:
        return self._state.model_copy(update={"items": self._live()})

    def _find(self, item_id: str) -> MemoryItem:
        for item in self._live():
            if item.id == item_id:
                return item
        raise _refused(f"no item {item_id!r} in memory {self._state.namespace!r}")


WORKFLOWS: list[type[Any]] = [MemoryWorkflow]
