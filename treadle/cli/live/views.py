"""Where a followed run shows up: a terminal (status line at the bottom, model text and tool
lines scrolling above it), JSON lines, or nothing but what goes wrong (``run --wait --json``)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import IO, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from treadle.cli.live.lines import event_text, item_json
from treadle.client.text import RETRIED, NewText, TextTracker
from treadle.stream import StreamItem, StreamNotice
from treadle.workflows.agent.messages.events import (
    AgentEvent,
    TokenDelta,
    answer_commands,
    approval_commands,
)
from treadle.workflows.agent.messages.models import AgentStatus
from treadle.workflows.agent.parts.planning import call_target

__all__ = ["JsonView", "QuietView", "StatusLine", "TerminalView", "View", "elapsed"]


class View(Protocol):
    """Where a followed run shows up."""

    prompt_file: IO[str]
    """Where questions to the user are written."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def item(self, item: StreamItem) -> None: ...
    def notice(self, notice: StreamNotice) -> None: ...
    def say(self, text: str) -> None:
        """A line from the command line itself (a refusal, a fallback)."""

    def attached(self, workflow_id: str, status: AgentStatus) -> None:
        """The run as it was when the view attached (from now, or from an offset)."""

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """While the user is asked something."""


@dataclass
class StatusLine:
    """The bottom line on a terminal: state, step, tokens, elapsed."""

    state: str = "…"
    step: int = 0
    tokens: int | None = None
    started: datetime | None = None
    waiting: str | None = None

    def render(self, now: datetime) -> Text:
        parts = [self.state, f"step {self.step}"]
        if self.tokens is not None:
            parts.append(f"{self.tokens} tokens")
        if self.started is not None:
            parts.append(elapsed(now - self.started))
        if self.waiting:
            parts.append(self.waiting)
        return Text(" · ".join(parts), style="reverse")


