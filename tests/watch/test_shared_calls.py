"""``treadle.shared_calls.SharedCalls``, the one mechanism behind the live view's shared polls
and a closed run's kept answers: callers at once share a call, a failure is not kept, a caller
whose asker was cancelled asks itself, and at most ``most`` answers are kept."""

from __future__ import annotations

import asyncio

import pytest

from treadle.shared_calls import SharedCalls


async def test_callers_at_once_share_one_call_and_a_failure_is_asked_again() -> None:
    shared = SharedCalls()
    asked: list[str] = []
    gate = asyncio.Event()

    async def call() -> str:
        asked.append("x")
        await gate.wait()
        return "answer"

    waiting = [asyncio.create_task(shared.call(("k",), call)) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*waiting) == ["answer"] * 5
    assert asked == ["x"]
    assert await shared.call(("k",), call) == "answer"  # kept (fresh for ever by default)
    assert asked == ["x"]

    async def fails() -> str:
        asked.append("failed")
        raise RuntimeError("no worker")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            await shared.call(("f",), fails)
    assert asked.count("failed") == 2


async def test_a_waiter_whose_asker_was_cancelled_asks_itself() -> None:
    shared = SharedCalls()
    started = asyncio.Event()
    calls = 0

    async def call() -> int:
        nonlocal calls
        calls += 1
        started.set()
        await asyncio.sleep(0.05 if calls > 1 else 3600)
        return calls

    asker = asyncio.create_task(shared.call(("k",), call))
    await started.wait()
    waiter = asyncio.create_task(shared.call(("k",), call))
    await asyncio.sleep(0)
    asker.cancel()
    assert await asyncio.wait_for(waiter, 30) == 2
    with pytest.raises(asyncio.CancelledError):
        await asker


async def test_at_most_most_answers_are_kept_the_oldest_used_dropped_first() -> None:
    shared = SharedCalls(most=2)
    asked: list[str] = []

    def call(key: str):  # type: ignore[no-untyped-def]
        async def answer() -> str:
            asked.append(key)
            return key

        return answer

    for key in ("a", "b", "a", "c", "a", "b"):
        assert await shared.call((key,), call(key)) == key
    # "a" used again before "c" came, so "b" was dropped; "b" is asked again at the end.
    assert asked == ["a", "b", "c", "b"]
