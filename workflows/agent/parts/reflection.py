"""Reflection (agentsm): compressing older history into a summary. Pure functions.

The workflow asks a model for the summary (an activity); everything here is deterministic, so the
request it sends and the fallback it uses when that call fails replay identically.
"""

from __future__ import annotations

from treadle.workflows.agent.messages.models import ChatMessage, ModelRequest, ToolCall, Turn
from treadle.workflows.agent.parts.toolbox import progress_target

SUMMARY_MAX_TOKENS = 800
SUMMARY_SYSTEM_PROMPT = (
    "You compress the working history of a software agent so it can continue with less context. "
    "Summarise what was done, what was learned, which files changed, and what remains, in at most "
    "200 words. Keep exact file names, commands and any error messages that are still unresolved. "
    "Reply with the summary only."
)


class NoSummary(Exception):
    """The summary model answered, but not with a summary."""


def reconsider_note(
    confidence: float | None, threshold: float | None, retry: int, max_retries: int
) -> str:
    """agentsm's second look: the note that asks the model to reconsider a low-confidence reply."""
    score = f"{confidence:.2f}" if confidence is not None else "unknown"
    return (
        f"Your last reply had low confidence ({score}, below {threshold}). Re-read the task and "
        "the tool results; check with a tool if unsure, then reply again. "
        f"(Reconsideration {retry} of {max_retries}.)"
    )


def target(call: ToolCall) -> str:
    """The file or command a call acted on (the tool's name when the call was malformed)."""
    return progress_target(call)


def render(turns: tuple[Turn, ...], limit: int = 300) -> str:
    """The turns as plain text lines for a summariser (observations cut to ``limit``)."""
    lines: list[str] = []
    for turn in turns:
        if turn.assistant_text:
            lines.append(f"step {turn.step}: the agent said: {turn.assistant_text[:limit]}")
        for o in turn.outcomes:
            result = o.observation.replace("\n", " ")[:limit]
            lines.append(f"step {turn.step}: {o.call.name}({target(o.call)}) -> {result}")
        if turn.note:
            lines.append(f"step {turn.step}: note: {turn.note[:limit]}")
    return "\n".join(lines)


def summary_request(model: str, task: str, older: tuple[Turn, ...]) -> ModelRequest:
    return ModelRequest(
        model=model,
        messages=(
            ChatMessage(role="system", content=SUMMARY_SYSTEM_PROMPT),
            ChatMessage(role="user", content=f"Task: {task}\n\nHistory:\n{render(older)}"),
        ),
        max_tokens=SUMMARY_MAX_TOKENS,
        accept_cut=True,  # a summary cut short still summarises
    )


def compact(older: tuple[Turn, ...]) -> str:
    """The deterministic fallback summary: one short line per tool call and note."""
    return render(older, limit=100)


def unresolved_errors(older: tuple[Turn, ...], recent: tuple[Turn, ...]) -> list[str]:
    """Failures in ``older`` whose target never succeeded afterwards: these must survive."""
    later_success: set[str] = set()
    unresolved: dict[str, str] = {}
    turns = (*older, *recent)
    for index in range(len(turns) - 1, -1, -1):
        for o in reversed(turns[index].outcomes):
            key = target(o.call)
            if o.success:
                later_success.add(key)
            elif index < len(older) and key not in later_success and key not in unresolved:
                unresolved[key] = f"{o.call.name}({key}): {o.observation[:200]}"
    return list(reversed(unresolved.values()))


def summary_turn(older: tuple[Turn, ...], summary: str, unresolved: list[str]) -> Turn:
    """The one turn that replaces ``older``: the summary plus the errors still open."""
    first, last = older[0].step, older[-1].step
    note = f"Summary of steps {first}-{last} (older history compressed):\n{summary.strip()}"
    if unresolved:
        note += "\nUnresolved errors:\n" + "\n".join(f"- {e}" for e in unresolved)
    return Turn(step=last, note=note)
