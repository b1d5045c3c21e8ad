"""A model request's JSON body as the bytes sent: what httpx's ``json=`` sends, byte for byte,
made so that a long request does not hold the event loop other calls' heartbeats share.

A long request (a view of a long conversation is hundreds of KB) is encoded in a thread
(``treadle.activities.offload``), and a value at a time: one ``json.dumps`` holds the GIL, and
so the loop, to its end, even from a thread (400 KB took 9 ms on a loaded machine); a message
at a time, the loop has its turn between them. (Keeping the JSON of the long strings a worker
sent before saved nothing measurable: joining and encoding the body's bytes, which no cache
spares, costs as much as encoding its strings.)
"""

from __future__ import annotations

import json
from typing import Any

from treadle.activities.offload import ENCODE_OVER_CHARS, off_loop
from treadle.workflows.agent.messages.models import ModelRequest

__all__ = ["encoded", "json_bytes"]


async def encoded(body: dict[str, Any], request: ModelRequest) -> bytes:
    """``body``'s bytes (``request``'s body); a long request's made in a thread."""
    chars = sum(len(m.content or "") for m in request.messages)
    return await off_loop(ENCODE_OVER_CHARS, chars, json_bytes, body)


def json_bytes(body: dict[str, Any]) -> bytes:
    """``json.dumps(body)`` in httpx's form (compact, UTF-8, no NaN), byte for byte, each item
    of its lists (the messages) encoded apart."""
    if not all(isinstance(key, str) for key in body):
        return _dumps(body).encode()
    items = (f"{_dumps(key)}:{_listed(value)}" for key, value in body.items())
    return ("{" + ",".join(items) + "}").encode()


def _listed(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(map(_dumps, value)) + "]"
    return _dumps(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
