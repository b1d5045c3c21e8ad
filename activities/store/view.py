"""What the model is shown of a conversation longer than its context window: a *view*.

The record (``ConversationStore``) keeps every message; a model with a smaller window is shown
the system prompt and the task, one summary message of the older messages, then the recent
messages verbatim. The cut moves in steps of a quarter window, not at every call, so the view's
start (and its summary, stored once beside the record) stays the same for many calls: a
provider's prompt cache keeps working, and the store gains one summary per quarter window of
conversation, not one per call.

A view is planned from an ``Entry`` per message (its role, what it costs in the window, its line
in a summary), never from the messages' text, and from the end of the conversation backwards:
the cut is the earliest place whose recent messages fit, so nothing before it but the summary's
lines is looked at. The store keeps each message's entry in the index of the segment that holds
it, so a worker plans a call late in a long conversation from the few segments at its end
(``treadle.activities.store.tail``) and reads the text of the messages shown, not the whole
record. ``view`` plans the same way over messages in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from treadle.workflows.agent.messages.models import ChatMessage

RECENT_SHARE = 0.75
"""At most this share of the window is recent messages (the rest: summary and the reply)."""
SUMMARY_SHARE = 1 / 32
"""The summary's share of the window."""
CUT_STEP_SHARE = 0.25
"""The cut moves in steps of this share of the window."""


@dataclass(frozen=True)
class View:
    """What the model is shown, and how it was made."""

    messages: tuple[ChatMessage, ...]
    left_out: int = 0
    """Messages of the record the summary stands for (0: the whole conversation is shown)."""
    summary: str | None = None


@dataclass(frozen=True)
class Entry:
    """What planning a view needs to know of one message, without its text."""

    role: str
    tokens: int
    """What it costs in the window (``tokens``)."""
    line: str
    """Its line in a summary of the messages a view leaves out (``summary_line``)."""


def tokens(message: ChatMessage) -> int:
    """A rough count (4 characters a token) of what one message costs in the window."""
    content = message.content
    chars = len(content) if content is not None else (message.content_chars or 0)
    chars += sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return chars // 4 + 4


def summary_line(message: ChatMessage) -> str:
    """One short line for a message a view leaves out: who said it, what it called."""
    if message.role == "tool":
        return f"- result: {_opening(message.content or '', 100)}"
    text = _opening(message.content or "", 200)
    calls = ", ".join(f"{c.name}({c.arguments[:80]})" for c in message.tool_calls)
    said = f"{message.role}: {text}" if text else message.role
    return f"- {said}{f' [called {calls}]' if calls else ''}"


