"""Heavy synchronous work kept off the worker's event loop.

Every activity of a worker runs on one event loop, and so do their heartbeats: a loop held for
a second by one activity's CPU work (redacting a megabyte of tool output, hashing a large blob,
the JSON of a long model request) is a heartbeat missed by every other, which Temporal takes
for a dead worker. Such work on large inputs runs in a thread instead: the GIL still lets one
thread run at a time, but the loop gets its turn between the thread's steps instead of after
the whole job.

A thread's hand-over costs ~0.1-0.2 ms of CPU, so small work stays where it is: each kind of
work goes to a thread above the size at which it takes about a millisecond, measured on the
2-core machine the suite runs on (a loaded machine stretches it tenfold).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

REDACT_OVER_CHARS = 16 * 1024
"""Redacting text (``Redactor``) costs 0.05-0.5 ms per KiB, by the worker's secrets: 20 KB of
tool output took 1.2 ms with one short key, 10 ms with one OpenAI-shaped key; 400 KB, 40-150."""
ENCODE_OVER_CHARS = 64 * 1024
"""JSON-encoding a model request costs ~0.02 ms per KiB: a view of 400 KB took 9 ms."""
HASH_OVER_BYTES = 512 * 1024
"""Hashing a blob (SHA-256, and AES-GCM when the store seals) costs ~1 ms per 300 KiB."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def off_loop(
    over: int, size: int, work: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``work(*args, **kwargs)``, in a thread when ``size`` (the bytes or characters it handles)
    is over ``over`` (one of this module's thresholds)."""
    if size > over:
        return await asyncio.to_thread(work, *args, **kwargs)
    return work(*args, **kwargs)
