"""A conversation kept in the blob store as a chain of segments, each written once.

A segment is one blob: ``{"parent": KEY or null, "messages": [...], "index": {...}}`` — the
messages one model call added (what the workflow sent as new, then the model's reply). Its key
is the conversation's *head*; the workflow carries only that key and what it has not sent yet.
Large message contents (tool outputs) are blobs of their own, named by ``content_ref``.
Store bytes grow with the conversation, not with its square.

A segment's index says where it stands in its chain — the chain's first segment (``root``:
the system prompt and the task), how many messages (``at``) and tokens (``tokens_at``) come
before it — and holds each of its messages' ``Entry`` (what the message costs in a model's
window, its line in a summary: ``treadle.activities.store.view``). So a model call reads its
view from the head backwards, only as far as the view reaches, and the text of the messages
it shows (``treadle.activities.store.tail``): its work does not grow with the conversation.
Segments written before they had an index are read as before: their entries are made from
their messages, and a chain that ends in one is read whole once, to index the next.

A worker keeps the segments and the texts it read last in memory (each bounded by bytes): a
call reads from the store what was written since the call before it (that call's segment, the
step's tool outputs), not what that call read. Both are written once under their hash, so a
copy never goes stale. What a worker writes it does not keep: its next call reads it back, so
a store that has gone away (an unmounted volume) is met before the model is called, and the
run waits for it.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from treadle.activities.content.door import resolve_message
from treadle.activities.store.blobs import BlobCorrupt, BlobStore, check_key
from treadle.activities.store.view import Entry, entry
from treadle.workflows.agent.messages.content_refs import holds_refs
from treadle.workflows.agent.messages.models import ChatMessage, ThreadExport

CACHED_SEGMENT_BYTES = 16 * 1024 * 1024
"""Segments a worker keeps parsed, by their stored size (least recently used are dropped)."""
CACHED_TEXT_CHARS = 32 * 1024 * 1024
"""Texts (stored contents) a worker keeps, by length; one over a sixteenth of it is not kept."""


@dataclass(frozen=True)
class Position:
    """Where a segment stands in its chain: the chain's first segment (``None``: this one),
    and the messages and tokens before it."""

    root: str | None
    at: int
    tokens_at: int


@dataclass(frozen=True)
class Segment:
    """One parsed segment: its messages as stored (contents by reference)."""

    key: str
    parent: str | None
    messages: tuple[ChatMessage, ...]
    position: Position | None
    """``None``: written before segments had an index."""
    entries: tuple[Entry, ...] | None
    """One per message (``None``: not indexed, made from the messages when needed)."""
    size: int

    @property
    def root(self) -> str:
        """The chain's first segment."""
        if self.position is None:
            raise ValueError("a segment without an index does not know its root")
        return self.position.root or self.key

    def after(self) -> Position:
        """The position of a segment written after this one (its entries known)."""
        if self.position is None or self.entries is None:
            raise ValueError("a segment without an index does not know its position")
        return Position(
            self.root,
            self.position.at + len(self.messages),
            self.position.tokens_at + sum(e.tokens for e in self.entries),
        )


_V = TypeVar("_V")


