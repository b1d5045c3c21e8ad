"""``AgentClient``'s long-term memory: a namespace's items listed, searched, added, edited and
forgotten, as the ``remember``, ``recall`` and ``forget`` tools of runs with ``config.memory``
see them (``treadle.activities.memory.store``: the namespace's ``MemoryWorkflow``); a thread's
items exported with it, and restored into the new thread's namespace when it is imported.

What a person or a file writes passes the content door's redaction first, as what a run
remembers does in its worker: the secrets of the client's environment (its secret-named
variables) and anything key-shaped are ``[redacted]`` before the namespace's history holds it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from treadle.activities.content.redaction import Redactor, secret_values
from treadle.activities.memory import store
from treadle.client.errors import MemoryRefused
from treadle.client.forks import Forks
from treadle.client.results import ImportedThread
from treadle.client.thread_import import ImportPlan
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

    async def start_import(
        self, plan: ImportPlan, thread_id: str, *, task_queue: str | None = None
    ) -> ImportedThread:
        """Start the imported thread (``Threads.start_import``), its file's memory items first
        restored into its namespace (``memory_note`` says how many, or why none)."""
        theirs = plan.memory
        note = await self._restore(theirs, plan, thread_id, task_queue) if theirs else None
        imported = await super().start_import(plan, thread_id, task_queue=task_queue)
        return imported.model_copy(update={"memory_note": note})

    async def _restore(
        self, theirs: ExportedMemory, plan: ImportPlan, thread_id: str, task_queue: str | None
    ) -> str:
        """The file's items written into the new thread's namespace (``config.memory``), each
        once: an item whose text the namespace already holds is left as it is, and writing the
        same file again writes nothing new. Items keep the new thread's ``ttl_days`` (the file
        holds texts, not their times to live)."""
        config = plan.input.config.memory
        if config is None:
            return (
                f"memory: the file's {len(theirs.items)} item(s) of {theirs.namespace!r} were "
                "not restored: the new thread has no memory (config.memory)"
            )
        namespace = config.namespace
        redact = self._redactor()
        held = {item.text for item in await self.memory_items(namespace)}
        ttl = config.ttl_days * 86400 if config.ttl_days else None
        restored = kept = refused = 0
        for text in theirs.items:
            clean = redact(text)
            if clean in held:
                kept += 1
                continue
            try:
                asked = Remember(text=clean, ttl_seconds=ttl, by=f"import {thread_id}")
            except ValidationError:
                refused += 1  # not a memory (empty, or over MAX_ITEM_CHARS): a hand-made file
                continue
            digest = hashlib.sha256(f"{namespace}\n{clean}".encode()).hexdigest()[:32]
            try:
                await store.remember(
                    self.temporal,
                    task_queue or self.task_queue,
                    namespace,
                    asked,
                    update_id=f"import-{digest}",
                )
            except store.MemoryRefused as exc:
                raise MemoryRefused(str(exc)) from exc
            held.add(clean)
            restored += 1
        said = [f"memory: restored {restored} item(s) into {namespace!r}"]
        if kept:
            said.append(f"{kept} already there")
        if refused:
            said.append(f"{refused} not a memory (empty or over 2,000 characters), skipped")
        return "; ".join(said)

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
        task queue runs the namespace. The text is redacted first (see the module)."""
        _check(namespace)
        ttl = ttl_days * 86400 if ttl_days else None
        asked = _valid(lambda: Remember(text=self._redactor()(text), ttl_seconds=ttl, by=by))
        try:
            return await store.remember(self.temporal, self.task_queue, namespace, asked)
        except store.MemoryRefused as exc:
            raise MemoryRefused(str(exc)) from exc

    async def edit_memory(
        self, namespace: str, item_id: str, text: str, *, by: str | None = None
    ) -> MemoryItem:
        """Replace an item's text; ``MemoryRefused`` when there is no such item."""
        _check(namespace)
        asked = _valid(lambda: Edit(id=item_id, text=self._redactor()(text), by=by))
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

    def _redactor(self) -> Redactor:
        """The content door's redaction with the secrets this client knows: its environment's
        secret-named variables (and key shapes, always)."""
        return Redactor(secret_values(os.environ if self._environ is None else self._environ))


def _check(namespace: str) -> None:
    _valid(lambda: MemoryState(namespace=namespace))


def _valid(make: Callable[[], T]) -> T:
    try:
        return make()
    except ValidationError as exc:
        raise MemoryRefused(describe_errors(exc)) from exc
