"""What a model is shown of a conversation longer than its window: a view of the record, cut
where it keeps each tool result with its call, and cut at the same place for many turns; and
planned from the end of the stored record, so a call late in a long conversation reads what
one early in it reads."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.testing import ActivityEnvironment

from tests.support.counting import CountingBlobs
from tests.support.long_conversation import call, observation, write_conversation
from treadle.activities.model.activity import ModelActivities, ProviderSettings, http_client
from treadle.activities.store.blobs import BlobCorrupt, FileBlobStore
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.store.tail import view_of
from treadle.activities.store.view import (
    CUT_STEP_SHARE,
    RECENT_SHARE,
    SUMMARY_SHARE,
    View,
    summary_line,
    tokens,
    view,
)
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
)


def _conversation(turns: int, chars: int = 400) -> tuple[ChatMessage, ...]:
    messages = [ChatMessage(role="system", content="sys"), ChatMessage(role="user", content="task")]
    for i in range(turns):
        call = ToolCall(id=f"c{i}", name="read_file", arguments='{"path": "a"}')
        messages += [
            ChatMessage(role="user", content=f"message {i} " + "w" * chars),
            ChatMessage(role="assistant", content=None, tool_calls=(call,)),
            ChatMessage(role="tool", tool_call_id=f"c{i}", content="r" * chars),
            ChatMessage(role="assistant", content=f"answer {i}"),
        ]
    return tuple(messages)


def test_a_conversation_within_the_window_is_shown_whole() -> None:
    """Nothing is left out while the conversation fits."""
    messages = _conversation(5)
    shown = view(messages, 100_000)
    assert (shown.messages, shown.left_out, shown.summary) == (messages, 0, None)


def test_a_longer_one_is_the_task_a_summary_and_the_recent_messages() -> None:
    """The system prompt and the task first, one summary message, then the latest messages
    verbatim and in order; never a tool result without its call."""
    messages = _conversation(100)
    shown = view(messages, 4_000)
    assert shown.messages[:2] == messages[:2]
    note = shown.messages[2]
    recent = shown.messages[3:]
    assert note.role == "user"
    assert f"its first {shown.left_out} messages" in (note.content or "")
    assert len(note.content or "") <= 4_000 * 4 // 32 + 200  # the summary's share of the window
    assert recent == messages[len(messages) - len(recent) :]
    assert recent[0].role != "tool"
    assert shown.left_out == len(messages) - 2 - len(recent)
    assert sum(len(m.content or "") for m in recent) // 4 <= 4_000


def test_the_cut_stays_put_as_the_conversation_grows() -> None:
    """The view's start moves in steps of a quarter window, not at every turn: consecutive turns
    are mostly shown with the same summary (a provider's prompt cache keeps working)."""
    summaries = [view(_conversation(turns), 8_000).summary for turns in range(60, 90)]
    assert len(set(summaries)) <= 8


def test_reflections_summary_comes_first_and_what_it_summarised_is_left_out() -> None:
    """With Reflecting's summary in the record, the model is shown it after the task, then the
    record from the first turn kept verbatim."""
    messages = (*_conversation(3), ChatMessage(role="user", content="Summary of steps 1-2"))
    start = 2 + 4 * 2  # the third turn's first message
    shown = view(messages, None, start, len(messages) - 1)
    assert [m.content for m in shown.messages[:3]] == ["sys", "task", "Summary of steps 1-2"]
    assert shown.messages[3:] == messages[start:-1]
    assert shown.left_out == 8


# The view planned from the end of the conversation


def _walked_from_the_start(
    messages: tuple[ChatMessage, ...], window: int | None, start: int, summary_at: int
) -> View:
    """The view as it was first written: the conversation rearranged, then every cut point
    tried from its start; the summary's lines the latest that fit."""
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
    cut = None
    crossed = False
    for index in range(first, len(messages)):
        crossed = crossed or before // step != (before - costs[index - 1]) // step
        if crossed and messages[index].role != "tool":
            if total - before <= window * RECENT_SHARE:
                cut = index
                break
            crossed = False
        before += costs[index]
    if cut is None:
        last = (i for i in range(len(messages) - 1, first - 1, -1) if messages[i].role != "tool")
        cut = next(last, first)
    older = messages[first:cut]
    if not older:
        return View(messages, left_out=skipped)
    lines = [summary_line(m) for m in older]
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line) + 1
        if size > int(window * SUMMARY_SHARE) * 4:
            break
        kept.append(line)
    left = len(lines) - len(kept)
    head = [f"- ({left} earlier messages not summarised)"] if left else []
    summary = "\n".join([*head, *reversed(kept)])
    note = ChatMessage(
        role="user",
        content=(
            f"[The conversation is longer than this model's context: its first {len(older)} "
            "messages after the task are summarised here, one line each; the rest follow "
            f"verbatim.]\n{summary}"
        ),
    )
    return View((*messages[:first], note, *messages[cut:]), skipped + len(older), summary)