class _Bounded(Generic[_V]):
    """A least-recently-used map whose values' sizes add up to at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[str, tuple[_V, int]] = OrderedDict()
        self._size = 0

    def get(self, key: str) -> _V | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: str, value: _V, size: int) -> None:
        if size > self.limit // 16:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._size -= old[1]
        self._items[key] = (value, size)
        self._size += size
        while self._size > self.limit:
            _, (_, dropped) = self._items.popitem(last=False)
            self._size -= dropped


class ConversationStore:
    """Conversations and large texts over a ``BlobStore``."""

    def __init__(
        self,
        blobs: BlobStore,
        segment_bytes: int = CACHED_SEGMENT_BYTES,
        text_chars: int = CACHED_TEXT_CHARS,
    ) -> None:
        self.blobs = blobs
        self._segments: _Bounded[Segment] = _Bounded(segment_bytes)
        self._texts: _Bounded[str] = _Bounded(text_chars)

    async def put_text(self, text: str) -> str:
        return await self.blobs.put(text.encode("utf-8", "surrogatepass"))

    async def get_text(self, key: str) -> str:
        cached = self._texts.get(key)
        if cached is not None:
            return cached
        text = (await self.blobs.get(check_key(key))).decode("utf-8", "replace")
        self._texts.put(key, text, len(text))
        return text

    async def resolve(self, messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
        """The messages with every ``content_ref`` (and every stored value of their calls'
        arguments) replaced by the text it names: the content door's ``resolve_message``. The
        texts are read concurrently (an S3 store answers each after a round trip)."""
        resolved = list(messages)
        stored = [i for i, m in enumerate(messages) if refers(m)]
        read = await asyncio.gather(*(resolve_message(self, messages[i]) for i in stored))
        for i, message in zip(stored, read, strict=True):
            resolved[i] = message
        return tuple(resolved)

    async def segment(self, key: str) -> Segment:
        """The segment stored under ``key`` (``BlobCorrupt`` if it is no segment)."""
        cached = self._segments.get(key)
        if cached is not None:
            return cached
        raw = await self.blobs.get(check_key(key))
        segment = _parse(key, raw)
        self._segments.put(key, segment, len(raw))
        return segment

    async def entries(self, segment: Segment) -> tuple[Entry, ...]:
        """Its messages' entries: from its index, or made from its messages read whole."""
        if segment.entries is not None:
            return segment.entries
        made = tuple(entry(m) for m in await self.resolve(segment.messages))
        self._segments.put(
            segment.key,
            Segment(segment.key, segment.parent, segment.messages, None, made, segment.size),
            segment.size,
        )
        return made

    async def after(self, head: str) -> Position:
        """Where a segment written after ``head`` stands: from ``head``'s index, or, for a
        chain whose head has none (written before indexes), by reading it whole."""
        segment = await self.segment(head)
        if segment.position is not None and segment.entries is not None:
            return segment.after()
        count = tokens = 0
        key: str | None = head
        root = head
        while key is not None:
            segment = await self.segment(key)
            count += len(segment.messages)
            tokens += sum(e.tokens for e in await self.entries(segment))
            root, key = key, segment.parent
        return Position(root, count, tokens)

    async def messages(self, head: str | None) -> tuple[ChatMessage, ...]:
        """Every message of the conversation ending at ``head``, contents resolved."""
        chain: list[tuple[ChatMessage, ...]] = []
        key = head
        while key is not None:
            segment = await self.segment(key)
            chain.append(segment.messages)
            key = segment.parent
        return await self.resolve([m for messages in reversed(chain) for m in messages])

    async def extend(
        self,
        head: str | None,
        added: tuple[ChatMessage, ...],
        resolved: tuple[ChatMessage, ...] | None = None,
    ) -> str:
        """Write one segment of ``added`` after ``head``; the new head. ``resolved``: the same
        messages with their stored contents read back, when the caller has them (their entries
        are made from them; otherwise they are read here)."""
        if resolved is None:
            resolved = await self.resolve(added)
        position = Position(None, 0, 0) if head is None else await self.after(head)
        entries = [entry(m) for m in resolved]
        body = {
            "parent": head,
            "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in added],
            "index": {
                "root": position.root,
                "at": position.at,
                "tokens_at": position.tokens_at,
                "tokens": [e.tokens for e in entries],
                "lines": [e.line for e in entries],
            },
        }
        return await self.blobs.put(json.dumps(body, sort_keys=True).encode())


def refers(message: ChatMessage) -> bool:
    """Whether ``message`` names stored content (its own, or its calls' arguments')."""
    return message.content_ref is not None or any(
        holds_refs(c.arguments) for c in message.tool_calls
    )


def _parse(key: str, raw: bytes) -> Segment:
    try:
        body: Any = json.loads(raw)
        parent = body["parent"]
        messages = tuple(ChatMessage.model_validate(m) for m in body["messages"])
        index = body.get("index")
        position = entries = None
        if index is not None:
            position = Position(index["root"], int(index["at"]), int(index["tokens_at"]))
            entries = tuple(
                Entry(m.role, int(t), str(line))
                for m, t, line in zip(messages, index["tokens"], index["lines"], strict=True)
            )
    except (ValueError, KeyError, TypeError) as exc:
        raise BlobCorrupt(f"conversation segment {key} is not a segment: {exc}") from exc
    if parent is not None and not isinstance(parent, str):
        raise BlobCorrupt(f"conversation segment {key} has a bad parent")
    if position is not None and position.root is not None and not isinstance(position.root, str):
        raise BlobCorrupt(f"conversation segment {key} has a bad root")
    return Segment(key, parent, messages, position, entries, len(raw))


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
