"""JSON Schema for typed answers: checking a schema, shaping it for the model, and saying what
a value breaks, deterministically (safe inside the workflow).

Validation is ``jsonschema``'s (the maintained validator, which the MCP client library already
brings): pure functions of the schema and the value, no format checks (they are off unless
asked for), and no remote ``$ref`` is ever fetched (an unresolvable one is a problem reported,
not a download). Errors are ordered by ``jsonschema``'s own relevance, a function of the schema
and the value alone, so a replay sends the model the same words.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    # Loaded once per worker rather than again in every run's sandbox: the validator classes
    # and the metaschemas they hold are read-only.
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators
    import referencing.exceptions

__all__ = ["ANSWER_KEY", "check", "problems", "unwrapped", "wire"]

ANSWER_KEY = "answer"
"""The one property of the object a non-object schema is wrapped in (tools and structured
output take object schemas only)."""
MAX_PROBLEMS = 3
MAX_PROBLEM_CHARS = 300


def _validator_class(schema: dict[str, Any]) -> Any:
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


MAX_SCHEMA_CHARS = 100_000
"""An output schema's size at most, as compact JSON: it is checked at every workflow task that
reads the run's config and sent with every model call; a larger one (5 MB) would hold each
task past Temporal's deadlock detector, and no model answers to it well."""


def check(schema: Any) -> dict[str, Any]:
    """``schema`` if it is a JSON Schema object (by its ``$schema``'s draft, else 2020-12) of
    at most ``MAX_SCHEMA_CHARS``; ``ValueError`` saying what is wrong otherwise."""
    if not isinstance(schema, dict):
        raise ValueError("output_schema must be a JSON Schema object")
    chars = len(json.dumps(schema, separators=(",", ":"), default=str))
    if chars > MAX_SCHEMA_CHARS:
        raise ValueError(
            f"output_schema is {chars:,} characters of JSON; at most {MAX_SCHEMA_CHARS:,}"
        )
    try:
        _validator_class(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "".join(f"[{part!r}]" for part in exc.absolute_path)
        at = f" at {where}" if where else ""
        raise ValueError(f"output_schema is not a valid JSON Schema: {exc.message}{at}") from None
    return schema


def _is_object_schema(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object"


def wire(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the model is given it: itself when it describes an object, else wrapped
    as ``{"answer": <value>}`` (its ``$defs`` moved up, so its ``$ref``s still resolve)."""
    if _is_object_schema(schema):
        return schema
    inner = {k: v for k, v in schema.items() if k not in ("$defs", "definitions", "$schema")}
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {ANSWER_KEY: inner},
        "required": [ANSWER_KEY],
        "additionalProperties": False,
    }
    for key in ("$schema", "$defs", "definitions"):
        if key in schema:
            wrapped[key] = schema[key]
    return wrapped


def unwrapped(schema: dict[str, Any], value: Any) -> Any:
    """The answer in what the model sent: ``{"answer": X}`` is ``X`` where the schema was
    wrapped (``wire``); anything else is taken as the answer itself."""
    if not _is_object_schema(schema) and isinstance(value, dict) and list(value) == [ANSWER_KEY]:
        return value[ANSWER_KEY]
    return value


def problems(schema: dict[str, Any], value: Any) -> list[str]:
    """What ``value`` breaks in ``schema``, most relevant first (at most three, each cut);
    empty when it validates."""
    validator = _validator_class(schema)(schema)
    try:
        errors = sorted(validator.iter_errors(value), key=jsonschema.exceptions.relevance)
    except (referencing.exceptions.Unresolvable, jsonschema.exceptions.SchemaError) as exc:
        return [f"the schema cannot be checked: {exc}"[:MAX_PROBLEM_CHARS]]
    found = []
    for error in errors[:MAX_PROBLEMS]:
        where = "$" + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
        )
        text = f"at {where}: {error.message}"
        if len(text) > MAX_PROBLEM_CHARS:
            text = text[: MAX_PROBLEM_CHARS - 1] + "…"
        found.append(text)
    if len(errors) > MAX_PROBLEMS:
        found.append(f"and {len(errors) - MAX_PROBLEMS} more")
    return found
