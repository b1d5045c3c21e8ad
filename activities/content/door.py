"""Content through the store: what an activity hands the workflow is stored above one small
threshold and travels as a reference and a preview; what the workflow hands an activity is
resolved here from those references. One threshold, one way in, one way out.

Out of an activity (into the history):

- ``reply``: the model's reply. Every string value of a tool call's JSON arguments longer than
  ``STORE_OVER_CHARS`` (a file's content, a patch) becomes a marker
  (``treadle.workflows.agent.messages.content_refs``: key, length, preview); short values (a path,
  a command) stay inline, so the workflow can check the call, derive its target, show it for
  approval and track progress. The reply's text over the threshold is stored too (``content_ref``,
  with a preview of its start and end) when the reply calls tools. A reply without tool calls is an
  answer (the run's, or a thread turn's) and stays whole: it is the run's result
  (``AgentResult.answer``), which the workflow hands back as it is and cannot read from the
  store.
- ``tool_output``: a tool's output (built-in, your own, MCP) over the threshold, with a preview
  of its start and end.

Into an activity (out of the history): ``resolve_arguments`` (``run_tool``), ``resolve_value``
(``call_mcp_tool``'s JSON object) and ``resolve_message`` (the conversation store, when it
rebuilds a conversation for the model or for ``export``) put the stored text back.

Everything stored is redacted first (the worker's ``Redactor``, ``redaction.current()``), so a
preview cut from it never holds a secret's fragment, and its key names what is stored. Without a
store (a worker started without one) content stays inline, as before the store existed.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from temporalio import activity

from treadle.activities.content import redaction
from treadle.activities.errors import ModelConfigError, StoreUnavailable
from treadle.activities.offload import REDACT_OVER_CHARS, off_loop
from treadle.workflows.agent.messages import content_refs
from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.models import ChatMessage, ModelResponse, ToolCall, ToolResult
from treadle.workflows.agent.parts.typed_answers import FINAL_ANSWER_TOOL

__all__ = [
    "PREVIEW_HEAD_CHARS",
    "PREVIEW_TAIL_CHARS",
    "STORE_OVER_CHARS",
    "NoStore",
    "TextStore",
    "output_preview",
    "reply",
    "resolve_arguments",
    "resolve_message",
    "resolve_value",
    "tool_output",
]

STORE_OVER_CHARS = 512
"""Longer content is stored and referenced: a tool call's argument value, a reply's text, a
tool's output. Small enough that no step's history grows with what it writes or reads; large
enough that a marker (~150 characters) is always smaller than what it replaces."""
PREVIEW_HEAD_CHARS = 240
PREVIEW_TAIL_CHARS = 120


class TextStore(Protocol):
    """What the door needs of the store (``ConversationStore`` has it)."""

    async def put_text(self, text: str) -> str: ...

    async def get_text(self, key: str) -> str: ...


class NoStore(ModelConfigError):
    """Content stored by reference reached a worker that keeps no store."""

    def __init__(self) -> None:
        super().__init__(
            "the run refers to content in the conversation store, but this worker keeps none "
            "(start it with --store DIR, the same store as the worker that wrote it)"
        )


async def _put(store: TextStore, text: str) -> tuple[str, str]:
    """``text`` redacted (a long one in a thread: ``treadle.activities.offload``) and stored:
    its key and the redacted text."""
    clean = await off_loop(REDACT_OVER_CHARS, len(text), redaction.current(), text)
    return await store.put_text(clean), clean


# --------------------------------------------------------------------------------------------
# Out: what leaves an activity
# --------------------------------------------------------------------------------------------


async def _stored_values(store: TextStore, value: Any) -> Any:
    """Decoded JSON with every long string replaced by its marker."""
    if isinstance(value, str):
        if len(value) <= STORE_OVER_CHARS:
            return value
        key, clean = await _put(store, value)
        return content_refs.marker(key, clean)
    if isinstance(value, dict):
        return {k: await _stored_values(store, v) for k, v in value.items()}
    if isinstance(value, list):
        return [await _stored_values(store, v) for v in value]
    return value


async def _call(store: TextStore, call: ToolCall) -> ToolCall:
    """``call`` with its long argument values stored (the same call when none is long)."""
    if len(call.arguments) <= STORE_OVER_CHARS:
        return call
    try:
        decoded = json.loads(call.arguments)
    except (ValueError, RecursionError):
        return call  # not JSON: the workflow's check says so, and nothing runs
    if not isinstance(decoded, dict) or next(content_refs.refs_in(decoded), None) is not None:
        # Markers the model wrote itself are left as written: a marker names content by its
        # hash, so it can only name content the model already has.
        return call
    stored = await _stored_values(store, decoded)
    if stored == decoded:
        return call
    arguments = json.dumps(stored, separators=(",", ":"), ensure_ascii=False)
    return call.model_copy(update={"arguments": arguments})


async def reply(store: TextStore | None, response: ModelResponse) -> ModelResponse:
    """The model's reply as it may enter the history (see the module docstring)."""
    if store is None:
        return response
    calls = tuple(
        [c if _whole_in_workflow(c) else await _call(store, c) for c in response.tool_calls]
    )
    update: dict[str, Any] = {}
    if any(new is not old for new, old in zip(calls, response.tool_calls, strict=True)):
        update["tool_calls"] = calls
    text = response.content
    if response.tool_calls and text is not None and len(text) > STORE_OVER_CHARS:
        key, clean = await _put(store, text)
        update |= {
            "content": output_preview(clean),
            "content_ref": key,
            "content_chars": len(clean),
        }
    return response.model_copy(update=update) if update else response


