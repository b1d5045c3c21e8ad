"""The API's operations, each declared once with what it takes and answers, and the OpenAPI
document made from them: the routes the app serves and the paths the document lists come from
the same list, so no route can be served undocumented.

    Operation("POST", "/v1/runs", "startRun", "Start a run or a thread", start,
              body=StartRun, answer=StartedRun, status=201)

Schemas are pydantic's (``models_json_schema``), under ``#/components/schemas``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from treadle.web.api.bodies import ErrorBody
from treadle.web.http import route

__all__ = ["SSE", "Operation", "Query", "openapi", "routes"]

SSE = "text/event-stream"

_ERRORS = {
    "400": "The request is not valid (the reason says which field)",
    "401": "No access token, or a wrong one (off loopback)",
    "403": "A change from another origin, or without the page's CSRF header",
    "404": "No such run, or it publishes no stream",
    "409": "The run refused it, or it is over (the reason is the run's own)",
    "413": "The body is larger than the limit",
    "503": "No worker answered for the run",
}


@dataclass(frozen=True)
class Query:
    """A query parameter."""

    name: str
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    id: str
    summary: str
    handler: Callable[[Request], Awaitable[Response]]
    body: type[BaseModel] | None = None
    answer: type[BaseModel] | None = None
    """The success answer's model; ``None`` with ``stream``: Server-Sent Events."""
    status: int = 200
    query: Sequence[Query] = ()
    stream: str | None = None
    """For an event stream: what its events are (the description of its ``text/event-stream``)."""
    tag: str = "runs"


def routes(operations: Sequence[Operation]) -> list[Route]:
    """One route per path, taking the methods its operations declare."""
    by_path: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {}
    for op in operations:
        by_path.setdefault(op.path, {})[op.method] = op.handler
    made = []
    for path, handlers in by_path.items():
        if len(handlers) == 1:
            ((method, handler),) = handlers.items()
            made.append(route(path, handler, (method,)))
        else:
            made.append(route(path, _by_method(handlers), tuple(handlers)))
    return made


def _by_method(
    handlers: dict[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        return await handlers[request.method](request)

    return handler


def openapi(operations: Sequence[Operation], *, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``."""
    models: set[type[BaseModel]] = {ErrorBody}
    for op in operations:
        models.update(m for m in (op.body, op.answer) if m is not None)
    ordered = sorted(models, key=lambda m: m.__name__)
    _, definitions = models_json_schema(
        [(m, "validation") for m in ordered], ref_template="#/components/schemas/{model}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": (
                "Treadle's runs and threads over HTTP: start, read, decide, answer, follow. "
                "Off loopback every request needs `Authorization: Bearer TOKEN`. Every error "
                'is JSON: `{"error": "why"}`.'
            ),
        },
        "paths": paths,
        "components": {
            "schemas": definitions.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def _operation(op: Operation) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", op.path)
    ]
    parameters += [
        {
            "name": q.name,
            "in": "query",
            "required": False,
            "description": q.description,
            "schema": q.schema,
        }
        for q in op.query
    ]
    if op.stream is not None:
        parameters.append(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "description": "Resume after this event id (the browser sends it on reconnect)",
                "schema": {"type": "string"},
            }
        )
        success: dict[str, Any] = {
            "description": op.stream,
            "content": {SSE: {"schema": {"type": "string"}}},
        }
    elif op.answer is not None:
        success = {
            "description": op.summary,
            "content": {"application/json": {"schema": _ref(op.answer)}},
        }
    else:
        success = {"description": op.summary, "content": {"application/json": {}}}
    error = {"content": {"application/json": {"schema": _ref(ErrorBody)}}}
    document: dict[str, Any] = {
        "operationId": op.id,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": parameters,
        "responses": {
            str(op.status): success,
            **{code: {"description": why, **error} for code, why in _ERRORS.items()},
        },
    }
    if op.body is not None:
        document["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(op.body)}},
        }
    return document


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}
