"""Loom's server query, on Temporal: the model asks for something only the client has.

Two ways in, both ending in the same ``ask_client`` tool call, so the answer is that call's
result in the conversation:

- the model calls ``ask_client`` itself (``AskClientArgs``);
- Loom's ``QueryDetectionStrategy``: a reply with no tool calls whose text asks for a file or the
  environment ("I need to read src/main.rs", "What's in the environment?") is turned into that
  call by `detect`, instead of ending the run with a question as its answer.

`detect` is a pure function of the text (regular expressions, no model): deterministic in the
workflow and testable on its own. It looks only at short replies and at phrases that *ask*, so a
final answer that merely mentions a file is left alone.

Pure: safe in the workflow sandbox.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Literal

from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.models import ToolCall

Kind = Literal["file_read", "environment", "question"]

ASK_CLIENT = "ask_client"

MAX_DETECTED_TEXT = 600
"""Longer replies are answers, not requests: detection leaves them alone."""

_PATH = (
    r"[`'\"]?(?P<path>"
    # a path with a directory part: src/main.rs, ./docs, ../x/y.txt
    r"(?:\.{0,2}/)?[\w.-]+(?:/[\w.-]+)+"
    # or a file name whose extension has a letter (not "3.5", "v1.2", "e.g")
    r"|[\w-][\w.-]*\.[A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*"
    r")[`'\"]?"
)
_SELF = r"(?:i(?:\s+(?:need|want|would\s+like|have)|'d\s+like)\s+to|i\s+must|let\s+me)"
"""The model asking for itself: "I need to", "let me"..."""
_YOU = r"(?:(?:could|can|would)\s+you(?:\s+please)?|please)"
"""The model asking the user: "could you", "please"."""
_SEND = r"(?:send\s+me|share|paste|show\s+me|give\s+me|provide)"
"""What the user does when asked for something: it reaches the model. ("Please open X" or
"please check X" is advice to the user, not a request.)"""
_FILE_PATTERNS = (
    re.compile(
        r"(?:"
        + _SELF
        + r"\s+(?:read|see|look\s+at|view)"
        + r"|"
        + _YOU
        + r"\s+"
        + _SEND
        + r")\s+(?:the\s+)?(?:(?:file|contents?\s+of(?:\s+the\s+file)?)\s+)?"
        + _PATH,
        re.IGNORECASE,
    ),
    re.compile(r"what(?:'s|\s+is)\s+in\s+(?:the\s+file\s+)?" + _PATH + r"\s*\?", re.IGNORECASE),
)
_ENV_NAME = r"[`$'\"]?(?P<name>[A-Za-z_][A-Za-z0-9_]*)[`'\"]?"
_ENV_ASK = r"(?:" + _SELF + r"\s+(?:know|see|read)|" + _YOU + r"\s+(?:tell\s+me|" + _SEND + r"))"
"""Asking for the environment: "I need to know", "could you tell me / send me"..."""
_ENV_PATTERNS = (
    re.compile(
        r"(?:what(?:'s|\s+is)\s+(?:the\s+value\s+of|set\s+in)|"
        + _ENV_ASK
        + r"\s+(?:the\s+value\s+of\s+)?)"
        r"\s*(?:the\s+)?(?:environment\s+variable|env(?:ironment)?\s+var(?:iable)?)\s+" + _ENV_NAME,
        re.IGNORECASE,
    ),
    re.compile(
        r"what(?:'s|\s+is)\s+in\s+(?:the|your|my)\s+(?:shell\s+)?environment\b",
        re.IGNORECASE,
    ),
    re.compile(
        _ENV_ASK + r"\s+(?:the|your|my)\s+(?:shell\s+)?environment(?:\s+variables)?\b",
        re.IGNORECASE,
    ),
)


def detect(text: str) -> tuple[Kind, str] | None:
    """The client query a reply's text asks for, as ``(kind, what)``, or ``None``.

    ``what`` is a file path for ``file_read``; for ``environment`` a variable name, or ``*`` for
    "the environment" (the client decides which variables it shares).
    """
    if not text or len(text) > MAX_DETECTED_TEXT:
        return None
    for pattern in _ENV_PATTERNS:
        match = pattern.search(text)
        if match:
            name = match.groupdict().get("name")
            return "environment", name or "*"
    for pattern in _FILE_PATTERNS:
        match = pattern.search(text)
        if match:
            return "file_read", match.group("path").rstrip(".,;:")
    return None


def detected_id(step: int) -> str:
    """The id of the call detection makes at ``step`` (providers' ids look nothing like it)."""
    return f"treadle_query_{step}"


def detected_call(kind: Kind, what: str, step: int) -> ToolCall:
    """The ``ask_client`` call standing for a detected query."""
    arguments = json.dumps({"kind": kind, "what": what})
    return ToolCall(id=detected_id(step), name=ASK_CLIENT, arguments=arguments)


def new_query(
    call: ToolCall,
    kind: Kind,
    what: str,
    *,
    number: int,
    step: int,
    now: datetime,
    timeout_seconds: float,
    detected: bool,
) -> ClientQuery:
    return ClientQuery(
        id=f"q{number}",
        kind=kind,
        what=what,
        call_id=call.id,
        step=step,
        asked_at=now,
        timeout_at=now + timedelta(seconds=timeout_seconds),
        detected=detected,
    )


class AnswerRefused(ValueError):
    """An ``answer_query`` update the run cannot take; the message says why."""


def check_answer(query: ClientQuery | None, answer: ClientAnswer, max_chars: int) -> ClientAnswer:
    """The validator's checks: a query is pending, the id and kind match, one of content or
    declined is given, and the content fits."""
    if query is None:
        raise AnswerRefused("no client query is pending")
    if answer.query_id != query.id:
        raise AnswerRefused(f"unknown query id {answer.query_id[:50]!r}; pending: {query.id}")
    if answer.kind != query.kind:
        raise AnswerRefused(f"query {query.id} is a {query.kind} query, not {answer.kind}")
    if (answer.content is None) == (answer.declined is None):
        raise AnswerRefused("give exactly one of content or declined")
    if answer.content is not None and len(answer.content) > max_chars:
        raise AnswerRefused(
            f"answer is {len(answer.content)} characters; this run takes at most {max_chars}"
        )
    return answer


def observation(query: ClientQuery, answer: ClientAnswer | None, timeout_seconds: float) -> str:
    """What the model sees as the ``ask_client`` call's result."""
    asked = f"{query.kind} query ({query.what[:200]})"
    if answer is None:
        return f"ERROR: the client did not answer the {asked} within {timeout_seconds:g} s"
    if answer.declined is not None:
        return f"ERROR: the client declined the {asked}: {answer.declined}"
    if query.kind == "file_read":
        return f"The client's file {query.what}:\n{answer.content}"
    if query.kind == "environment":
        return f"The client's environment ({query.what}):\n{answer.content}"
    return f"The client answered: {answer.content}"
