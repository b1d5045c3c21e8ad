"""The live view of a run on the command line: ``watch``, ``answer``, and what ``run --wait``
and ``chat`` show while a run works.

    python starter.py watch ID [--from-start | --from OFFSET] [--json] [--interactive]
                               [--allow-reads] [--env NAME]... [--no-answer | --decline-queries]
    python starter.py answer ID QUERY_ID TEXT            # TEXT "-" reads standard input
    python starter.py answer ID QUERY_ID --decline REASON

The run's stream is read with ``treadle.stream.watch_events`` (queries: nothing is added to the
run's history). On a terminal a status line (state, step, tokens, elapsed) stays at the bottom
while the model's text and the tool lines scroll above it; piped, or with ``--json``, every item
is one JSON object per line on standard output (``topic`` and ``offset`` added; a token batch's
own character offset is ``text_offset``) and nothing else is written there.

The view also answers: ``--interactive`` asks right there about a call waiting for approval
(approve / reject with a reason / modify) or a stuck run (guide / halt), through the ``decide``
update; client queries are answered through ``answer_query`` by the policy in
``client_answers`` (file reads with consent or ``--allow-reads``, never a secret-looking file
without consent; ``--env`` variables; questions to the user), unless ``--no-answer`` leaves them
to another client. What waits is always read from the run's ``state`` query, never from an
event (anyone who may signal the run can publish on its stream). A query no one here can be
asked about, and no flag answers, is left to another client (saying so), so several clients can
watch one run; ``--decline-queries`` declines it instead.

A retried model call streams its text again: the terminal view shows only what goes past the
text already shown, or, when the new attempt says something else, ``RETRIED`` and its text from
the start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Protocol

from pydantic import ValidationError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from treadle.cli.client_answers import (
    ClientPolicy,
    Declined,
    PathRefused,
    Reply,
    Shared,
    confine,
    environment_reply,
    looks_secret,
    read_reply,
    redact,
    secret_declined,
    secret_path,
    secret_values,
)
from treadle.cli.exits import UsageError
from treadle.cli.shell import runnable
from treadle.stream import StreamItem, StreamNotice, StreamUnavailable, watch_events
from workflows.agent.events import (
    MAX_DECLINE_CHARS,
    MAX_EVENT_TEXT,
    AgentEvent,
    ClientAnswer,
    ClientQuery,
    TokenDelta,
    answer_commands,
    approval_commands,
)
from workflows.agent.models import (
    AgentResult,
    AgentStatus,
    Decision,
    PendingApproval,
    RunStatus,
)
from workflows.agent.planning import call_target
from workflows.agent.state_machine import State
from workflows.agent.workflow import AgentWorkflow
from workflows.base import describe_errors

__all__ = [
    "RETRIED",
    "JsonView",
    "NewText",
    "Prompter",
    "QuietView",
    "Responder",
    "TerminalView",
    "TextTracker",
    "View",
    "add_client_options",
    "event_text",
    "follow",
    "item_json",
    "outcome",
    "register",
    "responder_for",
    "show_run",
    "warn_secret_env",
]

UPDATE_TIMEOUT = timedelta(seconds=10)
STATUS_TIMEOUT = timedelta(seconds=5)
SHORT_CHARS = 120
"""A tool's output or an argument list is cut to this in one line."""


# --------------------------------------------------------------------------------------------
# Model text: what is already on screen
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# One event as a line (or a few)
# --------------------------------------------------------------------------------------------


