"""Content stored by reference inside a tool call's arguments: the marker, and what the workflow
does with it.

The content door (``treadle.activities.content.door``) replaces every long string value of a call's
JSON arguments (a file's content, a long patch) with a marker before the model activity's
result reaches the history::

    {"$treadle_ref": "<sha-256 key of the stored text>", "chars": 50000, "preview": "..."}

Short values (a path, a command) stay inline, so the workflow still checks the call, derives
its target, shows it for approval and tracks progress. The workflow never reads the store:
``Toolbox.check`` validates a marked value as a string of ``chars`` characters (a
*placeholder*: the preview, then the key repeated, that long), and hands the tool activity the
markers, which it resolves from the store before the tool runs. The conversation store keeps
the markers too; the model activity resolves them when it rebuilds the conversation, so the
model sees every byte it wrote.

Pure and deterministic: workflows, activities and clients may all import it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, TypeGuard

__all__ = [
    "PREVIEW_CHARS",
    "REF",
    "Placeholders",
    "full_chars",
    "holds_refs",
    "is_ref",
    "marker",
    "refs_in",
    "restore",
    "with_placeholders",
]

REF = "$treadle_ref"
"""The key that makes a JSON object a marker (no tool's argument is named so)."""
PREVIEW_CHARS = 40
"""A marker shows this many leading characters of what it stands for (a human's glance; the
length says the rest)."""

_KEY = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = frozenset({REF, "chars", "preview"})

Placeholders = dict[str, dict[str, Any]]
"""Placeholder text -> the marker it stands for, for one call's arguments."""


def is_ref(value: Any) -> TypeGuard[dict[str, Any]]:
    """Whether ``value`` (decoded JSON) is a marker."""
    return (
        isinstance(value, dict)
        and REF in value
        and set(value) <= _FIELDS
        and isinstance(value[REF], str)
        and _KEY.match(value[REF]) is not None
        and type(value.get("chars")) is int
        and value["chars"] >= 0
        and isinstance(value.get("preview", ""), str)
    )


def marker(key: str, text: str) -> dict[str, Any]:
    """The marker for ``text`` stored under ``key``."""
    return {REF: key, "chars": len(text), "preview": text[:PREVIEW_CHARS]}


def refs_in(value: Any) -> Iterator[dict[str, Any]]:
    """Every marker inside decoded JSON."""
    if is_ref(value):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from refs_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from refs_in(item)


def _decoded(arguments: str) -> Any:
    if REF not in arguments:  # the quick answer for nearly every call
        return None
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return None


def holds_refs(arguments: str) -> bool:
    """Whether a call's raw JSON arguments hold a marker."""
    return next(refs_in(_decoded(arguments)), None) is not None


def full_chars(arguments: str) -> int:
    """How long a call's arguments are with every marker's text in place (for estimates)."""
    decoded = _decoded(arguments)
    extra = sum(
        int(ref["chars"]) - len(json.dumps(ref, separators=(",", ":"))) for ref in refs_in(decoded)
    )
    return max(len(arguments) + extra, 0)


def _placeholder(ref: Mapping[str, Any]) -> str:
    """A string as long as the marked text: its preview, then its key repeated. Unique per
    stored text (the key), and it starts as the text does (a target derived from it reads)."""
    chars = int(ref["chars"])
    start = str(ref.get("preview", ""))[:chars]
    key = str(ref[REF])
    return (start + key * (chars // len(key) + 1))[:chars]


def with_placeholders(value: Any) -> tuple[Any, Placeholders]:
    """``value`` (decoded JSON) with every marker replaced by its placeholder, and the map back."""
    found: Placeholders = {}

    def walk(item: Any) -> Any:
        if is_ref(item):
            text = _placeholder(item)
            found[text] = item
            return text
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return item

    return walk(value), found


def restore(value: Any, placeholders: Placeholders, *, previews: bool = True) -> Any:
    """``value`` with every placeholder string put back as its marker (without its preview
    unless ``previews``: an activity reads the text itself, and the preview is for people)."""
    if not placeholders:
        return value
    if isinstance(value, str):
        ref = placeholders.get(value)
        if ref is None:
            return value
        return ref if previews else {REF: ref[REF], "chars": ref["chars"]}
    if isinstance(value, dict):
        return {k: restore(v, placeholders, previews=previews) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [restore(v, placeholders, previews=previews) for v in value]
    return value
