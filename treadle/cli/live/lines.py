"""One event as a line (or a few) on a terminal, and one stream item as a JSON object (the
phrases every face shares are ``treadle.client.describe``'s)."""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text

from treadle.cli.shell import runnable
from treadle.client.describe import describe_query, short
from treadle.stream import StreamItem
from treadle.workflows.agent.messages.events import AgentEvent
from treadle.workflows.base import WHOLE

__all__ = ["event_text", "item_json"]


def event_text(event: AgentEvent, *, show_messages: bool = True) -> Text | None:
    """How one event reads on a terminal; ``None`` for the kinds the status line or the model
    text show (``state``, ``model``, ``answer``)."""
    if event.subagent is not None:
        return _subagent_text(event, show_messages=show_messages)
    kind = event.kind
    target = f"{event.tool or ''} {event.target or ''}".strip()
    lines: list[tuple[str, str]] = []
    if kind == "started":
        lines.append((f"▶ {short(event.text, 200)}", "bold"))
    elif kind == "tool_started":
        lines.append((f"→ {target}", "cyan"))
    elif kind == "tool_finished":
        output = short(event.text)
        if event.ok:
            lines.append((f"✓ {target}" + (f" ({output})" if output else ""), "green"))
        else:
            lines.append((f"✗ {target}: {output or 'failed'}", "red"))
    elif kind == "approval_needed":
        lines.append((f"⏸ {event.text} needs approval (call {event.call_id})", "bold yellow"))
        if event.arguments is not None:
            lines.append((f"  arguments: {short(json.dumps(event.arguments), 300)}", ""))
        lines.extend((f"  {runnable(command)}", "dim") for command in event.commands)
    elif kind == "decided":
        lines.append((f"• decided: {short(event.text, 200)}", "yellow"))
    elif kind == "guidance_needed":
        lines.append((f"⏸ stuck, waiting for guidance: {short(event.text, 300)}", "bold yellow"))
        lines.extend((f"  {runnable(command)}", "dim") for command in event.commands)
    elif kind == "stuck":
        lines.append((f"! stuck: {short(event.text, 300)}", "yellow"))
    elif kind == "hint":
        lines.append((f"  hint to the model: {short(event.text, 300)}", "dim"))
    elif kind == "phase":
        lines.append((f"▸ {short(event.text, 200)}", "magenta"))
    elif kind == "progress":
        lines.append((f"  progress: {short(event.text, 200)}", "dim"))
    elif kind == "message":
        if not show_messages:
            return None
        lines.append((f"user> {short(event.text, 300)}", "bold"))
    elif kind == "client_query":
        if event.query is None:
            lines.append((f"? the run asks the client: {short(event.text)}", "bold yellow"))
        else:
            q = event.query
            lines.append((f"? the run asks for {describe_query(q)} (query {q.id})", "bold yellow"))
        lines.extend((f"  {runnable(command)}", "dim") for command in event.commands)
    elif kind == "client_answered":
        name = event.query.id if event.query is not None else "the query"
        style = "green" if event.ok else "yellow"
        lines.append((f"← {name}: {short(event.text, 200)}", style))
    elif kind == "refused":
        lines.append((f"! refused: {short(event.text, 300)}", "red"))
    elif kind == "error":
        lines.append((f"✗ error: {short(event.text, 500)}", "bold red"))
    elif kind == "hook":
        lines.append((f"⚙ hook {short(event.text, 200)}", "dim" if event.ok else "yellow"))
    elif kind == "mcp_tools":
        lines.append((f"⚙ {short(event.text, 300)}", "dim" if event.ok else "yellow"))
    elif kind == "outage":
        lines.append((f"⏸ {short(event.text, 300)}", "dim" if event.ok else "yellow"))
    elif kind == "continued":
        lines.append((f"… continued as new ({short(event.text)})", "dim"))
    elif kind == "ended":
        lines.append((f"■ {event.state}", "bold green" if event.state == "Done" else "bold red"))
    if not lines:
        return None
    text = Text()
    for index, (line, style) in enumerate(lines):
        if index:
            text.append("\n")
        text.append(line, style=style)
    return text


def _subagent_text(event: AgentEvent, *, show_messages: bool) -> Text | None:
    """A sub-agent's event its parent passed on: the line it would have, tagged with it (its
    model replies and moves too, in one short line each)."""
    inner = event_text(event.model_copy(update={"subagent": None}), show_messages=show_messages)
    if inner is None:
        said = event.text.strip() or ", ".join(event.tool_calls)
        if not said:
            return None
        inner = Text(f"{event.kind}: {short(said, 200)}", style="dim")
    tagged = Text(f"[{event.subagent}] ", style="dim cyan")
    tagged.append_text(inner)
    return tagged


def item_json(item: StreamItem) -> dict[str, Any]:
    """One stream item as the JSON object ``watch --json`` prints."""
    value = item.value.model_dump(mode="json", context=WHOLE)
    if item.topic == "tokens":
        value["text_offset"] = value.pop("offset")
    return {"topic": item.topic, "offset": item.offset, **value}
