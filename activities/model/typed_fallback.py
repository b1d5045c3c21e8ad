"""Typed answers from servers without OpenAI's structured output: ``json_object`` and a schema.

A typed answer is asked for on the OpenAI protocol as ``response_format: {"type":
"json_schema"}`` (or, with ``output_mode: tool``, as a required ``final_answer`` call).
llama-cpp-python's server answers both with a 500; both llama.cpp servers take
``response_format: {"type": "json_object", "schema": ...}``, which constrains the reply's text
to the schema. The reply's text is then the answer, which the run judges as it judges any
text answer (``treadle.workflows.agent.parts.typed_answers.judge``).

The model activity asks a typed-answer request that fails with one of ``FALLBACK_STATUS`` again
at once, in the same attempt, in that form (as it does a refused stream), and remembers the
endpoint (its URL and model) that took it for as long as the worker runs: its later typed
answers are asked in this form from the start, and ``model.typed_answer.json_object`` is logged
once.
"""

from __future__ import annotations

from typing import Any

from treadle.workflows.agent.parts.typed_answers import FINAL_ANSWER_TOOL

__all__ = ["FALLBACK_STATUS", "json_object"]

FALLBACK_STATUS = frozenset({400, 422, 500, 501})
"""What a server says of a request form it cannot take (llama-cpp-python: 500). Not 401/403/404
(the key or the model), 408/429 (busy) or 502-504 (down): another form would not help."""


def json_object(body: dict[str, Any]) -> dict[str, Any] | None:
    """``body`` (an OpenAI chat-completions body) asking for its typed answer as ``json_object``
    with the schema (the other tools still offered, as ``auto``); ``None`` when it asks for
    none."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schema = response_format.get("json_schema", {}).get("schema")
        return {**body, "response_format": {"type": "json_object", "schema": schema}}
    if body.get("tool_choice") != "required":
        return None
    tools: list[dict[str, Any]] = body.get("tools", [])
    final = next((t for t in tools if t["function"]["name"] == FINAL_ANSWER_TOOL), None)
    if final is None:
        return None
    result = {k: v for k, v in body.items() if k not in ("tools", "tool_choice")}
    others = [t for t in tools if t is not final]
    if others:
        result |= {"tools": others, "tool_choice": "auto"}
    schema = final["function"]["parameters"]
    return result | {"response_format": {"type": "json_object", "schema": schema}}
