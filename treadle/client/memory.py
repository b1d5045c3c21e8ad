"""``AgentClient``'s long-term memory: a namespace's items listed, searched, added, edited and
forgotten, as the ``remember``, ``recall`` and ``forget`` tools of runs with ``config.memory``
see them (``treadle.activities.memory.store``: the namespace's ``MemoryWorkflow``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from treadle.activities.content.redaction import Redactor
from treadle.activities.memory import store
from treadle.client.errors import MemoryRefused
from treadle.client.forks import Forks
from treadle.workflows.agent.messages.models import ExportedMemory, ThreadExport
from treadle.workflows.base import describe_errors
from treadle.workflows.memory.models import Edit, MemoryItem, MemoryState, Recall, Remember

__all__ = ["Memory"]

T = TypeVar("T")


class Memory(Forks):
    """Long-term memory across threads, by namespace (``user:alice/agent:coder``)."""

    async def export(self, run_id: str, *, whole: bool = True) -> ThreadExport:
        """The thread as Loom's JSON (``Threads.export``); ``whole``, and with
        ``config.memory``: with its namespace's items (``memory``) as they are now."""
        exported = await super().export(run_id, whole=whole)
        memory = exported.treadle.config.memory
        if not whole or memory is None:
            return exported
        items = await self.memory_items(memory.namespace)
        kept = ExportedMemory(namespace=memory.namespace, items=tuple(i.text for i in items))
        return exported.model_copy(update={"memory": kept})

    async def memory_items(self, namespace: str) -> tuple[MemoryItem, ...]:
        """Every live item of ``namespace``, oldest first (none for a namespace never
        written)."""
        _check(namespace)
        return (await store.items(self.temporal, namespace)).items

    async def recall(
        self, namespace: str, query: str = "", *, limit: int = 5
    ) -> tuple[MemoryItem, ...]:
        """The items that share most words with ``query``, as the ``recall`` tool finds them."""
        _check(namespace)
        asked = _valid(lambda: Recall(query=query, limit=limit))
        return (await store.recall(self.temporal, namespace, asked)).items

    async def remember(
        self, namespace: str, text: str, *, ttl_days: float | None = None, by: str | None = None
    ) -> MemoryItem:
        """Add an item (kept ``ttl_days``, default: until forgotten); a worker on the client's
        task queue runs the namespace. The text is redacted of key shapes first."""
        _check(namespace)
        ttl = ttl_days * 86400 if ttl_days else None
        asked = _valid(lambda: Remember(text=Redactor(())(text), ttl_seconds=ttl, by=by))
        try:
            return await store.remember(self.temporal, self.task_queue, namespace, asked)
        except store.MemoryRefused as exc:
            raise MemoryRefused(str(exc)) from exc

    async def edit_memory(
        self, namespace: str, item_id: str, text: str, *, by: str | None = None
    ) -> MemoryItem:
        """Replace an item's text; ``MemoryRefused`` when there is no such item."""
        _check(namespace)
        asked = _valid(lambda: Edit(id=item_id, text=Redactor(())(text), by=by))
        try:
            return await store.edit(self.temporal, namespace, asked)
        except store.MemoryRefused as exc:
            raise MemoryRefused(str(exc)) from exc

    async def forget(self, namespace: str, item_id: str) -> MemoryItem:
        """Remove an item; ``MemoryRefused`` when there is no such item."""
        _check(namespace)
        try:
            return await store.forget(self.temporal, namespace, item_id)
        except store.MemoryRefused as exc:
            raise MemoryRefused(str(exc)) from exc


def _check(namespace: str) -> None:
    _valid(lambda: MemoryState(namespace=namespace))


def _valid(make: Callable[[], T]) -> T:
    try:
        return make()
    except ValidationError as exc:
        raise MemoryRefused(describe_errors(exc)) from exc
