"""``until``: wait for a condition the test cannot be told of, with a watchdog sized for a busy
machine (a hang guard, not a target: the condition passes as soon as it holds)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], object], what: str, *, rounds: int = 600) -> None:
    """Wait for ``condition()``, looking every 0.1 s, at most ``rounds`` times."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")
