"""Model text as a live view shows it: what is already on screen, so a retried call or the
``model`` event adds only what is new (or, when a retried reply says something else, shows it
again after ``RETRIED``). The terminal's views and the browser page's transcript both fold a
run's stream with it, and so may any Python program that shows a reply as it streams."""

from __future__ import annotations

import re
from dataclasses import dataclass

from treadle.workflows.agent.messages.events import MAX_EVENT_TEXT, TokenDelta

__all__ = ["RETRIED", "NewText", "TextTracker"]

RETRIED = "↻ retried, the reply changed:"
"""Shown before a retried reply's text when it is not the continuation of what was shown."""
_CUT_NOTE = re.compile(r"… \((\d+) more characters\)")
"""How ``events.bounded`` ends an event's text it cut at ``MAX_EVENT_TEXT`` characters."""


@dataclass(frozen=True)
class NewText:
    """What a token batch or a ``model`` event adds on screen."""

    text: str
    retried: bool = False
    """The reply is not what was shown (a retried call wrote something else): show `RETRIED`,
    then ``text``, which starts from the reply's start, on a line of its own."""


@dataclass(frozen=True)
class _Shown:
    """One step's reply as far as it is on screen: characters ``base`` to ``base + len(text)``
    of attempt ``attempt``, and what is known of a newer attempt not (yet) shown."""

    attempt: int
    base: int
    text: str
    incoming: tuple[int, int, str] | None = None
    """A newer attempt's (attempt, base, text) while it repeats what is shown."""

    @property
    def end(self) -> int:
        return self.base + len(self.text)


class TextTracker:
    """Per step, the model's text already shown and the attempt it came from, so that a retried
    call (which streams again from offset 0) and the ``model`` event (the whole text) add only
    what is new, and a retried reply that says something else is shown again from its start
    (`NewText.retried`) instead of being spliced onto the first attempt's text."""

    KEEP_STEPS = 8

    def __init__(self) -> None:
        self._steps: dict[int, _Shown] = {}

    def shown(self, step: int) -> int:
        """How many characters of ``step``'s reply are on screen."""
        known = self._steps.get(step)
        return len(known.text) if known is not None else 0

    def delta(self, delta: TokenDelta) -> NewText:
        """The part of a token batch not shown yet ("…" first when text before it was never
        seen: a watch that started mid-reply)."""
        known = self._steps.get(delta.step)
        if known is None:
            return self._start(delta.step, delta.attempt, delta.offset, delta.text)
        if delta.attempt == known.attempt:
            base, text = _joined(known.base, known.text, delta.offset, delta.text)
            return self._compare(delta.step, known, delta.attempt, base, text, complete=False)
        if known.incoming is not None and known.incoming[0] == delta.attempt:
            _, base, text = known.incoming
            base, text = _joined(base, text, delta.offset, delta.text)
        else:
            base, text = delta.offset, delta.text
        return self._compare(delta.step, known, delta.attempt, base, text, complete=False)

    def rest(self, step: int, text: str) -> NewText:
        """What a reply's whole text (the ``model`` event's) adds to what its token batches
        showed. An event's text cut by the run (``… (N more characters)``) is compared as far
        as it goes, and the note says how much was never shown."""
        whole, total = _uncut(text)
        known = self._steps.get(step)
        if known is None:
            return self._start(step, 0, 0, text)
        attempt = known.incoming[0] if known.incoming is not None else known.attempt
        new = self._compare(step, known, attempt, 0, whole, complete=total is None)
        end = self._steps[step].end
        if total is not None and end < total:
            return NewText(new.text + f"… ({total - end} more characters)", new.retried)
        return new

    def _start(self, step: int, attempt: int, base: int, text: str) -> NewText:
        self._remember(step, _Shown(attempt, base, text))
        return NewText(("…" if base > 0 else "") + text)

    def _compare(
        self, step: int, known: _Shown, attempt: int, base: int, text: str, *, complete: bool
    ) -> NewText:
        """Reconcile what is shown with a reply's text known from ``base``; ``complete``: the
        text is the whole reply (so one shorter than what is shown differs too)."""
        end = base + len(text)
        low, high = max(known.base, base), min(known.end, end)
        agrees = low >= high or (
            known.text[low - known.base : high - known.base] == text[low - base : high - base]
        )
        if not agrees or (complete and end < known.end):
            self._remember(step, _Shown(attempt, base, text))
            return NewText(("…" if base > 0 else "") + text, retried=True)
        if end <= known.end:  # nothing past what is shown (yet): remember it, show nothing
            incoming = None if attempt == known.attempt else (attempt, base, text)
            self._remember(step, _Shown(known.attempt, known.base, known.text, incoming))
            return NewText("")
        if base > known.end:  # a gap: text in between was never seen
            self._remember(step, _Shown(attempt, base, text))
            return NewText("…" + text)
        if base <= known.base:
            merged = _Shown(attempt, base, text)
        else:
            merged = _Shown(attempt, known.base, known.text + text[known.end - base :])
        self._remember(step, merged)
        return NewText(text[known.end - base :])

    def _remember(self, step: int, shown: _Shown) -> None:
        self._steps[step] = shown
        for old in [s for s in self._steps if s < step - self.KEEP_STEPS]:
            del self._steps[old]


def _joined(base: int, text: str, offset: int, more: str) -> tuple[int, str]:
    """One attempt's known text (from ``base``) with a batch at ``offset`` added; a batch past
    a gap starts the known text anew."""
    if offset > base + len(text) or offset < base:
        return offset, more
    head = text[: offset - base]
    return base, head + more if len(head + more) >= len(text) else text


def _uncut(text: str) -> tuple[str, int | None]:
    """An event's text without the run's cut note, and the reply's whole length when cut."""
    note = _CUT_NOTE.fullmatch(text, MAX_EVENT_TEXT)
    if note is None:
        return text, None
    return text[:MAX_EVENT_TEXT], MAX_EVENT_TEXT + int(note.group(1))
