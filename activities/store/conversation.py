"""A conversation kept in the blob store as a chain of segments, each written once.

A segment is one blob: ``{"parent": KEY or null, "messages": [...]}`` — the messages one model
call added (what the workflow sent as new, then the model's reply). Its key is the
conversation's *head*; the workflow carries only that key and what it has not sent yet.
Large message contents (tool outputs) are blobs of their own, named by ``content_ref``.
Store bytes grow with the conversation, not with its square, and a worker rebuilds a
conversation from the parent it already cached plus one new segment.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from treadle.activities.content.door import resolve_message
from treadle.activities.store.blobs import BlobCorrupt, BlobStore, check_key
from treadle.workflows.agent.messages.models import ChatMessage, ThreadExport

CACHE_HEADS = 512
"""Conversations a worker keeps resolved in memory (least recently used are dropped)."""


class ConversationStore:
    """Conversations and large texts over a ``BlobStore``."""

    def __init__(self, blobs: BlobStore, cache_heads: int = CACHE_HEADS) -> None:
        self.blobs = blobs
        self._cache: OrderedDict[str, tuple[ChatMessage, ...]] = OrderedDict()
        self._cache_heads = cache_heads

    async def put_text(self, text: str) -> str:
        return await self.blobs.put(text.encode("utf-8", "surrogatepass"))

    async def get_text(self, key: str) -> str:
        return (await self.blobs.get(check_key(key))).decode("utf-8", "replace")

    async def resolve(self, messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
        """The messages with every ``content_ref`` (and every stored value of their calls'
        arguments) replaced by the text it names: the content door's ``resolve_message``."""
        return tuple([await resolve_message(self, m) for m in messages])

    async def messages(self, head: str | None) -> tuple[ChatMessage, ...]:
        """Every message of the conversation ending at ``head``, contents resolved."""
        if head is None:
            return ()
        cached = self._cache.get(head)
        if cached is not None:
            self._cache.move_to_end(head)
            return cached
        chain: list[tuple[ChatMessage, ...]] = []
        key: str | None = head
        base: tuple[ChatMessage, ...] = ()
        while key is not None:
            if key in self._cache:
                base = self._cache[key]
                break
            parent, segment = await self._segment(key)
            chain.append(segment)
            key = parent
        resolved = list(base)
        for segment in reversed(chain):
            resolved.extend(await self.resolve(segment))
        result = tuple(resolved)
        self._remember(head, result)
        return result

    async def extend(self, head: str | None, added: tuple[ChatMessage, ...]) -> str:
        """Write one segment after ``head``; the new head."""
        body = {
            "parent": head,
            "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in added],
        }
        new_head = await self.blobs.put(json.dumps(body, sort_keys=True).encode())
        if head is not None and head in self._cache:
            self._remember(new_head, self._cache[head] + await self.resolve(added))
        return new_head

    async def _segment(self, key: str) -> tuple[str | None, tuple[ChatMessage, ...]]:
        raw = await self.blobs.get(check_key(key))
        try:
            body: Any = json.loads(raw)
            parent = body["parent"]
            messages = tuple(ChatMessage.model_validate(m) for m in body["messages"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BlobCorrupt(f"conversation segment {key} is not a segment: {exc}") from exc
        if parent is not None and not isinstance(parent, str):
            raise BlobCorrupt(f"conversation segment {key} has a bad parent")
        return parent, messages

    def _remember(self, head: str, messages: tuple[ChatMessage, ...]) -> None:
        self._cache[head] = messages
        self._cache.move_to_end(head)
        while len(self._cache) > self._cache_heads:
            self._cache.popitem(last=False)


async def whole_thread(store: ConversationStore, exported: ThreadExport) -> ThreadExport:
    """The exported thread with its whole conversation: the store's record (``record``)
    followed by what the run holds beyond it, every stored content read back. The result
    names no record: it is the conversation on its own, a file ``import`` takes."""
    messages = exported.conversation.messages
    record = exported.record
    if record is not None:
        stored = await store.messages(record.head)
        if len(stored) != record.messages:
            raise BlobCorrupt(
                f"the thread's record {record.head} holds {len(stored)} messages; the thread "
                f"expected {record.messages}"
            )
        messages = stored + (messages[len(messages) - record.after :] if record.after else ())
    messages = await store.resolve(messages)
    conversation = exported.conversation.model_copy(update={"messages": messages})
    return exported.model_copy(update={"conversation": conversation, "record": None})
