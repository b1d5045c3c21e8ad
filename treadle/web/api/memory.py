"""Long-term memory over HTTP: a namespace's items listed, searched, added, edited and
forgotten, as ``treadle memory`` does and as runs with ``config.memory`` see them through their
``remember``, ``recall`` and ``forget`` tools (docs/threads.md).

    GET  /v1/memory?namespace=NS               every live item, oldest first
    GET  /v1/memory/recall?namespace=NS&query=  the items that match keywords, best first
    POST /v1/memory/remember | edit | forget   add, replace an item's text, remove one

A namespace names who the memory is for (``user:alice/agent:coder``): it holds ``/`` and ``:``,
so it is a query parameter or a body field, never a path segment. Bodies are checked here
against the memory's own limits (a 400 naming the field); an item a namespace does not hold is
a 404. Everything goes through ``AgentClient`` (its redaction of key shapes included).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, TypeVar

from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from treadle.client import AgentClient, AgentClientError, MemoryRefused
from treadle.web.api import actions
from treadle.web.api.operations import Operation, Query
from treadle.web.http import HttpError
from treadle.workflows.base import Frozen, describe_errors
from treadle.workflows.memory.models import (
    MAX_ITEM_CHARS,
    MAX_RECALL,
    NAMESPACE_PATTERN,
    MemoryItem,
)

__all__ = [
    "EditMemory",
    "ForgetMemory",
    "MemoryList",
    "RememberBody",
    "memory_operations",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class Reader(Protocol):
    """Reads a request's body into ``model`` within the API's limits (a 400 naming the field)."""

    async def __call__(self, request: Request, model: type[M]) -> M: ...


Namespace = Field(pattern=NAMESPACE_PATTERN, description="e.g. ``user:alice/agent:coder``")
ItemText = Field(min_length=1, max_length=MAX_ITEM_CHARS)
ItemId = Field(min_length=1, max_length=20, description="``m3``: the item's id")


class MemoryList(Frozen):
    """A namespace's items (none for a namespace nobody wrote to)."""

    namespace: str
    items: list[MemoryItem]


class RememberBody(Frozen):
    """Keep ``text`` in ``namespace`` (for ``ttl_days``; default: until forgotten)."""

    namespace: str = Namespace
    text: str = ItemText
    ttl_days: float | None = Field(default=None, gt=0, le=3650)
    by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who wrote it (attribution, as a decision's ``decided_by``)."""


class EditMemory(Frozen):
    """Replace the text of item ``id`` (its time to live kept)."""

    namespace: str = Namespace
    id: str = ItemId
    text: str = ItemText
    by: str | None = Field(default=None, min_length=1, max_length=200)


class ForgetMemory(Frozen):
    """Remove item ``id``."""

    namespace: str = Namespace
    id: str = ItemId


class _Listing(Frozen):
    namespace: str = Namespace
    query: str = Field(default="", max_length=1_000)
    limit: int = Field(default=5, ge=1, le=MAX_RECALL)


def memory_operations(agents: AgentClient, body: Reader) -> list[Operation]:
    """The memory operations, bound to ``agents`` (whose task queue runs a new namespace);
    ``body`` reads a request's body into a model, within the API's limits."""

    def answer(model: BaseModel, status: int = 200) -> Response:
        return JSONResponse(model.model_dump(mode="json"), status)

    def listing(request: Request) -> _Listing:
        params = request.query_params
        found = {k: params[k] for k in ("namespace", "query", "limit") if k in params}
        if "namespace" not in found:
            raise HttpError(400, "name the memory: ?namespace=NAMESPACE")
        try:
            return _Listing.model_validate(found)
        except ValidationError as exc:
            raise HttpError(400, describe_errors(exc)) from None

    async def list_items(request: Request) -> Response:
        asked = listing(request)
        items = await _refusing(agents.memory_items(asked.namespace))
        return answer(MemoryList(namespace=asked.namespace, items=list(items)))

    async def recall(request: Request) -> Response:
        asked = listing(request)
        found = await _refusing(agents.recall(asked.namespace, asked.query, limit=asked.limit))
        return answer(MemoryList(namespace=asked.namespace, items=list(found)))

    async def remember(request: Request) -> Response:
        given = await body(request, RememberBody)
        kept = agents.remember(given.namespace, given.text, ttl_days=given.ttl_days, by=given.by)
        return answer(await _refusing(kept), 201)

    async def edit(request: Request) -> Response:
        given = await body(request, EditMemory)
        edited = agents.edit_memory(given.namespace, given.id, given.text, by=given.by)
        return answer(await _refusing(edited, missing=404))

    async def forget(request: Request) -> Response:
        given = await body(request, ForgetMemory)
        gone = agents.forget(given.namespace, given.id)
        return answer(await _refusing(gone, missing=404))

    namespace = Query("namespace", "The memory's namespace, e.g. user:alice/agent:coder")
    base = "/v1/memory"
    return [
        Operation(
            "GET",
            base,
            "listMemory",
            "Every live item of a memory namespace, oldest first",
            list_items,
            answer=MemoryList,
            query=[namespace],
            tag="memory",
        ),
        Operation(
            "GET",
            f"{base}/recall",
            "recallMemory",
            "The items of a namespace that share most words with a query, best first",
            recall,
            answer=MemoryList,
            query=[
                namespace,
                Query("query", "Keywords (none: the newest items)"),
                Query(
                    "limit",
                    f"At most this many (default 5, at most {MAX_RECALL})",
                    {"type": "integer", "minimum": 1, "maximum": MAX_RECALL},
                ),
            ],
            tag="memory",
        ),
        Operation(
            "POST",
            f"{base}/remember",
            "remember",
            "Add an item to a namespace (a worker on the server's task queue keeps it)",
            remember,
            body=RememberBody,
            answer=MemoryItem,
            status=201,
            tag="memory",
        ),
        Operation(
            "POST",
            f"{base}/edit",
            "editMemory",
            "Replace an item's text (404: the namespace holds no such item)",
            edit,
            body=EditMemory,
            answer=MemoryItem,
            tag="memory",
        ),
        Operation(
            "POST",
            f"{base}/forget",
            "forgetMemory",
            "Remove an item (404: the namespace holds no such item)",
            forget,
            body=ForgetMemory,
            answer=MemoryItem,
            tag="memory",
        ),
    ]


async def _refusing(asking: Awaitable[T], *, missing: int = 409) -> T:
    """What ``asking`` answers; a namespace's refusal as ``missing`` (404 for an item it does
    not hold), the client's other errors as the API's."""
    try:
        return await asking
    except MemoryRefused as exc:
        raise HttpError(missing, str(exc)) from None
    except AgentClientError as exc:
        raise actions.http_error(exc) from None
