"""The bare Temporal floor: what a developer could write on Temporal without Treadle.

One workflow loops two activities until the model answers: a model call (one HTTP POST of the
conversation and a single ``write_file`` tool definition, in the OpenAI protocol, to the same
scripted model server) and a file write. No state machine, validation, search attributes,
streaming, heartbeats, trace or store: every figure of the benchmark suite that says "floor" is
this loop, on the same server and the same kind of worker (sandboxed, same data converter).

The floor carries no conversation: each call sends the task and the last exchange only, and its
scripted model takes turns in arrival order (``add_model(..., order="arrival")``). So its history
stays the same size per step, as Treadle's does with the conversation store, and the floor is
the lower bound of two activities per step; handling the conversation is part of what Treadle's
figures include.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    # httpx is used by activities only; passed through so each run's sandbox does not
    # import it again (a hand-written floor would do the same).
    import httpx

WRITE_FILE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Create or overwrite a text file in the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}


@dataclass(frozen=True)
class FloorInput:
    model: str
    """The scripted server's model name (no provider prefix)."""
    task: str
    workspace: str


@dataclass(frozen=True)
class FloorCall:
    model: str
    messages: list[dict[str, Any]]


@dataclass(frozen=True)
class FloorReply:
    content: str | None
    call_id: str | None = None
    path: str | None = None
    text: str | None = None
    raw_arguments: str | None = None


@dataclass(frozen=True)
class FloorWrite:
    workspace: str
    path: str
    content: str


@dataclass(frozen=True)
class FloorResult:
    steps: int
    answer: str | None


class FloorActivities:
    """The two activities, sharing one HTTP client as a real worker would."""

    def __init__(self, base_url: str, http: httpx.AsyncClient) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._http = http

    @activity.defn(name="floor_model_call")
    async def model_call(self, call: FloorCall) -> FloorReply:
        """One chat completion, non-streaming, the tool call parsed out."""
        response = await self._http.post(
            self._url,
            json={"model": call.model, "messages": call.messages, "tools": [WRITE_FILE_TOOL]},
        )
        response.raise_for_status()
        message = response.json()["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:
            return FloorReply(content=message.get("content"))
        function = calls[0]["function"]
        arguments = json.loads(function["arguments"])
        return FloorReply(
            content=message.get("content"),
            call_id=calls[0]["id"],
            path=arguments["path"],
            text=arguments["content"],
            raw_arguments=function["arguments"],
        )

    @activity.defn(name="floor_write_file")
    async def write_file(self, write: FloorWrite) -> str:
        """Write one file in the workspace (small, so a plain write in the event loop)."""
        target = Path(write.workspace) / write.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(write.content)
        return f"wrote {len(write.content)} characters to {write.path}"


OPTIONS: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=60)}


@workflow.defn
class FloorWorkflow:
    """Ask the model, write the file it names, repeat until it answers."""

    @workflow.run
    async def run(self, input: FloorInput) -> FloorResult:
        messages: list[dict[str, Any]] = [{"role": "user", "content": input.task}]
        steps = 0
        while True:
            steps += 1
            reply = await workflow.execute_activity_method(
                FloorActivities.model_call, FloorCall(input.model, messages), **OPTIONS
            )
            if reply.call_id is None or reply.path is None:
                return FloorResult(steps=steps, answer=reply.content)
            observation = await workflow.execute_activity_method(
                FloorActivities.write_file,
                FloorWrite(input.workspace, reply.path, reply.text or ""),
                **OPTIONS,
            )
            messages = [
                messages[0],
                {
                    "role": "assistant",
                    "content": reply.content,
                    "tool_calls": [
                        {
                            "id": reply.call_id,
                            "type": "function",
                            "function": {"name": "write_file", "arguments": reply.raw_arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": reply.call_id, "content": observation},
            ]
