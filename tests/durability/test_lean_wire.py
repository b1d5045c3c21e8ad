"""The lean wire form (``treadle.workflows.base.Lean``, ``lean_dump``): what crosses a boundary at
every step, and the carried state of a hand-over, leave out the fields at an empty default and
parse back to the same model, whatever their values."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.agent.messages.models import (
    AgentInput,
    ChatMessage,
    ModelRequest,
    ModelResponse,
    TokenUsage,
    ToolCall,
    ToolOutcome,
    ToolRequest,
    ToolResult,
    Turn,
)
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.base import WHOLE, at_empty_default, lean_dump

texts = st.one_of(st.none(), st.text(max_size=20))
counts = st.integers(min_value=0, max_value=3)
calls = st.builds(
    ToolCall,
    id=st.text(min_size=1, max_size=8),
    name=st.sampled_from(["read_file", "write_file"]),
    arguments=st.sampled_from(["{}", '{"path": "a"}', ""]),
)
messages = st.builds(
    ChatMessage,
    role=st.sampled_from(["user", "assistant", "tool"]),
    content=texts,
    tool_calls=st.lists(calls, max_size=2).map(tuple),
    tool_call_id=texts,
    content_ref=texts,
    content_chars=st.one_of(st.none(), counts),
)


@settings(max_examples=150, deadline=None)
@given(
    messages=st.lists(messages, max_size=3).map(tuple),
    conversation=texts,
    sent=counts,
    temperature=st.one_of(st.none(), st.sampled_from([0.0, 0.7])),
    flags=st.lists(st.booleans(), min_size=3, max_size=3),
    view=counts,
)
def test_a_model_request_parses_back_from_its_lean_form(
    messages: tuple[ChatMessage, ...],
    conversation: str | None,
    sent: int,
    temperature: float | None,
    flags: list[bool],
    view: int,
) -> None:
    request = ModelRequest(
        model="openai:m",
        messages=messages,
        conversation=conversation,
        conversation_messages=sent,
        temperature=temperature,
        logprobs=flags[0],
        stream=flags[1],
        require_tool=flags[2],
        view_from=view,
    )
    lean = request.model_dump_json()
    assert ModelRequest.model_validate_json(lean) == request
    whole = request.model_dump_json(context=WHOLE)
    assert ModelRequest.model_validate_json(whole) == request
    assert len(lean) <= len(whole)
    # An empty default says nothing and is left out; anything else is written.
    dumped = json.loads(lean)
    assert ("temperature" in dumped) == (temperature is not None)
    assert ("conversation_messages" in dumped) == (sent != 0)
    assert set(json.loads(whole)) == set(ModelRequest.model_fields)


@settings(max_examples=100, deadline=None)
@given(
    output=st.text(max_size=30),
    success=st.booleans(),
    ref=texts,
    paths=st.lists(st.text(min_size=1, max_size=5), max_size=2).map(tuple),
)
def test_a_tool_result_and_its_request_parse_back(
    output: str, success: bool, ref: str | None, paths: tuple[str, ...]
) -> None:
    result = ToolResult(
        success=success,
        output=output if success else f"ERROR: {output}",
        mutated_paths=paths,
        output_ref=ref,
    )
    assert ToolResult.model_validate_json(result.model_dump_json()) == result
    request = ToolRequest(call=ToolCall(id="c", name="read_file"), workspace="/w")
    lean = json.loads(request.model_dump_json())
    # A non-empty default (the allowed commands) is always written: a tool worker of another
    # version may default otherwise.
    assert lean["policy"]["command_allowlist"]
    assert ToolRequest.model_validate(lean) == request


events = st.builds(
    AgentEvent,
    kind=st.sampled_from(["model", "tool_finished", "decided"]),
    step=counts,
    state=st.sampled_from(["Planning", ""]),
    at=st.just(datetime(2026, 1, 1, tzinfo=UTC)),
    text=st.sampled_from(["", "a line"]),
    run=counts,
    tool=texts,
    ok=st.one_of(st.none(), st.booleans()),
    arguments=st.one_of(st.none(), st.just({}), st.just({"path": "a"})),
    commands=st.lists(st.sampled_from(["approve", ""]), max_size=2).map(tuple),
    prompt_tokens=st.one_of(st.none(), counts),
)


@settings(max_examples=150, deadline=None)
@given(message=messages, event=events)
def test_the_lean_form_leaves_out_exactly_the_fields_at_an_empty_default(
    message: ChatMessage, event: AgentEvent
) -> None:
    for model in (message, event):
        dumped = json.loads(model.model_dump_json())
        for name, field in type(model).model_fields.items():
            assert (name not in dumped) == at_empty_default(field, getattr(model, name)), name


def test_a_reply_and_an_event_leave_out_only_what_says_nothing() -> None:
    reply = ModelResponse(content="done", usage=TokenUsage(prompt_tokens=3, total_tokens=3))
    dumped = json.loads(reply.model_dump_json())
    assert dumped == {
        "content": "done",
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 0,
            "total_tokens": 3,
            "cached_tokens": 0,
            "estimated_tokens": 0,
        },
    }
    event = AgentEvent(
        kind="tool_finished",
        step=2,
        state="Acting",
        at=datetime(2026, 1, 1, tzinfo=UTC),
        ok=False,
    )
    lean = json.loads(event.model_dump_json())
    # ok=False is a fact here, not an empty default (the default is None).
    assert lean["ok"] is False and "tool" not in lean and "run" in lean
    assert AgentEvent.model_validate(lean) == event


def test_a_carried_run_parses_back_from_its_lean_dump() -> None:
    run = AgentRun.begin(
        AgentInput(task="t", model="openai:m", workspace="/w"), datetime(2026, 1, 1, tzinfo=UTC)
    )
    outcome = ToolOutcome.of(ToolCall(id="c1", name="read_file"), "text", success=True)
    run.memory = run.memory.model_copy(update={"history": (Turn(step=1, outcomes=(outcome,)),)})
    run.record(run.state, "Note", "", datetime(2026, 1, 1, tzinfo=UTC))
    run.tracker.record_tool_call("read_file", "a.txt", success=True, mutating=False)
    carried = lean_dump(run, exclude={"input"})
    assert "input" not in carried
    assert len(json.dumps(carried)) < len(run.model_dump_json(exclude={"input"}))
    back = AgentRun.model_validate({**carried, "input": run.input})
    assert back.model_dump() == run.model_dump()