_MESSAGE = st.tuples(
    st.sampled_from(["user", "assistant", "tool", "tool", "call"]), st.integers(0, 2_000)
)


def _made(system: bool, shapes: list[tuple[str, int]]) -> tuple[ChatMessage, ...]:
    messages = [ChatMessage(role="system", content="s")] if system else []
    for i, (role, size) in enumerate(shapes):
        if role == "call":
            call = ToolCall(id=f"c{i}", name="read_file", arguments="a" * (size // 10))
            messages.append(ChatMessage(role="assistant", tool_calls=(call,)))
        else:
            text = (f"{i} " + "w  \n" * (size // 4))[:size]
            messages.append(ChatMessage(role=role, content=text))  # type: ignore[arg-type]
    return tuple(messages)


@settings(max_examples=400, deadline=None)
@given(
    system=st.booleans(),
    shapes=st.lists(_MESSAGE, max_size=120),
    window=st.one_of(st.none(), st.integers(1, 20_000)),
    start=st.integers(0, 130),
    summary_at=st.integers(0, 130),
)
def test_the_view_planned_from_the_end_is_the_one_every_cut_point_tried_from_the_start_gives(
    system: bool,
    shapes: list[tuple[str, int]],
    window: int | None,
    start: int,
    summary_at: int,
) -> None:
    """Planning reads the conversation from its end back as far as the view reaches, yet cuts
    where trying every cut point from the start cuts, with the same summary, whatever the
    conversation, the window and Reflecting's summary."""
    messages = _made(system, shapes)
    want = _walked_from_the_start(messages, window, start, summary_at)
    assert view(messages, window, start, summary_at) == want


async def test_a_stored_conversation_is_shown_as_the_view_of_its_whole_record(
    tmp_path: Path,
) -> None:
    """Read from its end (and its first segment), a stored conversation and the messages
    added after it are shown what ``view`` makes of the whole, for every window and with
    Reflecting's summary anywhere: a worker that never saw the conversation, and one that has
    just read it, alike."""
    rng = random.Random(39)
    blobs = FileBlobStore(tmp_path)
    writer = ConversationStore(blobs)
    head = await writer.extend(None, _made(True, [("user", 40)]))
    record = list(_made(True, [("user", 40)]))
    for _ in range(150):
        shapes = [(rng.choice(["user", "assistant", "tool", "call"]), rng.randint(0, 3_000))]
        shapes += [("tool", rng.randint(0, 3_000))] * rng.randint(0, 2)
        made = _made(False, shapes)
        stored = []
        for message in made:
            if message.role == "tool" and len(message.content or "") > 512:
                ref = await writer.put_text(message.content or "")
                message = message.model_copy(update={"content": None, "content_ref": ref})
            stored.append(message)
        head = await writer.extend(head, tuple(stored))
        record += made
    added = _made(False, [("user", 900), ("call", 300)])
    whole = (*record, *added)
    warm = ConversationStore(blobs)
    for _ in range(60):
        window = rng.choice([None, 300, 2_000, 8_000, 30_000, 200_000])
        start, summary_at = (0, 0) if rng.random() < 0.5 else (
            rng.randint(0, len(whole)), rng.randint(0, len(whole) + 2)
        )  # fmt: skip
        want = view(whole, window, start, summary_at)
        cold = ConversationStore(blobs)
        for reader in (cold, warm):
            got = await view_of(reader, head, len(record), added, window, start, summary_at)
            assert got == want, (window, start, summary_at)


async def test_a_stored_conversation_that_is_not_the_length_the_run_expects_is_refused(
    tmp_path: Path,
) -> None:
    """A head with fewer or more messages than the run counted is a corrupt store, never a
    view of some other conversation."""
    store = ConversationStore(FileBlobStore(tmp_path))
    written = await write_conversation(store, 3, 1_000)
    with pytest.raises(BlobCorrupt, match="holds 8 messages; the run expected 9"):
        await view_of(store, written.heads[3], 9, (), 1_000)


WINDOW = 20_000
"""A model's window in the tests below: 80,000 characters, a long conversation's tenth."""
OBSERVATION = 2_000


async def _call(
    models: ModelActivities, name: str, head: str, count: int, added: tuple[ChatMessage, ...]
) -> ModelResponse:
    request = ModelRequest(
        model=f"openai:{name}",
        messages=added,
        conversation=head,
        conversation_messages=count,
        tools=("read_file",),
        context_window_tokens=WINDOW,
    )
    response: ModelResponse = await ActivityEnvironment().run(models.call_model, request)
    return response


async def test_a_call_late_in_a_long_conversation_reads_what_one_early_in_it_reads(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """A worker that never saw the conversation reads the same bytes of the store for a call
    at step 400 (an 800 KB conversation) as at step 60 (120 KB): the view's first segment, the
    segments back to its summary's start and the outputs it shows, never the whole record.
    The model is shown the system prompt, the task, the summary and the latest outputs whole;
    the worker's next call reads only what was written since."""
    blobs = FileBlobStore(tmp_path)
    written = await write_conversation(ConversationStore(blobs), 401, OBSERVATION)
    name = f"late-{uuid.uuid4().hex[:8]}"
    model_server.add_model(name, [{"content": "read"}] * 3, order="arrival")
    settings = ProviderSettings.from_env({"OPENAI_BASE_URL": model_server.base_url})
    read: dict[int, CountingBlobs] = {}
    async with http_client() as http:
        for step in (60, 400):
            read[step] = counted = CountingBlobs(blobs)
            models = ModelActivities(settings, http, ConversationStore(counted))
            added = (ChatMessage(role="user", content=f"step {step}: go on"),)
            await _call(models, name, written.heads[step], written.count(step), added)
        shown = model_server.requests_for(name)[-1].body["messages"]
        assert [m["content"] for m in shown[:2]] == ["You read files.", "Read every file."]
        assert "longer than this model's context" in shown[2]["content"]
        assert shown[-2]["content"] == observation(399, OBSERVATION)
        assert shown[-1]["content"] == "step 400: go on"
        assert sum(len(m.get("content") or "") for m in shown) <= WINDOW * 4

        early, late = read[60], read[400]
        assert early.reads and late.reads
        assert abs(late.bytes - early.bytes) <= early.bytes // 10, (early.bytes, late.bytes)
        assert late.bytes <= 2 * WINDOW * 4  # the view (3/4 of the window) and its index
        assert written.heads[1] not in late.reads and written.heads[100] not in late.reads

        # The same worker's next call: what was written since its last (its own segment, which
        # it reads back, and the new output) and nothing it read before.
        text = observation(400, OBSERVATION)
        ref = await ConversationStore(blobs).put_text(text)
        late.reset()
        added = (call(400), ChatMessage(role="tool", tool_call_id="c400", content_ref=ref))
        models = ModelActivities(settings, http, ConversationStore(late))
        first = await _call(models, name, written.heads[400], written.count(400), added[:1])
        assert first.conversation is not None
        late.reset()
        await _call(models, name, first.conversation, written.count(400) + 1, added[1:])
        assert sorted(late.reads) == sorted([first.conversation, ref])
