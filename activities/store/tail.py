"""A model call's view of a stored conversation, read from its end.

A call late in a long conversation is shown its first messages, a summary and the recent
messages (``treadle.activities.store.view``); it reads the segments back from the head only
as far as the view reaches (each segment's index holds its messages' entries, so nothing
before the cut but the summary's lines is looked at), then the text of the messages shown.
The head's index says how long the conversation is and where its first segment is, so the
system prompt and the task are read without walking the chain. What a call reads is bounded
by the model's window, whatever the conversation's length.

A conversation whose head was written before segments had an index is read whole, as it was
then; the call's own segment, written after it, has one.
"""

from __future__ import annotations

from treadle.activities.store.blobs import BlobCorrupt
from treadle.activities.store.conversation import ConversationStore, Segment
from treadle.activities.store.view import (
    Entry,
    NotRead,
    Order,
    Reach,
    View,
    entry,
    first_shown,
    plan,
    shown,
    view,
)
from treadle.workflows.agent.messages.models import ChatMessage

MIN_READ_BACK = 16
"""When planning needs a message not read yet, at least this many more are read (and at least
half as many as have been): a view takes a few rounds at most."""


async def view_of(
    store: ConversationStore,
    head: str,
    count: int,
    added: tuple[ChatMessage, ...],
    window: int | None,
    start: int = 0,
    summary_at: int = 0,
) -> View:
    """The view of the stored conversation ending at ``head`` (``count`` messages:
    ``BlobCorrupt`` if it holds another number) followed by ``added`` (their stored contents
    read back), for a model with ``window`` tokens: what ``view`` makes of the whole."""
    last = await store.segment(head)
    if last.position is None or last.entries is None:
        earlier = await store.messages(head)
        _check_count(head, len(earlier), count)
        return view(earlier + added, window, start, summary_at)
    tail = _Tail(store, last, added)
    _check_count(head, tail.stored, count)
    await tail.begin(start, summary_at, window)
    while True:
        try:
            planned = plan(tail, window)
            cut = tail.first if planned.cut is None else planned.cut
            recent = await tail.messages(range(cut, tail.length))
            first = await tail.messages(range(tail.first))
        except NotRead as need:
            await tail.read_back(need.position)
            continue
        return shown(first, recent, planned, tail.order)


def _check_count(head: str, holds: int, count: int) -> None:
    if holds != count:
        raise BlobCorrupt(f"conversation {head} holds {holds} messages; the run expected {count}")


class _Tail:
    """The ``Entries`` of a stored conversation and the messages added after it, read from
    the end back as planning asks for them, plus its first segment."""

    def __init__(
        self, store: ConversationStore, last: Segment, added: tuple[ChatMessage, ...]
    ) -> None:
        self.store = store
        after = last.after()
        self.stored = after.at
        self.count = after.at + len(added)
        self._root_key = last.root
        # The read part of the record, from message ``_lo`` to its end, last message first.
        self._entries: list[Entry] = [entry(m) for m in reversed(added)]
        self._messages: list[ChatMessage] = list(reversed(added))
        self._lo = self.stored
        self._read_tokens = sum(e.tokens for e in self._entries)
        self._record_tokens = after.tokens_at + self._read_tokens
        self._next: str | None = last.key
        self._root: tuple[tuple[ChatMessage, ...], tuple[Entry, ...]] = ((), ())
        self.order = Order(self.count, 1)
        self._total = 0

    async def begin(self, start: int, summary_at: int, window: int | None) -> None:
        """Read the first segment, and the end back as far as planning the view for ``window``
        reads (``Reach``)."""
        root = await self.store.segment(self._root_key)
        self._root = (root.messages, await self.store.entries(root))
        if not root.messages:
            await self._read_to(0)
        opening = self._message(0) if self.count else None
        self.order = Order(self.count, first_shown(opening), start, summary_at)
        self._total = self._record_tokens
        if self.order.skipped:
            # Shown from ``start`` on: the tokens before it are not the view's.
            await self._read_to(self.order.start)
            before = self._record_tokens - self._read_tokens
            skipped = range(self._lo, min(self.order.start, self.count))
            first = sum(self._entry(i).tokens for i in range(self.order.first))
            self._total = (
                self._record_tokens - before - sum(self._entry(i).tokens for i in skipped) + first
            )
        if window is not None and self._total > window and not self.order.skipped:
            reach = Reach(window)
            for read in self._entries:
                reach.add(read)
            while not reach.reached and self._next is not None:
                known = len(self._entries)
                await self._read_to(self._lo - 1)
                for read in self._entries[known:]:
                    reach.add(read)

    @property
    def first(self) -> int:
        return self.order.first

    @property
    def length(self) -> int:
        return self.order.length

    @property
    def total(self) -> int:
        return self._total

    def __getitem__(self, position: int) -> Entry:
        index = self.order.index(position)
        try:
            return self._entry(index)
        except LookupError:
            raise NotRead(position) from None

    async def messages(self, positions: range) -> tuple[ChatMessage, ...]:
        """The messages at ``positions``, their stored contents read back."""
        try:
            chosen = [self._message(self.order.index(p)) for p in positions]
        except LookupError:
            await self._read_to(min((self.order.index(p) for p in positions), default=0))
            chosen = [self._message(self.order.index(p)) for p in positions]
        return await self.store.resolve(chosen)

    async def read_back(self, position: int) -> None:
        """Read at least up to ``position``, and at least half as far back again as so far."""
        more = max((self.count - self._lo) // 2, MIN_READ_BACK)
        await self._read_to(min(self.order.index(position), self._lo - more))

    def _entry(self, index: int) -> Entry:
        if index >= self._lo:
            return self._entries[self.count - 1 - index]
        if index < len(self._root[1]):
            return self._root[1][index]
        raise LookupError(index)

    def _message(self, index: int) -> ChatMessage:
        if index >= self._lo:
            return self._messages[self.count - 1 - index]
        if index < len(self._root[0]):
            return self._root[0][index]
        raise LookupError(index)

    async def _read_to(self, index: int) -> None:
        """Read segments back from the end until message ``index`` is read (or the chain's
        start is)."""
        while self._lo > max(0, index) and self._next is not None:
            segment = await self.store.segment(self._next)
            entries = await self.store.entries(segment)
            self._entries.extend(reversed(entries))
            self._messages.extend(reversed(segment.messages))
            self._read_tokens += sum(e.tokens for e in entries)
            self._lo -= len(segment.messages)
            self._next = segment.parent
        if self._lo > max(0, index) or (self._next is None and self._lo != 0):
            raise BlobCorrupt(
                f"conversation segment {self._root_key}'s chain does not hold the messages "
                "its head's index counts"
            )
