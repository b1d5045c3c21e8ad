"""A run's stream folded into a transcript: blocks on the page, and the changes each item makes.

The page shows a run as blocks (the user's messages, the model's text, tool calls, notes). The
server folds the run's stream into them once for a snapshot (``Fold.snapshot``) and goes on
folding for the live view, sending each change as an op::

    {"op": "add", "block": {"id": "m4", "kind": "model", "text": "Hel"}}
    {"op": "text", "id": "m4", "text": "lo"}                     # appended
    {"op": "text", "id": "m4", "text": "Hi.", "retried": true}   # replaces: a retried reply
    {"op": "tool", "id": "t-call_1", "ok": true, "output": "wrote notes.md"}
    {"op": "refused", "id": "m4", "why": "Not taken as the answer: ..."}  # a refused reply
    {"op": "event", "kind": "decided"}                          # the status may have changed

A snapshot up to offset N and the ops from N on make the same page as the ops from 0, so a page
reloaded mid-reply shows no text twice: the text already shown is tracked per step by the
client's ``TextTracker``, as the terminal's view tracks it (a retried model call streams its text
again from its start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from treadle.client.describe import describe_query
from treadle.client.text import RETRIED, TextTracker
from treadle.stream import StreamItem
from treadle.workflows.agent.messages.events import AgentEvent, TokenDelta

__all__ = ["Fold", "Op"]

Op = dict[str, Any]

_NOTES = {
    "phase": "phase",
    "progress": "progress",
    "stuck": "stuck",
    "hint": "hint to the model",
    "refused": "refused",
    "error": "error",
    "continued": "continued as new",
    "hook": "hook",
    "mcp_tools": "MCP tools",
    "outage": "store",
    "guidance_needed": "stuck, waiting for guidance",
}
"""Event kinds shown as one labelled note line."""

_REFUSED = {
    "Planning -> Reflecting": "Not taken as the answer: the model's confidence was below the "
    "run's threshold, so it was asked to reconsider.",
    "Planning -> Planning": "Not taken as the answer: the run's checks refused it (too short, "
    "or not the answer's schema) and asked the model again.",
}
"""A reply's step moving on without an answer: the run refused the reply (``Reflecting``: low
confidence; ``Planning`` again: too short or not the typed answer's schema). Its block says so,
instead of showing it as the agent's answer."""


@dataclass
class Fold:
    """The transcript so far (``blocks``) and what is needed to fold the next item."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0
    """The offset just past the last item folded: where the live view goes on from."""
    text: TextTracker = field(default_factory=TextTracker)
    _by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    _notes: int = 0
    _reply: tuple[int, bool] | None = None
    """The step of the last model reply with text not yet taken as an answer, and whether it
    called tools."""

    def snapshot(self) -> dict[str, Any]:
        """The blocks so far (a copy: folding goes on) and the offset they reach."""
        return {"blocks": [dict(block) for block in self.blocks], "offset": self.offset}

    def apply(self, item: StreamItem) -> list[Op]:
        """Fold one item; returns the ops that bring a page showing the blocks up to date."""
        self.offset = max(self.offset, item.offset + 1)
        value = item.value
        if isinstance(value, TokenDelta):
            new = self.text.delta(value)
            return self._model_text(value.step, new.text, new.retried)
        if value.subagent is not None:  # a sub-agent's event, passed on by this run
            text = value.text or ", ".join(value.tool_calls)
            return self._note(f"sub-agent {value.subagent}", f"{value.kind}: {text}")
        ops = self._event(value)
        ops.append({"op": "event", "kind": value.kind, "state": value.state})
        return ops

    def _event(self, event: AgentEvent) -> list[Op]:
        kind = event.kind
        if kind in ("started", "message"):
            return self._add({"id": f"u{event.run}-{self._count()}", "kind": "user",
                              "text": event.text})  # fmt: skip
        if kind == "model":
            self._reply = (event.step, bool(event.tool_calls))
            new = self.text.rest(event.step, event.text)
            return self._model_text(event.step, new.text, new.retried)
        if kind == "state":
            return self._judged(event)
        if kind == "answer":
            self._reply = None
            if self.text.shown(event.step) == 0 and event.text:
                self.text.rest(event.step, event.text)
                return self._model_text(event.step, event.text, False)
            return []
        if kind == "tool_started" and event.call_id:
            return self._add(self._tool_block(event))
        if kind == "tool_finished" and event.call_id:
            block_id = f"t-{event.call_id}"
            ops = [] if block_id in self._by_id else self._add(self._tool_block(event))
            block = self._by_id[block_id]
            block.update(ok=event.ok, output=event.text)
            return [*ops, {"op": "tool", "id": block_id, "ok": event.ok, "output": event.text}]
        if kind == "approval_needed":
            return self._note("waiting for approval", f"{event.text} (call {event.call_id})")
        if kind == "decided":
            return self._note("decided", event.text)
        if kind == "client_query":
            what = describe_query(event.query) if event.query is not None else event.text
            return self._note("the run asks the client", what)
        if kind == "client_answered":
            name = event.query.id if event.query is not None else "the query"
            return self._note("answered", f"{name}: {event.text}")
        if kind == "ended":
            return self._note("ended", event.state)
        label = _NOTES.get(kind)
        return self._note(label, event.text) if label is not None else []

    def _judged(self, event: AgentEvent) -> list[Op]:
        """After a reply: whether its step moved on without taking it (see ``_REFUSED``)."""
        if self._reply is None or self._reply[0] != event.step:
            return []
        step, called = self._reply
        move = event.text.split(" · ", 1)[0]
        why = _REFUSED.get(move)
        if move.startswith("Planning ->"):
            self._reply = None
        block = self._by_id.get(f"m{step}")
        if why is None or block is None or (called and move == "Planning -> Planning"):
            return []
        block["refused"] = why
        return [{"op": "refused", "id": block["id"], "why": why}]

    def _model_text(self, step: int, text: str, retried: bool) -> list[Op]:
        block_id = f"m{step}"
        block = self._by_id.get(block_id)
        if block is None:
            if not text:
                return []
            return self._add({"id": block_id, "kind": "model", "text": text})
        if retried:
            block["text"] = text
            block["retried"] = RETRIED
            return [{"op": "text", "id": block_id, "text": text, "retried": True}]
        if not text:
            return []
        block["text"] += text
        return [{"op": "text", "id": block_id, "text": text}]

    def _tool_block(self, event: AgentEvent) -> dict[str, Any]:
        return {
            "id": f"t-{event.call_id}",
            "kind": "tool",
            "call_id": event.call_id,
            "tool": event.tool or event.text,
            "target": event.target or "",
            "ok": None,
            "output": "",
        }

    def _note(self, label: str, text: str) -> list[Op]:
        return self._add({"id": f"n{self._count()}", "kind": "note", "label": label,
                          "text": text})  # fmt: skip

    def _add(self, block: dict[str, Any]) -> list[Op]:
        self.blocks.append(block)
        self._by_id[block["id"]] = block
        return [{"op": "add", "block": dict(block)}]

    def _count(self) -> int:
        self._notes += 1
        return self._notes
