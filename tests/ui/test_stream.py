"""The conversation as the page gets it, without a browser: a transcript taken at any offset and
the ops from there make the page the whole stream makes (no text twice, none lost), and the
event stream resumes after the id a dropped connection last saw."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx

from tests.support.harness import Harness
from treadle.stream import read_items
from treadle.web.ui.transcript import Fold

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hello"}}


def page_after(blocks: list[dict[str, Any]], ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What run.js makes of ``ops`` on a page showing ``blocks``."""
    shown = copy.deepcopy(blocks)
    by_id = {b["id"]: b for b in shown}
    for op in ops:
        if op["op"] == "add" and op["block"]["id"] not in by_id:
            block = copy.deepcopy(op["block"])
            shown.append(block)
            by_id[block["id"]] = block
        elif op["op"] == "text" and op["id"] in by_id:
            block = by_id[op["id"]]
            block["text"] = op["text"] if op.get("retried") else block["text"] + op["text"]
        elif op["op"] == "tool" and op["id"] in by_id:
            by_id[op["id"]].update(ok=op["ok"], output=op["output"])
    return [{k: v for k, v in b.items() if k != "retried"} for b in shown]


async def finished_run(harness: Harness) -> str:
    text = " ".join(f"word{i}" for i in range(60))
    model = harness.script(
        # Streamed for about 3 s: a reply is published in batches once it has streamed for a
        # second (a quicker one arrives whole, with its result).
        {"content": text, "chunk_delay": 0.05, "tool_calls": [WRITE]},
        {"content": "Written."},
    )
    handle = await harness.start(model, "Write notes.md.")
    await handle.result()
    return handle.id


async def test_a_snapshot_at_any_offset_then_its_ops_make_the_whole_transcript(
    harness: Harness,
) -> None:
    """Reloaded at any item, the page (snapshot + ops from its offset) shows exactly what a
    page that saw every item shows: the model's text once, each tool call once."""
    workflow_id = await finished_run(harness)
    items = await read_items(harness.client, workflow_id)
    assert any(item.topic == "tokens" for item in items), "the reply was not streamed"
    whole = Fold()
    for item in items:
        whole.apply(item)
    expected = page_after([], [{"op": "add", "block": b} for b in whole.blocks])
    texts = [b["text"] for b in expected if b["kind"] == "model"]
    assert texts[0].startswith("word0 word1") and texts[0].count("word59") == 1
    assert [b["kind"] for b in expected].count("tool") == 1
    for cut in range(len(items) + 1):
        fold = Fold()
        for item in items[:cut]:
            fold.apply(item)
        snapshot = fold.snapshot()
        assert snapshot["offset"] == (items[cut - 1].offset + 1 if cut else 0)
        ops = [op for item in items[cut:] for op in fold.apply(item)]
        assert page_after(snapshot["blocks"], ops) == expected, f"reloaded after {cut} items"


async def test_the_event_stream_resumes_after_the_last_event_id(harness: Harness, ui: str) -> None:
    """Every SSE message's id is the offset to go on from; reconnecting with Last-Event-ID
    sends the messages after it, the same as the first connection sent them."""
    workflow_id = await finished_run(harness)

    async def messages(headers: dict[str, str]) -> list[tuple[int, Any]]:
        read: list[tuple[int, Any]] = []
        url = f"{ui}/api/runs/{workflow_id}/events"
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream("GET", url, headers=headers) as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            event_id = None
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("data: ") and event_id is not None:
                    read.append((event_id, json.loads(line[6:])))
                    event_id = None
                elif line == "event: over":
                    break
        return read

    first = await messages({})
    assert [i for i, _ in first] == sorted({i for i, _ in first})
    middle = first[len(first) // 2][0]
    resumed = await messages({"Last-Event-ID": str(middle)})
    assert resumed == [(i, ops) for i, ops in first if i > middle]
