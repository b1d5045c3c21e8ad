"""Typed answers: a run whose config names an ``output_schema`` ends only with JSON that
validates against it. Pure decisions; the engine acts on them.

How the model is asked (``ask``): on the OpenAI protocol the provider's structured output
(``response_format`` with the schema); otherwise, or with ``output_mode: tool``, a
``final_answer`` tool whose parameters are the schema, with a tool call required, so the model
answers by calling it. A reply is judged (``judge``): the ``final_answer`` call's arguments, or
the reply's text when it calls no tool, parsed as JSON and validated. An invalid answer goes
back to the model with what is wrong (a note, or the call's ``ERROR:`` result), at most
``output_retries`` times in a turn (``corrections`` counts them in the history); then the run
ends in error. The accepted answer is its JSON text (``final_answer``) and, parsed,
``AgentResult.output``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from treadle.workflows.agent.messages import json_schema
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    ModelRequest,
    ModelResponse,
    ToolOutcome,
    ToolSchema,
    Turn,
)
from treadle.workflows.agent.messages.providers import resolve

__all__ = [
    "FINAL_ANSWER_TOOL",
    "Accepted",
    "Invalid",
    "ask",
    "corrections",
    "judge",
    "output_of",
]

FINAL_ANSWER_TOOL = "final_answer"
INVALID = "The final answer does not match the required JSON Schema"
"""How every correction starts (``corrections`` counts them)."""


@dataclass(frozen=True)
class Accepted:
    """A typed answer that validates: its JSON text."""

    text: str


@dataclass(frozen=True)
class Invalid:
    """A typed answer that does not: the turn that tells the model, and the problem."""

    turn: Turn
    problem: str


def uses_tool(config: AgentConfig, model: str) -> bool:
    """The typed answer is asked for as a ``final_answer`` call (else as structured output)."""
    native = config.output_mode != "tool" and resolve(model)[0].protocol == "openai"
    return not native


def ask(config: AgentConfig, request: ModelRequest) -> ModelRequest:
    """``request`` (to its ``model``) asking for the typed answer, if the run wants one."""
    schema = config.output_schema
    if schema is None:
        return request
    shown = json_schema.wire(schema)
    others = tuple(s for s in request.tool_schemas if s.name != FINAL_ANSWER_TOOL)
    if not uses_tool(config, request.model):
        return request.model_copy(
            update={"output_schema": shown, "require_tool": False, "tool_schemas": others}
        )
    tool = ToolSchema(
        name=FINAL_ANSWER_TOOL,
        description="Give the final answer, as this tool's arguments: it ends the task. Call "
        "the other tools first if you need them.",
        parameters=shown,
    )
    return request.model_copy(
        update={"output_schema": None, "require_tool": True, "tool_schemas": (*others, tool)}
    )


def judge(config: AgentConfig, response: ModelResponse, step: int) -> Accepted | Invalid | None:
    """The reply as a typed answer: accepted, invalid, or ``None`` when it is no answer (tool
    calls without ``final_answer``; an empty reply, which the loop handles as any)."""
    schema = config.output_schema
    if schema is None:
        return None
    final = next((c for c in response.tool_calls if c.name == FINAL_ANSWER_TOOL), None)
    if final is None and response.tool_calls:
        return None
    text = final.arguments if final is not None else _unfenced((response.content or "").strip())
    if final is None and not text:
        return None
    try:
        value = json.loads(text or "{}")
    except (ValueError, RecursionError) as exc:
        problem = f"it is not JSON ({exc})"[:300]
    else:
        answer = json_schema.unwrapped(schema, value)
        found = json_schema.problems(schema, answer)
        if not found:
            return Accepted(json.dumps(answer, ensure_ascii=False))
        problem = "; ".join(found)
    how = (
        f"Call {FINAL_ANSWER_TOOL} again with arguments that match its schema."
        if final is not None
        else "Reply with only the JSON value, matching the schema."
    )
    note = f"{INVALID}: {problem}. {how}"
    if final is None:
        return Invalid(Turn(step=step, assistant_text=response.content, note=note), problem)
    outcomes = tuple(
        ToolOutcome.of(
            call,
            f"ERROR: {note}"
            if call is final
            else f"ERROR: not run: {FINAL_ANSWER_TOOL} was called in the same reply",
            success=False,
        )
        for call in response.tool_calls
    )
    return Invalid(Turn(step=step, assistant_text=response.content, outcomes=outcomes), problem)


def corrections(history: tuple[Turn, ...], since_step: int) -> int:
    """Typed answers sent back since ``since_step`` (the turn's start)."""
    return sum(
        1
        for turn in history
        if turn.step > since_step
        and (
            (turn.note or "").startswith(INVALID)
            or any(o.observation.startswith(f"ERROR: {INVALID}") for o in turn.outcomes)
        )
    )


def output_of(config: AgentConfig, final_answer: str | None) -> Any:
    """``AgentResult.output``: the accepted typed answer, parsed (``None`` without one)."""
    if config.output_schema is None or final_answer is None:
        return None
    try:
        return json.loads(final_answer)
    except ValueError:
        return None


def _unfenced(text: str) -> str:
    """Text without the Markdown code fence some models put around JSON."""
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        body = text[3:-3]
        first, _, rest = body.partition("\n")
        return (rest if first.strip().isalpha() or not first.strip() else body).strip()
    return text
