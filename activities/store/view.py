"""What the model is shown of a conversation longer than its context window: a *view*.

The record (``ConversationStore``) keeps every message; a model with a smaller window is shown
the system prompt and the task, one summary message of the older messages, then the recent
messages verbatim. The cut moves in steps of a quarter window, not at every call, so the view's
start (and its summary, stored once beside the record) stays the same for many calls: a
provider's prompt cache keeps working, and the store gains one summary per quarter window of
conversation, not one per call.
"""

from __future__ import annotations

from dataclasses import dataclass

from treadle.workflows.agent.messages.models import ChatMessage
from treadle.workflows.agent.parts.reflection import summarise_messages

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


def tokens(message: ChatMessage) -> int:
    """A rough count (4 characters a token) of what one message costs in the window."""
    content = message.content
    chars = len(content) if content is not None else (message.content_chars or 0)
    chars += sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return chars // 4 + 4


def view(
    messages: tuple[ChatMessage, ...], window: int | None, start: int = 0, summary_at: int = 0
) -> View:
    """The conversation as a model with ``window`` tokens is shown it (``None``: whole), from
    message ``start`` on after the system prompt and task, with Reflecting's summary (message
    ``summary_at``, when there is one) first: what it summarised is left out."""
    first = 2 if messages and messages[0].role == "system" else 1
    skipped = max(0, start - first)
    if skipped:
        rest = messages[start:]
        if start <= summary_at < len(messages):
            at = summary_at - start
            rest = (rest[at], *rest[:at], *rest[at + 1 :])
        messages = (*messages[:first], *rest)
    costs = [tokens(m) for m in messages]
    if window is None or sum(costs) <= window:
        return View(messages, left_out=skipped)
    step = max(1, int(window * CUT_STEP_SHARE))
    total, before = sum(costs), sum(costs[:first])
    cut: int | None = None
    crossed = False
    for index in range(first, len(messages)):
        # Cut points are the first messages after each quarter-window line of the conversation
        # so far (so they stay where they are as it grows), and never a tool result, which
        # belongs to the assistant message before it.
        crossed = crossed or before // step != (before - costs[index - 1]) // step
        if crossed and messages[index].role != "tool":
            if total - before <= window * RECENT_SHARE:
                cut = index
                break
            crossed = False
        before += costs[index]
    if cut is None:
        # No grid point leaves few enough recent messages: the last turn alone.
        cut = next(
            (i for i in range(len(messages) - 1, first - 1, -1) if messages[i].role != "tool"),
            first,
        )
    older = messages[first:cut]
    if not older:
        return View(messages, left_out=skipped)
    summary = summarise_messages(older, int(window * SUMMARY_SHARE) * 4)
    note = ChatMessage(
        role="user",
        content=(
            f"[The conversation is longer than this model's context: its first {len(older)} "
            "messages after the task are summarised here, one line each; the rest follow "
            f"verbatim.]\n{summary}"
        ),
    )
    return View(
        (*messages[:first], note, *messages[cut:]), left_out=skipped + len(older), summary=summary
    )