def _opening(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text`` with its runs of whitespace made single
    spaces (and none at its start), read from as little of it as gives them: whitespace made
    single in any start of ``text`` is a start of it made single in whole."""
    read = 2 * chars + 16
    while True:
        words = " ".join(text[:read].split())
        if len(words) >= chars or read >= len(text):
            return words[:chars]
        read *= 4


def entry(message: ChatMessage) -> Entry:
    """``message``'s entry: of its whole text (a stored content read back)."""
    return Entry(message.role, tokens(message), summary_line(message))


def first_shown(first: ChatMessage | None) -> int:
    """How many messages every view starts with: the system prompt and the task (the task
    alone when there is no system prompt)."""
    return 2 if first is not None and first.role == "system" else 1


class Order:
    """The order the record is shown in, before any cut: its first messages (``first``), then
    from message ``start`` on, with Reflecting's summary (message ``summary_at``) moved to the
    front of those when it is among them. What it summarised (between the first messages and
    ``start``) is left out. Positions are in that order; ``index`` is the record's."""

    def __init__(self, count: int, first: int, start: int = 0, summary_at: int = 0) -> None:
        self.count = count
        self.first = first
        self.skipped = max(0, start - first)
        self.start = start if self.skipped else first
        self.moved = bool(self.skipped) and start <= summary_at < count
        self.summary_at = summary_at
        self.length = min(first, count) + max(0, count - self.start)

    def index(self, position: int) -> int:
        """The record's index of the message at ``position``."""
        if position < self.first or not self.skipped:
            return position
        body = position - self.first
        if not self.moved:
            return self.start + body
        if body == 0:
            return self.summary_at
        if body <= self.summary_at - self.start:
            return self.start + body - 1
        return self.start + body


class NotRead(Exception):
    """Planning needs the entry at a position the reader has not read yet."""

    def __init__(self, position: int) -> None:
        super().__init__(f"entry {position} is not read yet")
        self.position = position


class Entries(Protocol):
    """A conversation's entries in the order it is shown (``Order``), as far as they are read:
    indexing a position not read raises ``NotRead``."""

    @property
    def first(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def total(self) -> int:
        """The tokens of every position."""
        ...

    def __getitem__(self, position: int) -> Entry: ...


class Reach:
    """How far back from the end planning a view reads, told one entry at a time from the end:
    past the recent messages that fit, the message their turn starts with, and enough of the
    messages before them to fill a summary. A reader that reads that far plans at once."""

    def __init__(self, window: int) -> None:
        self._limit = window * RECENT_SHARE
        self._chars = int(window * SUMMARY_SHARE) * 4
        self._recent = 0
        self._lines = 0

    def add(self, read: Entry) -> None:
        if self._recent <= self._limit:
            self._recent += read.tokens
        else:
            self._lines += len(read.line) + 1

    @property
    def reached(self) -> bool:
        return self._recent > self._limit and self._lines > self._chars


@dataclass(frozen=True)
class Plan:
    """Where a view cuts: the positions before ``cut`` (after the first ones) are left out,
    summarised by ``summary``. ``cut`` ``None``: every position is shown."""

    cut: int | None = None
    summary: str | None = None


def plan(entries: Entries, window: int | None) -> Plan:
    """The view of ``entries`` for a model with ``window`` tokens (``None``: whole).

    Cut points are the first messages after each quarter-window line of the conversation so far
    (so they stay where they are as it grows), and never a tool result, which belongs to the
    assistant message before it; the cut is the earliest whose recent messages fit in
    ``RECENT_SHARE`` of the window. Every position after the cut fits, so it is found by walking
    back from the end to the last that does not, and then forward from the message before the
    tool results there: only the end of the conversation is read."""
    first, length, total = entries.first, entries.length, entries.total
    if window is None or total <= window:
        return Plan()
    limit = window * RECENT_SHARE
    step = max(1, int(window * CUT_STEP_SHARE))
    fits, recent = length, 0  # from ``fits`` on, the messages fit in ``limit``
    while fits > first and recent + entries[fits - 1].tokens <= limit:
        fits -= 1
        recent += entries[fits].tokens
    # The message before ``fits`` and its tool results: a cut point there does not fit, and
    # past its turn's first message no line crossed before it counts any more.
    turn = fits - 1
    while turn >= first and entries[turn].role == "tool":
        turn -= 1
    before = total - recent - sum(entries[i].tokens for i in range(turn + 1, fits))
    cut: int | None = None
    crossed = False
    for index in range(turn + 1, length):
        crossed = crossed or before // step != (before - entries[index - 1].tokens) // step
        if crossed and entries[index].role != "tool":
            if total - before <= limit:
                cut = index
                break
            crossed = False
        before += entries[index].tokens
    if cut is None:
        # No grid point leaves few enough recent messages: the last turn alone.
        shown_last = (i for i in range(length - 1, first - 1, -1) if entries[i].role != "tool")
        cut = next(shown_last, first)
    if cut <= first:
        return Plan()
    return Plan(cut, _summary(entries, first, cut, int(window * SUMMARY_SHARE) * 4))


def _summary(entries: Entries, first: int, cut: int, max_chars: int) -> str:
    """The lines of the messages from ``first`` to ``cut``: the latest that fit in
    ``max_chars``, with a count of those left out."""
    kept: list[str] = []
    size = 0
    for position in range(cut - 1, first - 1, -1):
        line = entries[position].line
        size += len(line) + 1
        if size > max_chars:
            break
        kept.append(line)
    left = cut - first - len(kept)
    head = [f"- ({left} earlier messages not summarised)"] if left else []
    return "\n".join([*head, *reversed(kept)])


def shown(
    first: Sequence[ChatMessage], recent: Sequence[ChatMessage], planned: Plan, order: Order
) -> View:
    """The view made of the ``first`` messages and the ``recent`` ones from the plan's cut
    (every position after the first when it has none)."""
    if planned.cut is None or planned.summary is None:
        return View((*first, *recent), left_out=order.skipped)
    older = planned.cut - order.first
    note = ChatMessage(
        role="user",
        content=(
            f"[The conversation is longer than this model's context: its first {older} "
            "messages after the task are summarised here, one line each; the rest follow "
            f"verbatim.]\n{planned.summary}"
        ),
    )
    return View((*first, note, *recent), left_out=order.skipped + older, summary=planned.summary)


@dataclass(frozen=True)
class _InMemory:
    """``Entries`` of messages at hand."""

    first: int
    length: int
    total: int
    entries: Sequence[Entry]

    def __getitem__(self, position: int) -> Entry:
        return self.entries[position]


def view(
    messages: tuple[ChatMessage, ...], window: int | None, start: int = 0, summary_at: int = 0
) -> View:
    """The conversation as a model with ``window`` tokens is shown it (``None``: whole), from
    message ``start`` on after the system prompt and task, with Reflecting's summary (message
    ``summary_at``, when there is one) first: what it summarised is left out."""
    order = Order(len(messages), first_shown(messages[0] if messages else None), start, summary_at)
    ordered = [messages[order.index(p)] for p in range(order.length)]
    entries = [entry(m) for m in ordered]
    total = sum(e.tokens for e in entries)
    planned = plan(_InMemory(order.first, order.length, total, entries), window)
    cut = order.first if planned.cut is None else planned.cut
    return shown(ordered[: order.first], ordered[cut:], planned, order)
