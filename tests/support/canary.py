"""Canary API keys for the tests that check a key leaks nowhere, and the search for its pieces."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from typing import Any

from treadle.activities.model.http_errors import MIN_FRAGMENT

# Letters that no hex id, base64-free word or English text in a history is likely to line up
# with; no "-", so a key of them never looks like one (only redaction by value can catch it).
_CANARY_LETTERS = "ghjkmnpqrstvwxyzGHJKMNPQRSTVWXYZ"


def canary_key(length: int = 40) -> str:
    """A fresh mixed-case key, made at run time so no scanner finds one in the source."""
    while True:
        key = "".join(secrets.choice(_CANARY_LETTERS) for _ in range(length))
        if key.lower() != key and key.upper() != key:
            return key


def leaks(text: str, key: str) -> list[str]:
    """Every ``MIN_FRAGMENT``-character piece of ``key`` found in ``text``, in any case."""
    folded, piece = text.casefold(), MIN_FRAGMENT
    return [
        key[i : i + piece]
        for i in range(len(key) - piece + 1)
        if key[i : i + piece].casefold() in folded
    ]


def decoded_payloads(node: Any) -> Iterator[str]:
    """Every payload's data in a history's JSON (or the CLI's), base64-decoded: the JSON
    carries payloads encoded, so a key inside one is found only after decoding."""
    if isinstance(node, dict):
        if isinstance(node.get("data"), str) and "metadata" in node:
            yield base64.b64decode(node["data"]).decode("utf-8", "replace")
        for value in node.values():
            yield from decoded_payloads(value)
    elif isinstance(node, list):
        for value in node:
            yield from decoded_payloads(value)