def short(text: str, limit: int = SHORT_CHARS) -> str:
    """The first line of ``text``, cut to ``limit`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe_query(query: ClientQuery) -> str:
    what = short(query.what, 200)
    if query.kind == "file_read":
        return f"the file {what}"
    if query.kind == "environment":
        return "its environment" if what in ("", "*") else f"the environment variable(s) {what}"
    return f"an answer: {what}"


def event_text(event: AgentEvent, *, show_messages: bool = True) -> Text | None:
    """How one event reads on a terminal; ``None`` for the kinds the status line or the model
    text show (``state``, ``model``, ``answer``)."""
    kind = event.kind
    target = f"{event.tool or ''} {event.target or ''}".strip()
    lines: list[tuple[str, str]] = []
    if kind == "started":
        lines.append((f"▶ {short(event.text, 200)}", "bold"))
    elif kind == "tool_started":
        lines.append((f"→ {target}", "cyan"))
    elif kind == "tool_finished":
        output = short(event.text)
        if event.ok:
            lines.append((f"✓ {target}" + (f" ({output})" if output else ""), "green"))
        else:
            lines.append((f"✗ {target}: {output or 'failed'}", "red"))
    elif kind == "approval_needed":
        lines.append((f"⏸ {event.text} needs approval (call {event.call_id})", "bold yellow"))
        if event.arguments is not None:
            lines.append((f"  arguments: {short(json.dumps(event.arguments), 300)}", ""))
        lines.extend((f"  {runnable(command)}", "dim") for command in event.commands)
    elif kind == "decided":
        lines.append((f"• decided: {short(event.text, 200)}", "yellow"))
    elif kind == "guidance_needed":
        lines.append((f"⏸ stuck, waiting for guidance: {short(event.text, 300)}", "bold yellow"))
        lines.extend((f"  {runnable(command)}", "dim") for command in event.commands)
    elif kind == "stuck":
        lines.append((f"! stuck: {short(event.text, 300)}", "yellow"))
    elif kind == "hint":
        lines.append((f"  hint to the model: {short(event.text, 300)}", "dim"))
    elif kind == "phase":
        lines.append((f"▸ {short(event.text, 200)}", "magenta"))
    elif kind == "progress":
        lines.append((f"  progress: {short(event.text, 200)}", "dim"))
    elif kind == "message":
        if not show_messages:
            return None
        lines.append((f"user> {short(event.text, 300)}", "bold"))
    elif kind == "client_query":
        if event.query is None:
            lines.append((f"? the run asks the client: {short(event.text)}", "bold yellow"))
        else:
            q = event.query
            lines.append((f"? the run asks for {describe_query(q)} (query {q.id})", "bold yellow"))
        lines.extend((f"  {runnable(command)}", "dim") for command in event.commands)
    elif kind == "client_answered":
        name = event.query.id if event.query is not None else "the query"
        style = "green" if event.ok else "yellow"
        lines.append((f"← {name}: {short(event.text, 200)}", style))
    elif kind == "refused":
        lines.append((f"! refused: {short(event.text, 300)}", "red"))
    elif kind == "error":
        lines.append((f"✗ error: {short(event.text, 500)}", "bold red"))
    elif kind == "hook":
        lines.append((f"⚙ hook {short(event.text, 200)}", "dim" if event.ok else "yellow"))
    elif kind == "mcp_tools":
        lines.append((f"⚙ {short(event.text, 300)}", "dim" if event.ok else "yellow"))
    elif kind == "continued":
        lines.append((f"… continued as new ({short(event.text)})", "dim"))
    elif kind == "ended":
        lines.append((f"■ {event.state}", "bold green" if event.state == "Done" else "bold red"))
    if not lines:
        return None
    text = Text()
    for index, (line, style) in enumerate(lines):
        if index:
            text.append("\n")
        text.append(line, style=style)
    return text


def item_json(item: StreamItem) -> dict[str, Any]:
    """One stream item as the JSON object ``watch --json`` prints."""
    value = item.value.model_dump(mode="json")
    if item.topic == "tokens":
        value["text_offset"] = value.pop("offset")
    return {"topic": item.topic, "offset": item.offset, **value}


# --------------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------------


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
        pass

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


# --------------------------------------------------------------------------------------------
# Asking the user, and answering the run
# --------------------------------------------------------------------------------------------


class Prompter:
    """Asks the user one line at a time (``None`` at the end of input)."""

    def __init__(self, view: View) -> None:
        self.view = view

    async def ask(self, question: str) -> str | None:
        with self.view.paused():
            return await asyncio.to_thread(self._read, question)

    def _read(self, question: str) -> str | None:
        out = self.view.prompt_file
        if sys.stdin.isatty() and out is sys.stdout:
            try:
                return input(question).strip()
            except EOFError:
                return None
        out.write(question)
        out.flush()
        line = sys.stdin.readline()
        if not sys.stdin.isatty():
            # Nothing echoed what was read: show it, and end the prompt's line.
            out.write(line if line.endswith("\n") else line + "\n")
            out.flush()
        return line.strip() if line else None


@dataclass
class Responder:
    """Acts on what a run waits for: approvals and guidance (``interactive``), and client
    queries (``policy``; ``None`` leaves them to another client).

    An event on the stream is only a trigger: anyone who may signal a run can publish items on
    its stream, so what waits (the call, its arguments, the query) is read from the run's own
    ``state`` query each time. A query this client has no one to ask about and no flag to
    answer (``--allow-reads``, ``--env``) is left to another client or ``starter.py answer``,
    saying so, unless ``--decline-queries``."""

    handle: WorkflowHandle[Any, Any]
    view: View
    prompter: Prompter | None = None
    """``None``: no one to ask (not a terminal, no ``--interactive``)."""
    interactive: bool = False
    policy: ClientPolicy | None = None
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    handled: set[str] = field(default_factory=set)

    async def on_event(self, event: AgentEvent) -> None:
        if event.kind == "approval_needed" and self.interactive and event.call_id:
            await self._approval(event.call_id)
        elif event.kind == "guidance_needed" and self.interactive:
            await self._guidance(event.step)
        elif event.kind == "client_query":
            await self._client_query(event.query)

    async def on_attach(self, status: AgentStatus) -> None:
        """What was already waiting when the view attached."""
        if self.interactive:
            for pending in status.pending_approvals:
                await self._approval(pending.call_id)
            if status.state is State.WAITING_FOR_HUMAN and not status.pending_approvals:
                await self._guidance(status.step)
        if status.client_query is not None:
            await self._client_query(status.client_query)

    # -- approvals and guidance ---------------------------------------------------------------

    async def _approval(self, call_id: str) -> None:
        if call_id in self.handled or self.prompter is None:
            return
        self.handled.add(call_id)
        pending = await self._pending(call_id)
        while pending is not None:  # None: decided (a replay from the start, another client)
            # The tool and arguments as the run holds them, not as an event said.
            arguments = short(json.dumps(pending.arguments), 200)
            choice = await self.prompter.ask(
                f"{pending.tool} {arguments} ({call_id}): approve, reject, modify, or skip? "
                "[a/r/m/s] "
            )
            if choice is None or choice.lower() in ("s", "skip", ""):
                return
            decision = await self._decision(choice.lower(), call_id, pending.arguments)
            if decision is not None and await self._decide(decision):
                return
            pending = await self._pending(call_id)

    async def _pending(self, call_id: str) -> PendingApproval | None:
        status = await self._status()
        waiting = status.pending_approvals if status is not None else ()
        return next((p for p in waiting if p.call_id == call_id), None)

    async def _decision(
        self, choice: str, call_id: str, arguments: dict[str, Any]
    ) -> Decision | None:
        assert self.prompter is not None
        if choice in ("a", "approve"):
            return Decision(action="approve", call_id=call_id)
        if choice in ("r", "reject"):
            reason = await self.prompter.ask("reason (the model reads it): ")
            if not reason:
                self.view.say("a rejection needs a reason")
                return None
            return Decision(action="reject", call_id=call_id, reason=reason)
        if choice in ("m", "modify"):
            text = await self.prompter.ask(
                f"new arguments as a JSON object (now {short(json.dumps(arguments), 300)}): "
            )
            try:
                new = json.loads(text or "")
            except json.JSONDecodeError as exc:
                self.view.say(f"not JSON: {exc.msg} at position {exc.pos}")
                return None
            if not isinstance(new, dict):
                self.view.say("the arguments must be a JSON object")
                return None
            return Decision(action="modify", call_id=call_id, arguments=new)
        self.view.say("answer a, r, m or s")
        return None

    async def _guidance(self, step: int) -> None:
        key = f"guidance@{step}"
        if key in self.handled or self.prompter is None:
            return
        self.handled.add(key)
        while await self._wants_guidance():
            choice = await self.prompter.ask(
                "stuck: guide the model, halt the run, or skip? [g/h/s] "
            )
            if choice is None or choice.lower() in ("s", "skip", ""):
                return
            if choice.lower() in ("g", "guide"):
                text = await self.prompter.ask("guidance for the model: ")
                if not text:
                    continue
                decision = Decision(action="guide", guidance=text)
            elif choice.lower() in ("h", "halt"):
                reason = await self.prompter.ask("why (optional): ")
                decision = Decision(action="guide", halt=True, reason=reason or None)
            else:
                self.view.say("answer g, h or s")
                continue
            if await self._decide(decision):
                return

    async def _wants_guidance(self) -> bool:
        status = await self._status()
        if status is None or status.state is not State.WAITING_FOR_HUMAN:
            return False
        return not status.pending_approvals

    async def _decide(self, decision: Decision) -> bool:
        """Send one decision; says why when the run refuses it (then the user is asked again)."""
        try:
            await self.handle.execute_update(
                AgentWorkflow.decide, decision, rpc_timeout=UPDATE_TIMEOUT
            )
        except WorkflowUpdateFailedError as exc:
            self.view.say(f"the run refused it: {_cause(exc)}")
            return False
        except RPCError as exc:
            self.view.say(f"the run did not take it: {exc.message}")
            return False
        return True

    # -- client queries -----------------------------------------------------------------------

    async def _client_query(self, announced: ClientQuery | None) -> None:
        """Answer the query the run's status holds (``announced``, an event's copy, is only a
        trigger: the status says what is asked, or that nothing is)."""
        if self.policy is None:
            return
        status = await self._status()
        query = status.client_query if status is not None else None
        if query is None:
            return  # answered already, timed out, or never asked by the run
        key = f"{query.id}@{query.asked_at.isoformat()}"
        if key in self.handled:
            return
        self.handled.add(key)
        if (
            announced is not None
            and announced.id == query.id
            and (announced.kind, announced.what) != (query.kind, query.what)
        ):
            self.view.say(
                f"the stream's copy of {query.id} is not what the run asks; answering the run: "
                f"{describe_query(query)}"
            )
        reply = await self._reply(self.policy, query)
        if reply is None:
            self.view.say(self._left(query))
            return
        answer = _answer(query, reply)
        refusal = await self._send_answer(answer)
        if refusal is not None and answer.content is not None:
            # Too long for this run, say: tell the model why instead of leaving it waiting.
            refusal = await self._send_answer(_answer(query, Declined(refusal)))
        if refusal is not None:
            self.view.say(f"the run refused the answer to {query.id}: {refusal}")

    async def _reply(self, policy: ClientPolicy, query: ClientQuery) -> Reply | None:
        """The answer, or ``None`` to leave the query to another client (no one here to ask,
        no flag that answers it, no ``--decline-queries``)."""
        secrets = secret_values(self.environ)
        if query.kind == "environment":
            if not policy.env:
                if self.prompter is None and not policy.decline:
                    return None
                return Declined(
                    "the client shares no environment variables (it would name them with "
                    "--env NAME)"
                )
            return _redacted(environment_reply(query.what, policy.env, self.environ), secrets)
        if query.kind == "question":
            if self.prompter is None:
                if not policy.decline:
                    return None
                return Declined("no one at the client can answer questions (not a terminal)")
            text = await self.prompter.ask(f"the run asks: {query.what}\nyour answer: ")
            return Shared(redact(text, secrets)) if text else Declined("the user gave no answer")
        return await self._file(policy, query.what, secrets)

    async def _file(
        self, policy: ClientPolicy, what: str, secrets: tuple[str, ...]
    ) -> Reply | None:
        if self.prompter is None and not policy.allow_reads:
            if not policy.decline:
                return None
            return Declined("the client shares files only with its user's consent or --allow-reads")
        try:
            path = confine(policy.root, what)
        except PathRefused as exc:
            return Declined(str(exc))
        secret = secret_path(policy.root, what)
        if self.prompter is None or (secret is None and policy.allow_reads):
            # --allow-reads answers without asking, but never sends what looks like a secret.
            if secret is not None:
                return Declined(secret_declined(what, secret))
            return await asyncio.to_thread(read_reply, policy, what, redacting=secrets)
        size = path.stat().st_size if path.is_file() else None
        about = f" ({size} bytes)" if size is not None else ""
        if secret is None:
            question = f"the run asks to read {what}{about} from {policy.root}; send it? [y/N] "
        else:
            question = (
                f"the run asks to read {what}{about} from {policy.root}. It LOOKS LIKE A SECRET "
                f"(it matches {secret}): sent, it stays in the run's history and goes to the "
                "model. Send it anyway? [y/N] "
            )
        consent = await self.prompter.ask(question)
        if (consent or "").lower() not in ("y", "yes"):
            return Declined(f"the user declined to share {what}")
        return await asyncio.to_thread(
            read_reply, policy, what, secret_ok=secret is not None, redacting=secrets
        )

    def _left(self, query: ClientQuery) -> str:
        flag = {"file_read": " and no --allow-reads", "environment": " and no --env"}
        command = runnable(answer_commands(self.handle.id, query)[0])
        return (
            f"{query.id} ({describe_query(query)}) is left to another client: no one here to "
            f"ask{flag.get(query.kind, '')} (--decline-queries declines instead). "
            f"Answer it with: {command}"
        )

    async def _send_answer(self, answer: ClientAnswer) -> str | None:
        try:
            await self.handle.execute_update(
                AgentWorkflow.answer_query, answer, rpc_timeout=UPDATE_TIMEOUT
            )
        except WorkflowUpdateFailedError as exc:
            return _cause(exc)
        except RPCError as exc:
            return exc.message
        return None

    async def _status(self) -> AgentStatus | None:
        try:
            status: AgentStatus = await self.handle.query(
                AgentWorkflow.state, rpc_timeout=STATUS_TIMEOUT
            )
        except (RPCError, WorkflowQueryFailedError):
            return None
        return status


def _answer(query: ClientQuery, reply: Reply) -> ClientAnswer:
    if isinstance(reply, Shared):
        return ClientAnswer(query_id=query.id, kind=query.kind, content=reply.content)
    reason = reply.reason[:MAX_DECLINE_CHARS]
    return ClientAnswer(query_id=query.id, kind=query.kind, declined=reason)


def _redacted(reply: Reply, secrets: tuple[str, ...]) -> Reply:
    return Shared(redact(reply.content, secrets)) if isinstance(reply, Shared) else reply


def _cause(exc: WorkflowUpdateFailedError) -> str:
    cause = exc.cause
    return str(getattr(cause, "message", None) or cause or exc)


# --------------------------------------------------------------------------------------------
# Following a run
# --------------------------------------------------------------------------------------------


async def follow(
    client: Client,
    workflow_id: str,
    view: View,
    responder: Responder,
    *,
    from_offset: int | None,
    attached: AgentStatus | None = None,
    until: Callable[[AgentEvent], Awaitable[bool]] | None = None,
) -> int | None:
    """Show the run's stream from ``from_offset`` (``None``: from now) and act on it, until the
    run is over or ``until`` says so; returns the offset to continue from (``None`` if nothing
    was read). ``attached``: the run's status when the view attached (what already waits).
    Raises ``StreamUnavailable`` when the run has no stream."""
    next_offset = from_offset
    if attached is not None:
        view.attached(workflow_id, attached)
    view.start()
    try:
        if attached is not None:
            await responder.on_attach(attached)
        stream = watch_events(client, workflow_id, from_offset=from_offset, on_notice=view.notice)
        async with contextlib.aclosing(stream):
            async for item in stream:
                next_offset = item.offset + 1
                view.item(item)
                if isinstance(item.value, AgentEvent):
                    await responder.on_event(item.value)
                    if until is not None and await until(item.value):
                        break
    finally:
        view.stop()
    return next_offset


async def outcome(handle: WorkflowHandle[Any, Any]) -> AgentResult:
    """The run's result once it is over (an error result for a failed, terminated, cancelled
    or timed-out run)."""
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        return AgentResult(status=RunStatus.ERROR, error=getattr(cause, "message", str(cause)))
    if isinstance(result, AgentResult):
        return result
    return AgentResult.model_validate(result)


def add_client_options(parser: argparse.ArgumentParser, *, interactive: bool = True) -> None:
    """The flags that say what this client answers: approvals and client queries."""
    if interactive:
        parser.add_argument(
            "--interactive",
            action="store_true",
            help="ask here about calls waiting for approval and stuck runs",
        )
    parser.add_argument(
        "--allow-reads",
        action="store_true",
        help="answer the run's file reads from this directory without asking",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="an environment variable the run may read (repeatable; never *KEY*/*TOKEN*/...)",
    )
    leave = parser.add_mutually_exclusive_group()
    leave.add_argument(
        "--no-answer",
        action="store_true",
        help="leave the run's client queries to another client",
    )
    leave.add_argument(
        "--decline-queries",
        action="store_true",
        help="decline the client queries this client cannot answer (no terminal to ask, no "
        "--allow-reads / --env for them) instead of leaving them to another client",
    )


def policy_from(args: argparse.Namespace) -> ClientPolicy | None:
    if getattr(args, "no_answer", False):
        return None
    return ClientPolicy(
        root=Path.cwd(),
        allow_reads=bool(getattr(args, "allow_reads", False)),
        env=tuple(getattr(args, "env", None) or ()),
        decline=bool(getattr(args, "decline_queries", False)),
    )


def warn_secret_env(args: argparse.Namespace, view: View) -> None:
    for name in getattr(args, "env", None) or ():
        if looks_secret(name):
            view.say(f"--env {name}: never shared (its name looks like a secret)")


def responder_for(
    handle: WorkflowHandle[Any, Any], view: View, args: argparse.Namespace, *, can_ask: bool
) -> Responder:
    interactive = bool(getattr(args, "interactive", False))
    asking = can_ask or interactive
    return Responder(
        handle=handle,
        view=view,
        prompter=Prompter(view) if asking else None,
        interactive=interactive,
        policy=policy_from(args),
    )


async def show_run(
    client: Client, handle: WorkflowHandle[Any, Any], args: argparse.Namespace
) -> bool:
    """``run --wait``: the live view of a run just started (nothing but its answers with
    ``--json``), until it is over. Returns whether it was shown (its answer or error included);
    a run without a stream is simply waited for."""
    view: View = QuietView() if args.json else TerminalView(show_started=False)
    warn_secret_env(args, view)
    responder = responder_for(handle, view, args, can_ask=sys.stdin.isatty())
    try:
        await follow(client, handle.id, view, responder, from_offset=0)
    except StreamUnavailable:
        return False
    return not args.json


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``watch`` and ``answer``; each sets ``handler`` (async (client, args) -> exit code)."""
    watch = subparsers.add_parser("watch", help="show a run or thread live (JSON lines when piped)")
    watch.add_argument("workflow_id")
    start = watch.add_mutually_exclusive_group()
    start.add_argument("--from-start", action="store_true", help="from the run's first event")
    start.add_argument(
        "--from", dest="from_offset", type=int, metavar="OFFSET", help="from this offset"
    )
    watch.add_argument("--json", action="store_true", help="JSON lines, even on a terminal")
    add_client_options(watch)
    watch.set_defaults(handler=cmd_watch)

    answer = subparsers.add_parser("answer", help="answer a run's client query by hand")
    answer.add_argument("workflow_id")
    answer.add_argument("query_id")
    answer.add_argument("text", nargs="?", help='the answer ("-": read it from standard input)')
    answer.add_argument("--decline", metavar="REASON", help="refuse to answer, saying why")
    answer.set_defaults(handler=cmd_answer)


