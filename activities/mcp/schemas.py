"""MCP tools' input schemas, checked and stored once: the workflow carries a key per tool.

A schema travels to the provider with every model call, but never through history: the
listing activity checks each listed tool's schema (``usable_schema``), stores each distinct one
in the worker's store (``SchemaShelf``) and hands the workflow its key; the model activity reads
it back (``treadle.activities.model.tool_schemas``). A schema that cannot be offered is refused,
with why, and only that tool is missing from the run: too large (over ``MAX_SCHEMA_BYTES``), not an
object schema, not plain JSON (a lone surrogate, NaN, nested too deeply), malformed where the
provider reads it (``properties``, ``required``), or holding a ``$ref`` the provider cannot
resolve (one outside the schema, or to a place it does not have).

A worker that keeps no store carries schemas inline, as before, under the same checks.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

from treadle.activities.store.conversation import ConversationStore
from treadle.workflows.agent.messages.mcp import MAX_SCHEMA_BYTES, McpToolInfo

MAX_DEPTH = 64
"""A schema nested deeper than this is refused (providers and JSON encoders give up sooner or
later; a tool's arguments are never this deep)."""
KEPT_KEYS = 1024
"""Distinct schemas whose store keys a worker remembers (least recently used are dropped):
a listing refreshed stores nothing it stored before."""


class SchemaRefused(ValueError):
    """A tool's input schema cannot be offered; its text says why, for the trace."""


def usable_schema(schema: dict[str, Any]) -> str:
    """``schema`` as the compact JSON that is stored and sent, or ``SchemaRefused``."""
    try:
        text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        size = len(text.encode("utf-8"))
    except RecursionError:
        raise SchemaRefused("its input schema is nested too deeply") from None
    except (ValueError, TypeError) as exc:  # NaN or infinity; a lone surrogate (UnicodeError)
        raise SchemaRefused(f"its input schema is not plain JSON ({exc})") from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaRefused(
            f"its input schema is {_kib(size)}, over the {_kib(MAX_SCHEMA_BYTES)} limit"
        )
    if schema.get("type") != "object":
        raise SchemaRefused(
            f"its input schema is not an object schema (type {json.dumps(schema.get('type'))})"
        )
    _check_node(schema, schema, "#", 0)
    return text


def _check_node(node: Any, root: dict[str, Any], where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise SchemaRefused(f"its input schema is nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, list):
        for index, item in enumerate(node):
            _check_node(item, root, f"{where}/{index}", depth + 1)
        return
    if not isinstance(node, dict):
        return
    if "$ref" in node:
        _check_ref(node["$ref"], root, where)
    if where == "#":
        properties = node.get("properties", {})
        if not isinstance(properties, dict):
            raise SchemaRefused("its input schema's properties are not an object")
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaRefused("its input schema's required is not a list of names")
    for key, value in node.items():
        _check_node(value, root, f"{where}/{key}", depth + 1)


def _check_ref(ref: Any, root: dict[str, Any], where: str) -> None:
    """A ``$ref`` must point inside the schema (``#`` or ``#/a/b``), at something that is there:
    a provider resolves nothing else."""
    if not isinstance(ref, str):
        raise SchemaRefused(f"its input schema has a $ref that is not a string at {where}")
    shown = ref if len(ref) <= 80 else ref[:79] + "…"
    if ref != "#" and not ref.startswith("#/"):
        raise SchemaRefused(f"its input schema's $ref {shown!r} points outside the schema")
    target: Any = root
    for token in ref[2:].split("/") if ref != "#" else ():
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and token in target:
            target = target[token]
        elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
            target = target[int(token)]
        else:
            raise SchemaRefused(f"its input schema's $ref {shown!r} cannot be resolved")


def _kib(size: int) -> str:
    return f"{size / 1024:.0f} KiB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MiB"


class SchemaShelf:
    """Stores each distinct schema once in the worker's store and remembers its key (by the
    schema's digest: the store's own key may differ, as the worker's store redacts)."""

    def __init__(self, store: ConversationStore | None, kept: int = KEPT_KEYS) -> None:
        self.store = store
        self._keys: OrderedDict[str, str] = OrderedDict()
        self._kept = kept

    async def offered(self, info: McpToolInfo) -> McpToolInfo:
        """``info`` as the workflow carries it: its schema checked and, with a store, replaced
        by its key; ``SchemaRefused`` when the tool cannot be offered."""
        text = usable_schema(info.input_schema)
        if self.store is None:
            return info
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        key = self._keys.get(digest)
        if key is None:
            key = await self.store.put_text(text)
            self._keys[digest] = key
            while len(self._keys) > self._kept:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(digest)
        return info.model_copy(
            update={
                "input_schema": McpToolInfo.model_fields["input_schema"].get_default(
                    call_default_factory=True
                ),
                "schema_ref": key,
                "schema_chars": len(text),
            }
        )
