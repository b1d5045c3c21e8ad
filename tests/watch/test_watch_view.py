"""The live view, fed event and token sequences by hand: model text shown once however it
arrives (and shown again after a marker when a retry changed it), one readable line per tool
call, approvals with their commands (once, however many ways they arrive), JSON lines."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from treadle.cli.client_answers import Declined
from treadle.cli.live import JsonView, TerminalView, event_text, item_json
from treadle.cli.live.responder import _answer
from treadle.cli.shell import runnable
from treadle.client.text import RETRIED, NewText, TextTracker
from treadle.stream import StreamItem
from treadle.workflows.agent.messages.events import (
    MAX_DECLINE_CHARS,
    MAX_EVENT_TEXT,
    AgentEvent,
    ClientAnswer,
    ClientQuery,
    TokenDelta,
)
from treadle.workflows.agent.messages.models import AgentStatus, PendingApproval
from treadle.workflows.agent.messages.state_machine import State

AT = datetime(2026, 1, 1, tzinfo=UTC)


def ev(kind: Any, step: int = 1, text: str = "", **fields: Any) -> StreamItem:
    state = fields.pop("state", "Planning")
    return StreamItem(
        0, "events", AgentEvent(kind=kind, step=step, state=state, at=AT, text=text, **fields)
    )


def tok(step: int, offset: int, text: str, attempt: int = 1) -> StreamItem:
    return StreamItem(0, "tokens", TokenDelta(step=step, attempt=attempt, offset=offset, text=text))


def render(*items: StreamItem, speaker: str = "") -> str:
    out = io.StringIO()
    view = TerminalView(
        Console(file=out, soft_wrap=True, highlight=False, markup=False, emoji=False),
        speaker=speaker,
    )
    assert not view.live_footer
    view.start()
    for item in items:
        view.item(item)
    view.stop()
    return out.getvalue()


def test_tokens_then_the_model_event_show_the_text_once() -> None:
    """Token batches print as they come; the model event adds only the rest."""
    text = render(tok(1, 0, "Hello, "), tok(1, 7, "wor"), ev("model", 1, "Hello, world.\nBye."))
    assert text == "Hello, world.\nBye.\n"


def test_a_retried_call_restreaming_from_zero_adds_nothing_twice() -> None:
    """Attempt 2 streams again from offset 0: only what goes past the shown text appears."""
    text = render(
        tok(3, 0, "The answer"),
        tok(3, 0, "The ans", attempt=2),
        tok(3, 7, "wer is 4", attempt=2),
        ev("model", 3, "The answer is 42."),
    )
    assert text == "The answer is 42.\n"


def test_a_fast_call_shows_its_whole_text_from_the_model_event() -> None:
    """No token batches (a fast call): the model event's text is shown whole, once; the answer
    event repeats nothing."""
    text = render(ev("model", 2, "It is 4."), ev("answer", 2, "It is 4."), speaker="agent> ")
    assert text == "agent> It is 4.\n"


def test_an_answer_not_seen_as_model_text_is_printed() -> None:
    """Attached after the model event: the answer event shows the answer."""
    assert render(ev("answer", 5, "Done it.")) == "answer: Done it.\n"


def test_a_watch_started_mid_reply_marks_the_missing_start() -> None:
    """Text before the first batch seen was never shown: an ellipsis says so."""
    assert render(tok(1, 40, "end of it"), ev("model", 1, "x" * 40 + "end of it")) == (
        "…end of it\n"
    )


def test_tracker_keeps_each_step_apart() -> None:
    """Two steps stream independently; old steps are forgotten after a while."""
    tracker = TextTracker()
    assert tracker.delta(TokenDelta(step=1, attempt=1, offset=0, text="ab")) == NewText("ab")
    assert tracker.delta(TokenDelta(step=2, attempt=1, offset=0, text="cd")) == NewText("cd")
    assert tracker.rest(1, "abc") == NewText("c")
    assert tracker.rest(2, "cd") == NewText("")
    tracker.rest(100, "z")
    assert tracker.shown(1) == 0


def test_a_retried_call_that_says_something_else_is_shown_again_from_its_start() -> None:
    """Attempt 2 streams other text: no splice of attempt 1's start and attempt 2's rest, but a
    marker and attempt 2's text from its start, then only its continuation."""
    text = render(
        tok(3, 0, "The answer is 4"),
        tok(3, 0, "The result", attempt=2),
        tok(3, 10, " is 42", attempt=2),
        ev("model", 3, "The result is 42."),
    )
    assert text == f"The answer is 4\n{RETRIED}\nThe result is 42.\n"