def elapsed(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{seconds:02d}s"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class TerminalView:
    """Readable lines; on a terminal a status line stays at the bottom (rich ``Live``) and the
    line of model text being written sits just above it until it ends."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        speaker: str = "",
        show_messages: bool = True,
        show_started: bool = True,
    ) -> None:
        self.console = console or Console(
            soft_wrap=True, highlight=False, markup=False, emoji=False
        )
        self.prompt_file: IO[str] = self.console.file
        self.live_footer = self.console.is_terminal
        self.speaker = speaker
        self.show_messages = show_messages
        self.show_started = show_started
        self.text = TextTracker()
        self.status = StatusLine()
        self.answer_shown = False
        """An ``answer`` event was shown (as model text or on its own) since the last reset."""
        self._waits_shown: set[str] = set()
        """Calls waiting for approval and client queries already shown (``attached`` shows them
        from the status, and a stream read from an earlier offset has their events too)."""
        self._speaking: int | None = None
        self._partial = ""
        self._mid_line = False
        self._live: Live | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.live_footer and self._live is None:
            self._live = Live(
                console=self.console,
                get_renderable=self._bottom,
                refresh_per_second=4,
                transient=True,
            )
            self._live.start()

    def stop(self) -> None:
        self._end_text()
        if self._live is not None:
            self._live.stop()
            self._live = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        running = self._live is not None
        self.stop()
        try:
            yield
        finally:
            if running:
                self.start()

    # -- what arrives ------------------------------------------------------------------------

    def item(self, item: StreamItem) -> None:
        self._show(item)
        if self._live is not None:
            # A line printed under ``Live`` redraws the last rendered bottom: render it anew.
            self._live.refresh()

    def _show(self, item: StreamItem) -> None:
        value = item.value
        if isinstance(value, TokenDelta):
            self._new_text(value.step, self.text.delta(value))
            return
        event = value
        if event.subagent is not None:  # a sub-agent's, passed on by this run: one tagged line
            line = event_text(event, show_messages=self.show_messages)
            if line is not None:
                self._end_text()
                self._print(line)
            return
        self._track(event)
        if event.kind == "model":
            self._new_text(event.step, self.text.rest(event.step, event.text))
            self._end_text()
            return
        if event.kind == "answer":
            self._end_text()
            if self.text.shown(event.step) == 0 and event.text:
                self._print(Text(f"{self.speaker or 'answer: '}{event.text}"))
            self.answer_shown = True
            return
        if event.kind == "started" and not self.show_started:
            return
        wait = _wait_key(event)
        if wait is not None:
            if wait in self._waits_shown:
                return
            self._waits_shown.add(wait)
        line = event_text(event, show_messages=self.show_messages)
        if line is not None:
            self._end_text()
            self._print(line)

    def notice(self, notice: StreamNotice) -> None:
        if notice.kind == "waiting":
            self.status.waiting = "waiting for a worker"
        elif notice.kind == "resumed":
            self.status.waiting = None
        self.say(notice.text)

    def say(self, text: str) -> None:
        self._end_text()
        self._print(Text(text, style="dim"))
        if self._live is not None:
            self._live.refresh()

    def attached(self, workflow_id: str, status: AgentStatus) -> None:
        self.status.state = status.state.value
        self.status.step = status.step
        self.status.tokens = status.usage.total_tokens
        if status.progress is not None:
            ago = timedelta(seconds=status.progress.elapsed_seconds)
            self.status.started = datetime.now(UTC) - ago
        line = f"{status.state.value} at step {status.step}, {status.usage.total_tokens} tokens"
        self._print(Text(f"watching a run in state {line}", style="dim"))
        # What waits was announced before this view's first offset: show it as its event did.
        at = datetime.now(UTC)
        state = status.state.value
        for p in status.pending_approvals:
            self.item(
                StreamItem(-1, "events", AgentEvent(
                    kind="approval_needed", step=p.step, state=state, at=at,
                    text=f"{p.tool} {call_target(p.tool, p.arguments)}".strip(),
                    tool=p.tool, call_id=p.call_id, arguments=p.arguments,
                    commands=approval_commands(workflow_id, p.call_id),
                ))
            )  # fmt: skip
        if status.client_query is not None:
            q = status.client_query
            self.item(
                StreamItem(-1, "events", AgentEvent(
                    kind="client_query", step=q.step, state=state, at=at, query=q,
                    commands=answer_commands(workflow_id, q),
                ))
            )  # fmt: skip

    # -- internals ---------------------------------------------------------------------------

    def _track(self, event: AgentEvent) -> None:
        self.status.state = event.state
        self.status.step = event.step
        if event.total_tokens is not None:
            self.status.tokens = event.total_tokens
        if event.kind == "started":
            self.status.started = event.at

    def _new_text(self, step: int, new: NewText) -> None:
        if new.retried:
            self._end_text()
            self._print(Text(RETRIED, style="yellow"))
        self._speak(step, new.text)

    def _speak(self, step: int, text: str) -> None:
        if not text:
            return
        if self._speaking != step:
            self._end_text()
            self._speaking = step
            text = self.speaker + text
        if self.live_footer:
            self._partial += text
            *done, self._partial = self._partial.split("\n")
            for line in done:
                self._print(Text(line))
        else:
            self.console.file.write(text)
            self.console.file.flush()
            self._mid_line = not text.endswith("\n")

    def _end_text(self) -> None:
        if self._partial:
            partial, self._partial = self._partial, ""
            self._print(Text(partial))
        if self._mid_line:
            self._mid_line = False
            self.console.file.write("\n")
            self.console.file.flush()
        self._speaking = None

    def _print(self, text: Text) -> None:
        self.console.print(text)
        if not self.live_footer:
            self.console.file.flush()

    def _bottom(self) -> RenderableType:
        footer = self.status.render(datetime.now(UTC))
        return Group(Text(self._partial), footer) if self._partial else footer


def _wait_key(event: AgentEvent) -> str | None:
    """What an event that announces a wait is about: a call id, or a client query's id."""
    if event.kind == "approval_needed" and event.call_id:
        return f"call:{event.call_id}"
    if event.kind == "client_query" and event.query is not None:
        return f"query:{event.query.id}@{event.query.asked_at.isoformat()}"
    return None


class JsonView:
    """One JSON object per stream item on standard output; everything else on standard error."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.prompt_file: IO[str] = err or sys.stderr

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def item(self, item: StreamItem) -> None:
        self.out.write(json.dumps(item_json(item), ensure_ascii=False) + "\n")
        self.out.flush()

    def notice(self, notice: StreamNotice) -> None:
        self.say(notice.text)

    def say(self, text: str) -> None:
        self.prompt_file.write(f"watch: {text}\n")
        self.prompt_file.flush()

    def attached(self, workflow_id: str, status: AgentStatus) -> None:
        # On standard error, so standard output stays one JSON object per item: whoever reads
        # the items knows from here on that nothing after this offset is missed.
        self.say(
            f"attached to {workflow_id} ({status.state.value}); "
            f"following from offset {status.stream_offset}"
        )

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        yield


class QuietView(JsonView):
    """Shows no items (``run --wait --json`` prints only its result); says what goes wrong on
    standard error."""

    def item(self, item: StreamItem) -> None:
        pass

    def notice(self, notice: StreamNotice) -> None:
        if notice.kind in ("gap", "skipped"):
            return
        self.say(notice.text)