def _whole_in_workflow(call: ToolCall) -> bool:
    """A call the workflow itself carries out (``delegate``'s task, ``ask_client``'s question,
    ``wait``) or a typed answer's ``final_answer`` (the run's answer, which the workflow
    validates): it keeps its arguments whole, since the workflow cannot read the store."""
    spec = TOOLS.get(call.name)
    return call.name == FINAL_ANSWER_TOOL or (spec is not None and spec.in_workflow)


async def tool_output(store: TextStore | None, result: ToolResult) -> ToolResult:
    """A tool's result as it may enter the history: an output over ``STORE_OVER_CHARS`` is
    stored whole, and the history carries its preview and key, so a 50 KB output costs a step
    no more than a 2 KB one."""
    if store is None or len(result.output) <= STORE_OVER_CHARS:
        return result
    # Redacted whole before the preview cuts it: a cut key-shaped string would no longer look
    # like one to the door at the activity's boundary.
    try:
        key, output = await _put(store, result.output)
    except StoreUnavailable as exc:
        # The tool has run: failing now would run it again once the store is back (a command
        # twice). The model gets the head and the tail, and is told the rest was not kept.
        activity.logger.warning("tool.output_not_stored reason=%s", exc)
        output = redaction.current()(result.output)
        return result.model_copy(update={"output": unstored_preview(output, exc.where)})
    return result.model_copy(
        update={"output": output_preview(output), "output_ref": key, "output_chars": len(output)}
    )


def unstored_preview(text: str, where: str) -> str:
    """A long output the store could not take: its start and its end, saying what was lost."""
    cut = len(text) - PREVIEW_HEAD_CHARS - PREVIEW_TAIL_CHARS
    return (
        f"{text[:PREVIEW_HEAD_CHARS]}\n[... {cut} characters not kept: {where} was unreachable "
        f"...]\n{text[-PREVIEW_TAIL_CHARS:]}"
    )


def output_preview(text: str) -> str:
    """The start and the end of a long text (the end holds a command's verdict), for the
    trace, progress tracking and summaries; the model reads the whole text from the store."""
    if len(text) <= PREVIEW_HEAD_CHARS + PREVIEW_TAIL_CHARS:
        return text
    cut = len(text) - PREVIEW_HEAD_CHARS - PREVIEW_TAIL_CHARS
    return (
        f"{text[:PREVIEW_HEAD_CHARS]}\n[... {cut} characters stored, the model sees them ...]\n"
        f"{text[-PREVIEW_TAIL_CHARS:]}"
    )


# --------------------------------------------------------------------------------------------
# In: what the workflow hands an activity
# --------------------------------------------------------------------------------------------


async def resolve_value(store: TextStore | None, value: Any) -> Any:
    """Decoded JSON with every marker replaced by the text it names."""
    if content_refs.is_ref(value):
        if store is None:
            raise NoStore
        return await store.get_text(value[content_refs.REF])
    if isinstance(value, dict):
        return {k: await resolve_value(store, v) for k, v in value.items()}
    if isinstance(value, list):
        return [await resolve_value(store, v) for v in value]
    return value


async def resolve_arguments(store: TextStore | None, arguments: str) -> str:
    """A call's raw JSON arguments with every marker's text in place (the same text when it
    holds none)."""
    if not content_refs.holds_refs(arguments):
        return arguments
    whole = await resolve_value(store, json.loads(arguments))
    return json.dumps(whole, separators=(",", ":"), ensure_ascii=False)


async def resolve_message(store: TextStore | None, message: ChatMessage) -> ChatMessage:
    """A conversation's message with its stored content and its calls' stored arguments read
    back: what the model is shown, and what ``export`` writes."""
    update: dict[str, Any] = {}
    if message.content_ref is not None:
        if store is None:
            raise NoStore
        update |= {"content": await store.get_text(message.content_ref), "content_ref": None}
    if any(content_refs.holds_refs(c.arguments) for c in message.tool_calls):
        update["tool_calls"] = tuple(
            [
                c.model_copy(update={"arguments": await resolve_arguments(store, c.arguments)})
                for c in message.tool_calls
            ]
        )
    return message.model_copy(update=update) if update else message
