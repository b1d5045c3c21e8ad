"""The scripted model's turns more than one benchmark runs."""

from __future__ import annotations

from typing import Any


def write_script(steps: int, *, delay: float = 0.0) -> list[dict[str, Any]]:
    """``steps`` turns each writing one new file (the first after ``delay``), then an answer."""
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": f"f{i}.txt", "content": "x" * 200}}
            ],
            "usage": {"prompt_tokens": 500, "completion_tokens": 40},
            **({"delay": delay} if delay and i == 0 else {}),
        }
        for i in range(steps)
    ]
    turns.append({"content": "done", "usage": {"prompt_tokens": 600, "completion_tokens": 5}})
    return turns
