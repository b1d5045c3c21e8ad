"""One call answered once for every caller that asks it at about the same time: `SharedCalls`.

The live view's polls and checks (``treadle.stream``: answers fresh for a fraction of a second)
and a closed run's answers (``treadle.closed``: kept, since a closed run never changes) are the
same mechanism with different lifetimes. A caller asks by key; an answer in flight or still
fresh is shared, with nobody asking the server again. A failure is not kept: the next caller
asks again (it may be a worker coming back).
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["SharedCalls"]

T = TypeVar("T")


class SharedCalls:
    """Calls in flight or answered, by key, for the callers of one event loop. ``most``: how
    many answers are kept at most, the one used longest ago dropped first (``None``: as many as
    are fresh)."""

    def __init__(self, most: int | None = None) -> None:
        self._most = most
        self._calls: OrderedDict[tuple[Any, ...], tuple[float, float, asyncio.Future[Any]]] = (
            OrderedDict()
        )
        """By key: when asked, how long it stays fresh, the answer."""

    async def call(
        self,
        key: tuple[Any, ...],
        call: Callable[[], Awaitable[T]],
        *,
        fresh: float = math.inf,
        not_before: float = -math.inf,
    ) -> T:
        """``call()``, or the answer of the same call (``key``) asked after ``not_before`` (the
        loop's time) that is in flight or was asked at most ``fresh`` seconds ago."""
        calls = self._calls
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            for old, (asked, kept, answer) in list(calls.items()):
                if answer.done() and now - asked > kept:
                    calls.pop(old, None)
            shared = calls.get(key)
            if shared is None or shared[2].get_loop() is not loop:
                break
            asked, _, answer = shared
            if asked <= not_before or (answer.done() and now - asked > fresh):
                break
            calls.move_to_end(key)
            try:
                result: T = await asyncio.shield(answer)
                return result
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not answer.cancelled() or (task is not None and task.cancelling()):
                    raise  # this caller is being cancelled
                # The caller that asked was cancelled, not this one: look again (the first of
                # its waiters to get here asks for all of them).
        future: asyncio.Future[Any] = loop.create_future()
        calls[key] = (now, fresh, future)
        calls.move_to_end(key)
        while self._most is not None and len(calls) > self._most:
            calls.popitem(last=False)
        try:
            result = await call()
        except BaseException as exc:
            if calls.get(key, (0, 0, None))[2] is future:
                del calls[key]
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # retrieved here, so one nobody else awaited is not reported
            else:
                future.cancel()
            raise
        future.set_result(result)
        return result
