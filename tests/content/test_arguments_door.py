"""Tool-call arguments through the door: a large string value of a call's arguments (a file's
content) travels as a stored blob and a short marker, so a step that writes 50 KB costs the
history what a step that writes 2 KB costs; the tool still runs with every byte."""

from __future__ import annotations

from typing import Any

from tests.support.harness import Harness
from workflows.agent.models import RunStatus

SMALL = 2_000
BIG = 50_000


def _writes(size: int, steps: int) -> list[dict[str, Any]]:
    return [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": f"w{i}.txt", "content": f"{i}" + "x" * (size - 1)},
                }
            ]
        }
        for i in range(steps)
    ]


async def _history_bytes(harness: Harness, size: int, steps: int) -> int:
    model = harness.script(*_writes(size, steps), {"content": "wrote them"})
    handle = await harness.start(model, max_steps=steps + 5)
    assert (await handle.result()).status is RunStatus.DONE
    history = await handle.fetch_history()
    return sum(e.ByteSize() for e in history.events)


async def test_a_write_step_costs_the_same_history_at_2_kb_and_50_kb(harness: Harness) -> None:
    """History per write step (the difference between 2 and 6 writes, over 4) is at most 4 KB,
    within 20% whether each step writes 2 KB or 50 KB; the 50 KB file lands whole."""
    per_step = {}
    for size in (SMALL, BIG):
        few, many = await _history_bytes(harness, size, 2), await _history_bytes(harness, size, 6)
        per_step[size] = (many - few) / 4
    print(per_step)
    assert per_step[BIG] <= 4_000, per_step
    assert per_step[SMALL] <= 4_000, per_step
    assert abs(per_step[BIG] - per_step[SMALL]) <= 0.2 * per_step[SMALL], per_step
    written = (harness.workspace / "w5.txt").read_text()
    assert written == "5" + "x" * (BIG - 1)
