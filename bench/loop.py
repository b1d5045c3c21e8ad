"""How long one activity's work holds the worker's event loop, which every activity's heartbeats
share (issue 39: a starved loop is what ended runs under load). The suite's ``loop`` row:

    .venv/bin/python -m bench.suite --rows loop
    .venv/bin/python -m bench.suite --quick --rows loop   # a shorter conversation

In this process, as a worker runs them (the store wrapped as ``build_worker`` wraps it, with a
redactor holding an OpenAI-shaped key): a model call late in a long conversation (step 1,000
of 20 KB observations: 20 MB) by a worker that never saw it, then by the same worker again
(what it read is in memory); and a 1 MB tool output stored through the content door. A ticker
task sleeps 1 ms at a time beside each; the row is the longest it waited past its millisecond
(the loop held by the work, or by the machine: read it with the load), beside the work's own
wall time. Nothing is asserted.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.testing import ActivityEnvironment

from bench.suite import Bench, Row
from treadle.activities.content import RedactedBlobs, Redactor, door
from treadle.activities.content.redaction import using
from treadle.activities.model.activity import ModelActivities, http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.store.conversation import ConversationStore
from treadle.workflows.agent.messages.config import DEFAULT_CONTEXT_WINDOW_TOKENS
from treadle.workflows.agent.messages.models import ChatMessage, ModelRequest, ToolCall, ToolResult

OBSERVATION_CHARS = 20_000
OUTPUT_CHARS = 1_000_000
_T = TypeVar("_T")


async def held(work: Callable[[], Awaitable[_T]]) -> tuple[_T, float, float]:
    """``work()``'s result, the longest the loop kept a 1 ms ticker waiting past its
    millisecond while it ran, and its wall time (both in ms)."""
    longest = 0.0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal longest
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            longest = max(longest, time.perf_counter() - asked - 0.001)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)  # the ticker runs before the work starts
    started = time.perf_counter()
    result = await work()
    wall = time.perf_counter() - started
    done.set()
    await ticker
    return result, longest * 1000, wall * 1000


async def _conversation(store: ConversationStore, steps: int) -> str:
    """A run's conversation after ``steps`` steps that each read a 20 KB file: its head."""
    head = await store.extend(
        None,
        (
            ChatMessage(role="system", content="You read files."),
            ChatMessage(role="user", content="Read every file."),
        ),
    )
    for step in range(steps):
        call = ToolCall(id=f"c{step}", name="read_file", arguments=f'{{"path": "o{step}.txt"}}')
        ref = await store.put_text(f"{step:06d} " * (OBSERVATION_CHARS // 7))
        head = await store.extend(
            head,
            (
                ChatMessage(role="assistant", tool_calls=(call,)),
                ChatMessage(role="tool", tool_call_id=f"c{step}", content_ref=ref),
            ),
        )
    return head


async def row_loop(bench: Bench) -> list[Row]:
    steps = 100 if bench.quick else 1_000
    redactor = Redactor(["sk-proj-" + secrets.token_hex(24)])
    root = bench.tmp / f"loop-{uuid.uuid4().hex[:6]}"
    head = await _conversation(ConversationStore(FileBlobStore(root)), steps)
    name = f"loop-{uuid.uuid4().hex[:8]}"
    bench.models.add_model(name, [{"content": "read"}] * 3, order="arrival")
    request = ModelRequest(
        model=f"openai:{name}",
        messages=(ChatMessage(role="user", content="go on"),),
        conversation=head,
        conversation_messages=2 + 2 * steps,
        tools=("read_file",),
        context_window_tokens=DEFAULT_CONTEXT_WINDOW_TOKENS,  # as a run asks, by default
    )
    loads = [os.getloadavg()[0]]
    _, idle, wall = await held(lambda: asyncio.sleep(0.2))
    rows = [_row("nothing running (this process, this machine)", idle, wall)]
    async with http_client() as http:
        store = ConversationStore(RedactedBlobs(FileBlobStore(root), redactor))
        models = ModelActivities(bench.settings, http, store)
        with using(redactor):
            # What a worker does once (a connection, the tools' schemas): not what is measured.
            warm_up = request.model_copy(update={"conversation": None, "conversation_messages": 0})
            await ActivityEnvironment().run(models.call_model, warm_up)
            for who in ("a worker that never saw it", "the same worker again"):
                _, stall, wall = await held(
                    lambda: ActivityEnvironment().run(models.call_model, request)
                )
                rows.append(_row(f"a model call at step {steps} ({who})", stall, wall))
            output = ToolResult(success=True, output="x " * (OUTPUT_CHARS // 2))

            async def stored() -> Any:
                return await door.tool_output(store, output)

            _, stall, wall = await held(stored)
            rows.append(_row(f"a {OUTPUT_CHARS // 1_000_000} MB tool output stored", stall, wall))
    loads.append(os.getloadavg()[0])
    for row in rows:
        row.measure += f" (load {min(loads):.1f}-{max(loads):.1f})"
    return rows


def _row(what: str, stall: float, wall: float) -> Row:
    return Row(
        "loop",
        f"longest event-loop stall, {what}, {wall:.0f} ms of work",
        f"{stall:.1f} ms",
        values={"stall_ms": stall, "wall_ms": wall},
    )
