"""What a model is shown of a conversation longer than its window: a view of the record, cut
where it keeps each tool result with its call, and cut at the same place for many turns."""

from __future__ import annotations

from treadle.activities.store.view import view
from treadle.workflows.agent.messages.models import ChatMessage, ToolCall


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
