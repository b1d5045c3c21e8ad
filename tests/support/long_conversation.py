"""A long conversation written to a store the way a run writes it: the system prompt and the
task, then one segment per step (the model's call, the tool's output stored by reference)."""

from __future__ import annotations

from dataclasses import dataclass

from treadle.activities.store.conversation import ConversationStore
from treadle.workflows.agent.messages.models import ChatMessage, ToolCall


@dataclass(frozen=True)
class Written:
    """The conversation's head after each step (``heads[0]``: the task alone) and every
    message with its stored contents read back, as the model would be shown them whole."""

    heads: tuple[str, ...]
    record: tuple[ChatMessage, ...]

    def count(self, step: int) -> int:
        """How many messages the conversation holds after ``step`` steps."""
        return 2 + 2 * step


def observation(step: int, chars: int) -> str:
    return f"output of step {step}: " + f"{step:06d} " * (chars // 7)


def call(step: int) -> ChatMessage:
    arguments = f'{{"path": "o{step}.txt"}}'
    read = ToolCall(id=f"c{step}", name="read_file", arguments=arguments)
    return ChatMessage(role="assistant", tool_calls=(read,))


async def write_conversation(store: ConversationStore, steps: int, chars: int) -> Written:
    """``steps`` steps whose tool outputs are ``chars`` characters long."""
    first = (
        ChatMessage(role="system", content="You read files."),
        ChatMessage(role="user", content="Read every file."),
    )
    head = await store.extend(None, first)
    heads = [head]
    record = list(first)
    for step in range(steps):
        text = observation(step, chars)
        ref = await store.put_text(text)
        stored = ChatMessage(role="tool", tool_call_id=f"c{step}", content_ref=ref)
        head = await store.extend(head, (call(step), stored))
        heads.append(head)
        record += [call(step), ChatMessage(role="tool", tool_call_id=f"c{step}", content=text)]
    return Written(tuple(heads), tuple(record))
