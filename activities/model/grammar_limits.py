"""Schemas as a grammar-constrained server can take them: no repetition bound past its limit.

Servers that constrain sampling with a grammar built from a JSON Schema (llama.cpp's
``llama-server`` for tool calls and ``response_format``, llama-cpp-python's server) turn a
length bound into a repetition: ``maxLength: N`` becomes ``char{m,N}``. llama.cpp refuses
repetitions past ``MAX_REPETITION_THRESHOLD`` (2,000, in ``src/llama-grammar.cpp``, also the
limit on a rule repeated inside a repetition): the request fails with ``400 failed to parse
grammar``. llama-cpp-python's own converter nests one group per allowed repetition, so
``maxLength: 20000`` overflows its parser's stack and the server process dies.

So a schema leaves the worker with every such bound above ``REPETITION_LIMIT`` taken out, and
said in words in the field's ``description`` instead, so the model still knows it. Nothing is
lost: the tool still checks the bound (a catalogue tool's argument model, an MCP server its
own), and a longer value comes back as an ``ERROR:`` observation the model can act on.
"""

from __future__ import annotations

from typing import Any

__all__ = ["REPETITION_LIMIT", "bounds_over_limit", "offered"]

REPETITION_LIMIT = 1_000
"""The largest repetition bound a schema is sent with: half llama.cpp's 2,000, as builds
differ in how they count (a bound of exactly 2,000 was refused by one)."""

BOUNDS = {
    "maxLength": "at most {} characters",
    "minLength": "at least {} characters",
    "maxItems": "at most {} items",
    "minItems": "at least {} items",
}
"""The keywords a grammar turns into a repetition, and how each is said in words."""

_DATA = frozenset({"default", "examples", "const", "enum"})
"""Keywords whose values are data, not schemas: never rewritten."""


def offered(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every repetition bound above ``REPETITION_LIMIT`` said in its
    ``description`` instead (a copy; ``schema`` itself is untouched)."""
    result: dict[str, Any] = _offered(schema)
    return result


def _offered(node: Any) -> Any:
    if isinstance(node, list):
        return [_offered(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {
        key: value if key in _DATA else _offered(value)
        for key, value in node.items()
        if not _over(key, value)
    }
    said = [BOUNDS[key].format(value) for key, value in node.items() if _over(key, value)]
    if said:
        description = result.get("description")
        words = "; ".join(said)
        if isinstance(description, str) and description:
            stop = "." if description.endswith(".") else ""
            words = f"{description.removesuffix('.')} ({words}){stop}"
        result["description"] = words
    return result


def _over(key: str, value: Any) -> bool:
    return (
        key in BOUNDS
        and isinstance(value, int)
        and not isinstance(value, bool)
        and value > REPETITION_LIMIT
    )


def bounds_over_limit(schema: Any, where: str = "$") -> list[str]:
    """Where ``schema`` holds a repetition bound above ``REPETITION_LIMIT`` (``$.properties.
    what.maxLength``); empty when a grammar-constrained server can take it."""
    found: list[str] = []
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            found += bounds_over_limit(item, f"{where}[{index}]")
    elif isinstance(schema, dict):
        for key, value in schema.items():
            if _over(key, value):
                found.append(f"{where}.{key}")
            elif key not in _DATA:
                found += bounds_over_limit(value, f"{where}.{key}")
    return found