def test_a_retried_call_that_diverges_late_is_marked_when_it_diverges() -> None:
    """Attempt 2 repeats attempt 1's start (nothing shown twice), then says something else:
    the marker comes once it differs, and its text from the start follows."""
    tracker = TextTracker()
    assert tracker.delta(TokenDelta(step=1, attempt=1, offset=0, text="Hello wor")) == NewText(
        "Hello wor"
    )
    assert tracker.delta(TokenDelta(step=1, attempt=2, offset=0, text="Hello")) == NewText("")
    assert tracker.delta(TokenDelta(step=1, attempt=2, offset=5, text=" there")) == NewText(
        "Hello there", retried=True
    )
    assert tracker.rest(1, "Hello there!") == NewText("!")


def test_a_final_reply_that_does_not_start_with_the_shown_text_is_marked() -> None:
    """The model event is the reply as it is: shorter than, or other than, the streamed text of
    an attempt that failed, it is shown again after the marker."""
    assert render(tok(2, 0, "Partial thought that"), ev("model", 2, "Partial")) == (
        f"Partial thought that\n{RETRIED}\nPartial\n"
    )
    assert render(tok(2, 0, "Yes"), ev("model", 2, "No."), speaker="agent> ") == (
        f"agent> Yes\n{RETRIED}\nagent> No.\n"
    )


def test_a_retry_that_repeats_the_text_adds_no_marker() -> None:
    """Attempt 2 writes the same reply: nothing is shown twice and there is no marker."""
    text = render(
        tok(1, 0, "Same words"),
        tok(1, 0, "Same", attempt=2),
        tok(1, 4, " words and more", attempt=2),
        ev("model", 1, "Same words and more."),
    )
    assert text == "Same words and more.\n"


def test_a_cut_model_event_is_compared_as_far_as_it_goes() -> None:
    """A reply longer than an event holds: the event's cut note is no change of reply; what was
    never shown is counted."""
    reply = "x" * (MAX_EVENT_TEXT + 500)
    event_text = f"{reply[:MAX_EVENT_TEXT]}… (500 more characters)"
    streamed = render(tok(1, 0, reply[:4_200]), ev("model", 1, event_text))
    assert streamed == reply[:4_200] + "… (300 more characters)\n"
    assert RETRIED not in streamed
    whole = render(tok(1, 0, reply), ev("model", 1, event_text))
    assert whole == reply + "\n"


def test_tool_lines_approvals_and_the_end() -> None:
    """Tool calls start (→) and end (✓/✗); an approval shows the call and its commands; a
    client query its commands; the end its state."""
    commands = ("treadle approve r1 --call c1", "treadle reject r1 ...")
    query = ClientQuery(
        id="q1", kind="file_read", what="src/main.rs", call_id="c2", step=2, asked_at=AT
    )
    text = render(
        ev("started", 0, "Write the notes"),
        ev("approval_needed", 1, "write_file notes.md", tool="write_file", call_id="c1",
           arguments={"path": "notes.md"}, commands=commands),
        ev("decided", 1, "approve c1"),
        ev("tool_started", 1, "write_file", tool="write_file", target="notes.md"),
        ev("tool_finished", 1, "wrote 12 bytes", tool="write_file", target="notes.md", ok=True),
        ev("tool_finished", 1, "ERROR: no such file\nmore", tool="read_file", target="x", ok=False),
        ev("client_query", 2, "file_read: src/main.rs", query=query,
           commands=('treadle answer r1 q1 "..."',)),
        ev("state", 2, "Planning -> Done"),
        ev("ended", 2, "all done", state="Done"),
    )  # fmt: skip
    assert text.splitlines() == [
        "▶ Write the notes",
        "⏸ write_file notes.md needs approval (call c1)",
        '  arguments: {"path": "notes.md"}',
        f"  {runnable('treadle approve r1 --call c1')}",
        f"  {runnable('treadle reject r1 ...')}",
        "• decided: approve c1",
        "→ write_file notes.md",
        "✓ write_file notes.md (wrote 12 bytes)",
        "✗ read_file x: ERROR: no such file",
        "? the run asks for the file src/main.rs (query q1)",
        "  " + runnable('treadle answer r1 q1 "..."'),
        "■ Done",
    ]


def test_every_kind_reads_as_a_line_or_is_left_to_the_status_line() -> None:
    """Kinds the status line or the model text show return None; every other kind has text."""
    silent = {"state", "model", "answer"}
    kinds = AgentEvent.model_fields["kind"].annotation.__args__  # type: ignore[union-attr]
    for kind in kinds:
        line = event_text(AgentEvent(kind=kind, step=1, state="Planning", at=AT, text="t"))
        assert (line is None) == (kind in silent), kind


def test_streamed_text_is_closed_before_the_next_line() -> None:
    """A line printed while the model's text is unfinished starts on its own line."""
    text = render(tok(1, 0, "thinking"), ev("tool_started", 1, tool="list_dir", target="."))
    assert text == "thinking\n→ list_dir .\n"


