"""A run's live stream over Server-Sent Events, read with a real SSE client (httpx-sse): every
item once, in order, each message's id the offset to go on from; a client that drops the
connection in the middle of a streamed reply and comes back with ``Last-Event-ID`` gets exactly
what it had not read, across a thread's continue-as-new too; the folded transcript stream
resumes the same way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from tests.support.harness import Harness
from tests.support.http_api import run_body, started, until_state

Message = tuple[int | None, str, Any]


async def read(
    http: httpx.AsyncClient,
    path: str,
    *,
    last_id: int | None = None,
    stop: Callable[[list[Message]], bool] = lambda read: False,
) -> list[Message]:
    """The stream's messages (id, event, data) until it ends, or until ``stop`` says so (then
    the connection is dropped, as a lost network drops it)."""
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
    got: list[Message] = []
    async with aconnect_sse(http, "GET", path, headers=headers) as source:
        assert source.response.headers["content-type"].startswith("text/event-stream")
        async for sse in source.aiter_sse():
            if not sse.data:
                continue  # the reconnection delay (``retry:``), no message
            got.append((int(sse.id) if sse.id else None, sse.event, json.loads(sse.data)))
            if sse.event in ("end", "unavailable") or stop(got):
                break
    return got


def items(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m[1] in ("event", "token", "ops")]


async def test_a_reconnect_mid_reply_resumes_after_the_last_event_id(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """Dropped after the reply's first tokens and back with Last-Event-ID, the client reads the
    rest once: what both connections read is what one connection from the start reads, ids
    counting up by one, the reply's text whole."""
    words = " ".join(f"word{i}" for i in range(80))
    model = harness.script({"content": words, "chunk_delay": 0.02}, {"content": "never"})
    run_id = await started(http, run_body(harness, model, "Say many words."), track)

    path = f"/v1/runs/{run_id}/events"
    first = await read(http, path, stop=lambda got: any(m[1] == "token" for m in got))
    assert first[-1][1] == "token"  # dropped in the middle of the streamed reply
    last_id = first[-1][0]
    assert last_id is not None
    rest = await read(http, path, last_id=last_id)
    assert rest[-1][1] == "end"
    whole = await read(http, path)

    joined = items(first) + items(rest)
    assert joined == items(whole)
    ids = [m[0] for m in joined]
    assert ids == list(range(1, len(ids) + 1))
    assert all(m[2]["offset"] == m[0] - 1 for m in joined)  # type: ignore[operator]
    answer = [m[2]["value"]["text"] for m in joined if m[1] == "event"
              and m[2]["value"]["kind"] == "answer"]  # fmt: skip
    assert answer == [words]
    await until_state(http, run_id, "Done")


async def test_a_resumed_stream_goes_on_across_continue_as_new(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """A thread that hands itself over between two connections keeps one stream: the client
    that comes back with its last id reads on from there, the new run's items included, and
    misses no answer."""
    model = harness.script(*({"content": f"answer {i}"} for i in range(4)))
    body = run_body(harness, model, "Hello.", thread=True,
                    config={"continue_as_new_after_events": 20})  # fmt: skip
    run_id = await started(http, body, track)
    path = f"/v1/runs/{run_id}/events"

    def answered(n: int) -> Callable[[list[Message]], bool]:
        return lambda got: sum(1 for m in got if m[1] == "event"
                               and m[2]["value"]["kind"] == "answer") >= n  # fmt: skip

    first = await read(http, path, stop=answered(1))
    # The client comes back before the messages (a run hands over only the newest items of its
    # stream: one that came back many hand-overs later would find the oldest gone).
    resumed = asyncio.create_task(read(http, path, last_id=first[-1][0], stop=answered(3)))
    for i in range(1, 4):
        sent = await http.post(f"/v1/runs/{run_id}/messages", json={"text": f"message {i}"})
        assert sent.status_code == 202, sent.text
    rest = await resumed
    status = (await http.get(f"/v1/runs/{run_id}")).json()
    assert status["run_in_chain"] > 1

    joined = items(first) + items(rest)
    ids = [m[0] for m in joined]
    assert ids == list(range(1, len(ids) + 1))
    events = [m[2]["value"] for m in joined if m[1] == "event"]
    assert [e["text"] for e in events if e["kind"] == "answer"] == [f"answer {i}" for i in range(4)]
    assert any(e["kind"] == "continued" for e in events)
    await http.post(f"/v1/runs/{run_id}/close", json={})
    await until_state(http, run_id, "Done")


async def test_the_transcript_stream_resumes_where_the_transcript_ends(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """The folded view: a transcript taken at any time, then its ops from the offset it
    reached, give the blocks of the whole stream; reconnecting with Last-Event-ID sends the
    same ops as the first connection sent after that id."""
    model = harness.script({"content": "Short answer."})
    run_id = await started(http, run_body(harness, model), track)
    await until_state(http, run_id, "Done")
    path = f"/v1/runs/{run_id}/transcript/events"
    whole = items(await read(http, path))
    assert whole and all(isinstance(m[2], list) for m in whole)
    middle = whole[len(whole) // 2][0]
    resumed = items(await read(http, path, last_id=middle))
    assert resumed == [m for m in whole if m[0] is not None and m[0] > middle]  # type: ignore[operator]
    transcript = (await http.get(f"/v1/runs/{run_id}/transcript")).json()
    assert transcript["offset"] == whole[-1][0]
    assert any(b["kind"] == "model" and b["text"] == "Short answer." for b in transcript["blocks"])


async def test_a_run_that_is_not_there_ends_the_stream_with_a_reason(
    http: httpx.AsyncClient,
) -> None:
    """No such run: the stream says so in one message and ends; a bad offset is a 400."""
    (message,) = await read(http, "/v1/runs/no-such-run/events")
    assert message[1] == "unavailable" and "no-such-run" in message[2]["error"]
    bad = await http.get("/v1/runs/x/events", headers={"Last-Event-ID": "abc"})
    assert bad.status_code == 400 and bad.json()["error"]
