"""Values read from a provider's JSON, made fit to leave the activity.

Text as valid Unicode: JSON may spell UTF-16 surrogates on their own (``"\\ud800"``), and
Python's decoder keeps them as lone surrogate code points, which no UTF-8 encoder accepts:
Temporal's JSON converter cannot serialise a result holding one (nor the protobuf encoder a
failure message), so the attempt would fail on the way out, every time. Every string a protocol
module returns, and every message the activity raises, goes through here first; each lone
surrogate becomes U+FFFD. (A surrogate *escaped* inside JSON text, as OpenAI's tool-call
arguments are, is valid text and stays as it is: the workflow checks arguments when it decodes
them.) Text that arrives in pieces, as a stream sends it, is joined first (``rejoined``): a
surrogate pair split between two pieces is one character, as it is in a body decoded whole.

Token counts as integers a run can add up and price: a count that is not a whole number from 0 to
``MAX_TOKEN_COUNT`` breaks the protocol (``ModelResponseError``); a missing or ``null`` one is 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from treadle.activities.errors import ModelResponseError
from treadle.activities.model import grammar_limits
from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.models import ModelRequest, ModelResponse

__all__ = [
    "MAX_TOKEN_COUNT",
    "REPLACEMENT",
    "rejoined",
    "token_count",
    "well_formed",
    "well_formed_json",
]

DEFAULT_MAX_TOKENS = 4096
"""The output limit every call sends when neither the config nor a budget sets one: a model that
never stops generating is cut by its server, not by the activity's timeout on every attempt."""

MAX_TOKEN_COUNT = 2**53
"""The largest token count believed (every integer up to it is exact as a float, so prices and
budgets computed from it stay exact)."""

REPLACEMENT = "\ufffd"
"""What a lone surrogate becomes: the Unicode replacement character."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD (others are untouched)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def rejoined(text: str) -> str:
    """``text`` built from pieces decoded apart, made valid: a surrogate pair split between two
    pieces becomes its one character again (as ``json`` decodes a pair that arrives whole), and
    every other surrogate U+FFFD, as ``well_formed`` does."""
    if text.isascii():
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def well_formed_json(value: Any) -> Any:
    """A decoded JSON value with every string in it (object keys included) ``well_formed``.

    Deeply nested values may raise ``RecursionError``, as ``json`` itself does; the protocol
    modules turn that into a ``ModelResponseError``.
    """
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, list):
        return [well_formed_json(item) for item in value]
    if isinstance(value, dict):
        return {well_formed_json(key): well_formed_json(item) for key, item in value.items()}
    return value


def token_count(usage: Mapping[str, Any], field: str, provider: str) -> int:
    """``usage[field]`` as a token count: 0 when missing or ``null``, a whole number
    (``12``, ``12.0`` or ``"12"``) from 0 to ``MAX_TOKEN_COUNT``, else ``ModelResponseError``."""
    value = usage.get(field)
    if value is None:
        return 0
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 17:
        value = int(value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    # The range check comes first: it turns away inf and nan, which int() cannot take.
    if number and 0 <= value <= MAX_TOKEN_COUNT and value == int(value):
        return int(value)
    raise ModelResponseError(f"{provider} response usage.{field} is not a token count")


def parse_checked(
    payload: Any, provider: str, parse: Callable[[dict[str, Any], str], ModelResponse]
) -> ModelResponse:
    """Run a protocol's ``parse`` on a response body made well-formed first.

    Returns a response fit for Temporal's JSON converter (no lone surrogate in any string) or
    raises ``ModelResponseError``; nothing else, whatever the body.
    """
    if not isinstance(payload, dict):
        raise ModelResponseError(f"{provider} response is not a JSON object")
    try:
        return parse(well_formed_json(payload), provider)
    except RecursionError:
        raise ModelResponseError(f"{provider} response is nested too deeply") from None


def offered_schemas(request: ModelRequest) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, JSON Schema) of every tool the request offers: the catalogue's by
    name, then those it carries with their schemas (MCP tools), a name offered once; each
    schema within what grammar-constrained servers take (``grammar_limits``)."""
    offered = [
        (
            TOOLS[name].name,
            TOOLS[name].description,
            grammar_limits.offered(TOOLS[name].json_schema()),
        )
        for name in request.tools
        if name in TOOLS
    ]
    seen = {name for name, _, _ in offered}
    for schema in request.tool_schemas:
        if schema.name not in seen:
            seen.add(schema.name)
            parameters = grammar_limits.offered(schema.parameters)
            offered.append((schema.name, schema.description, parameters))
    return offered
