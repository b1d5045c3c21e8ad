"""Long-term memory's messages: an item, what a run or a person asks of a namespace, and the
rules every item keeps (size, count, time to live). Pure data and pure functions."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pydantic import Field

from treadle.workflows.base import Frozen

MAX_ITEM_CHARS = 2_000
"""The most one item holds: a memory is a fact or a preference, not a document."""
MAX_ITEMS = 500
"""Items a namespace keeps at most; the oldest go first when it is full."""
MAX_RECALL = 20
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$"
"""A namespace names who the memory is for, e.g. ``user:alice/agent:coder`` or ``acme/support``."""


class MemoryItem(Frozen):
    id: str
    """``m1``, ``m2``...: numbered in its namespace, never reused."""
    text: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    by: str | None = None
    """The run (workflow id) or person that wrote it last."""

    def live(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now


class Remember(Frozen):
    """``{"text": "...", "ttl_seconds": 86400}``: keep ``text`` (for ``ttl_seconds``)."""

    text: str = Field(min_length=1, max_length=MAX_ITEM_CHARS)
    ttl_seconds: float | None = Field(None, gt=0, le=10 * 365 * 24 * 3600)
    by: str | None = Field(None, max_length=1000)


class Edit(Frozen):
    """``{"id": "m3", "text": "..."}``: replace an item's text (its time to live kept)."""

    id: str = Field(min_length=1, max_length=20)
    text: str = Field(min_length=1, max_length=MAX_ITEM_CHARS)
    by: str | None = Field(None, max_length=1000)


class Forget(Frozen):
    """``{"id": "m3"}``: remove an item."""

    id: str = Field(min_length=1, max_length=20)


class Recall(Frozen):
    """``{"query": "deploy friday", "limit": 5}``: the items that share most words with the
    query (an empty query: the newest)."""

    query: str = Field("", max_length=1_000)
    limit: int = Field(5, ge=1, le=MAX_RECALL)


class Recalled(Frozen):
    items: tuple[MemoryItem, ...] = ()


class MemoryState(Frozen):
    """A namespace's whole memory, carried across continue-as-new."""

    namespace: str = Field(pattern=NAMESPACE_PATTERN)
    items: tuple[MemoryItem, ...] = ()
    numbered: int = 0


def memory_workflow_id(namespace: str) -> str:
    return f"treadle-memory-{namespace}"


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) > 1}


def recall(items: tuple[MemoryItem, ...], asked: Recall, now: datetime) -> tuple[MemoryItem, ...]:
    """The live items that share most words with the query, best first (newest first among
    equals); an empty query: the newest."""
    live = [i for i in items if i.live(now)]
    wanted = words(asked.query)
    if not wanted:
        return tuple(sorted(live, key=lambda i: i.updated_at, reverse=True)[: asked.limit])
    scored = [(_score(wanted, words(i.text)), i) for i in live]
    found = [(s, i) for s, i in scored if s > 0]
    found.sort(key=lambda si: (si[0], si[1].updated_at), reverse=True)
    return tuple(i for _, i in found[: asked.limit])


def _score(wanted: set[str], have: set[str]) -> int:
    """How many of the query's words the item holds, a word matching its longer forms and
    stems ("deploy" finds "deploys", "deployment" finds "deploy")."""
    return sum(
        1
        for w in wanted
        if w in have
        or any(len(w) > 3 and len(h) > 3 and (h.startswith(w) or w.startswith(h)) for h in have)
    )


def expiry(now: datetime, ttl_seconds: float | None) -> datetime | None:
    return None if ttl_seconds is None else now + timedelta(seconds=ttl_seconds)