async def cmd_watch(client: Client, args: argparse.Namespace) -> int:
    if args.from_offset is not None and args.from_offset < 0:
        raise UsageError("--from must be an offset of 0 or more")
    handle = client.get_workflow_handle(args.workflow_id, result_type=AgentResult)
    status = await _attach_status(handle)
    as_json = args.json or not sys.stdout.isatty()
    view: View = JsonView() if as_json else TerminalView()
    warn_secret_env(args, view)
    if args.from_start:
        from_offset: int | None = 0
    elif args.from_offset is not None:
        from_offset = args.from_offset
    else:
        from_offset = status.stream_offset if status is not None else None
        if status is not None and status.state.is_terminal:
            view.say(f"run {args.workflow_id} has ended: {status.state.value}")
            return 0 if status.state is State.DONE else 1
    responder = responder_for(handle, view, args, can_ask=sys.stdin.isatty())
    try:
        await follow(
            client,
            args.workflow_id,
            view,
            responder,
            from_offset=from_offset,
            attached=status if not args.from_start else None,
        )
    except StreamUnavailable as exc:
        raise UsageError(str(exc)) from exc
    result = await outcome(handle)
    return 0 if result.status is RunStatus.DONE else 1


async def cmd_answer(client: Client, args: argparse.Namespace) -> int:
    handle = client.get_workflow_handle(args.workflow_id, result_type=AgentResult)
    text = args.text
    if text == "-":
        text = await asyncio.to_thread(sys.stdin.read)
    if (text is None) == (args.decline is None):
        raise UsageError("give the answer as TEXT, or --decline REASON")
    status = await _attach_status(handle, required=True)
    assert status is not None
    query = status.client_query
    if query is None:
        raise UsageError(f"run {args.workflow_id} has no client query waiting")
    try:
        answer = ClientAnswer(
            query_id=args.query_id, kind=query.kind, content=text, declined=args.decline
        )
    except ValidationError as exc:
        raise UsageError(f"invalid answer: {describe_errors(exc)}") from exc
    try:
        answered: ClientQuery = await handle.execute_update(
            AgentWorkflow.answer_query, answer, rpc_timeout=UPDATE_TIMEOUT
        )
    except WorkflowUpdateFailedError as exc:
        raise UsageError(f"run {args.workflow_id} refused the answer: {_cause(exc)}") from exc
    except RPCError as exc:
        raise UsageError(f"run {args.workflow_id} did not take the answer: {exc.message}") from exc
    how = "declined" if args.decline is not None else "answered"
    print(f"{how} {answered.id} ({answered.kind}: {short(answered.what, 80)}) in run {handle.id}")
    return 0


async def _attach_status(
    handle: WorkflowHandle[Any, Any], *, required: bool = False
) -> AgentStatus | None:
    """The run's status, or ``None`` when no worker answers (unless ``required``)."""
    try:
        status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=STATUS_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise UsageError(f"no run with id {handle.id!r}") from exc
        if required:
            raise UsageError(
                f"run {handle.id!r} did not answer ({exc.message}); is a worker running?"
            ) from exc
        return None
    except WorkflowQueryFailedError as exc:
        if required:
            raise UsageError(f"run {handle.id!r} did not answer: {exc.message}") from exc
        return None
    return status