def test_json_lines_carry_topic_and_offset() -> None:
    """One object per item; a token batch's own offset is text_offset."""
    out, err = io.StringIO(), io.StringIO()
    view = JsonView(out, err)
    view.item(
        StreamItem(
            7, "events", AgentEvent(kind="model", step=1, state="Planning", at=AT, text="hi")
        )
    )
    view.item(StreamItem(8, "tokens", TokenDelta(step=1, attempt=2, offset=30, text="x")))
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert (first["topic"], first["offset"], first["kind"], first["text"]) == (
        "events",
        7,
        "model",
        "hi",
    )
    assert second == {
        "topic": "tokens",
        "offset": 8,
        "step": 1,
        "attempt": 2,
        "text_offset": 30,
        "text": "x",
    }
    assert (
        item_json(StreamItem(8, "tokens", TokenDelta(step=1, attempt=1, offset=0, text="")))[
            "offset"
        ]
        == 8
    )
    assert err.getvalue() == ""


def test_json_lines_pass_every_attempt_through() -> None:
    """The JSON view reconciles nothing: both attempts' batches and the model event are printed
    as they came, each with its attempt, for a script to judge."""
    out = io.StringIO()
    view = JsonView(out, io.StringIO())
    items = [
        StreamItem(0, "tokens", TokenDelta(step=3, attempt=1, offset=0, text="The answer is 4")),
        StreamItem(1, "tokens", TokenDelta(step=3, attempt=2, offset=0, text="The result")),
        StreamItem(2, "tokens", TokenDelta(step=3, attempt=2, offset=10, text=" is 42")),
        ev("model", 3, "The result is 42."),
    ]
    for item in items:
        view.item(item)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line.get("attempt"), line["text"]) for line in lines] == [
        (1, "The answer is 4"),
        (2, "The result"),
        (2, " is 42"),
        (None, "The result is 42."),
    ]
    assert RETRIED not in out.getvalue()


def test_a_wait_shown_on_attach_is_not_shown_again_from_the_stream() -> None:
    """``watch --from N``: a call waiting for approval (and a client query) shown from the
    status when the view attached is not shown a second time when the stream reaches its
    event; another call is."""
    out = io.StringIO()
    view = TerminalView(Console(file=out, soft_wrap=True, highlight=False, markup=False))
    pending = PendingApproval(
        call_id="c1", tool="write_file", arguments={"path": "a.md"}, step=1, requested_at=AT
    )
    query = ClientQuery(id="q1", kind="question", what="Which?", call_id="c9", step=1, asked_at=AT)
    status = AgentStatus(
        state=State.WAITING_FOR_HUMAN, step=1, max_steps=20, model="openai:m", task="t",
        pending_approvals=(pending,), client_query=query,
    )  # fmt: skip
    view.attached("r1", status)
    view.start()
    view.item(ev("approval_needed", 1, "write_file a.md", tool="write_file", call_id="c1"))
    view.item(ev("client_query", 1, "question: Which?", query=query))
    view.item(ev("approval_needed", 1, "write_file b.md", tool="write_file", call_id="c2"))
    view.stop()
    shown = out.getvalue()
    assert shown.count("needs approval (call c1)") == 1
    assert shown.count("(query q1)") == 1
    assert shown.count("needs approval (call c2)") == 1


def test_a_long_decline_is_cut_to_what_the_run_accepts() -> None:
    """A decline reason longer than ``ClientAnswer`` takes is cut to its one limit, so the run
    hears why instead of refusing the answer."""
    query = ClientQuery(id="q1", kind="file_read", what="x", call_id="c1", step=1, asked_at=AT)
    answer = _answer(query, Declined("why " * 1_000))
    assert answer.declined is not None and len(answer.declined) == MAX_DECLINE_CHARS
    assert ClientAnswer.model_fields["declined"].metadata[0].max_length == MAX_DECLINE_CHARS


REPLY = st.text(alphabet="ab \n", max_size=12)


@given(earlier=st.lists(REPLY, max_size=3), final=REPLY, data=st.data())
def test_the_screen_always_ends_with_the_final_reply(
    earlier: list[str], final: str, data: st.DataObject
) -> None:
    """Whatever the attempts streamed (each a start of its own text, in batches), the text after
    the last marker is the final reply, whole and once; no marker when every attempt streamed a
    start of it."""
    items: list[StreamItem] = []
    streamed: list[str] = []
    for number, text in enumerate([*earlier, final], start=1):
        shown = text[: data.draw(st.integers(0, len(text)))]
        cuts = sorted(data.draw(st.lists(st.integers(0, len(shown)), max_size=3)))
        for start, end in zip([0, *cuts], [*cuts, len(shown)], strict=True):
            if end > start:
                items.append(tok(1, start, shown[start:end], attempt=number))
        streamed.append(shown)
    items.append(ev("model", 1, final))
    screen = render(*items)
    after = screen.rsplit(f"{RETRIED}\n", 1)[-1]
    assert after.rstrip("\n") == final.rstrip("\n")
    if all(final.startswith(s) for s in streamed):
        assert RETRIED not in screen
