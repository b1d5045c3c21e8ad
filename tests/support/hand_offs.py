"""Counting a task's hand-offs to threads: each ``asyncio.to_thread`` (or ``run_in_executor``
with the default executor) the code under test makes wakes a thread and then the event loop,
a cost the worker pays per step. Only the counting task's own hand-offs count (their copied
context says so), not those of workers or servers sharing the session's loop."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

_COUNTING: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "counting_hand_offs", default=None
)


class _CountingExecutor(ThreadPoolExecutor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        # asyncio.to_thread submits functools.partial(context.run, func, *args).
        context = getattr(getattr(fn, "func", None), "__self__", None)
        if isinstance(context, contextvars.Context):
            counted = context.get(_COUNTING)
            if counted is not None:
                work = fn.args[0]  # type: ignore[attr-defined]
                counted.append(getattr(work, "__qualname__", repr(work)))
        return super().submit(fn, *args, **kwargs)


@contextmanager
def hand_offs() -> Iterator[list[str]]:
    """The names of the functions this task hands to a thread inside the block, in order."""
    loop = asyncio.get_running_loop()
    previous = getattr(loop, "_default_executor", None)  # asyncio's, made at its first use
    executor = _CountingExecutor()
    loop.set_default_executor(executor)
    counted: list[str] = []
    token = _COUNTING.set(counted)
    try:
        yield counted
    finally:
        _COUNTING.reset(token)
        loop.set_default_executor(previous or ThreadPoolExecutor())
        executor.shutdown(wait=False)
