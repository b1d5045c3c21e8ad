"""The API's operations over ``AgentClient``, and the app that serves them alone
(``treadle api``); the page's app (``treadle ui``) serves the same operations beside its files.

    GET  /v1/openapi.json                     this API's OpenAPI document
    GET  /v1/runs?state=&limit=               the newest runs and threads
    POST /v1/runs                             start a run or a thread
    GET  /v1/runs/{id}                        its status
    GET  /v1/runs/{id}/view | trace | result | export
    GET  /v1/runs/{id}/events                 its stream as Server-Sent Events (resumable)
    GET  /v1/runs/{id}/transcript             its stream folded into blocks
    GET  /v1/runs/{id}/transcript/events      the blocks' ops as Server-Sent Events (resumable)
    POST /v1/runs/{id}/approve | reject | modify | guide | answer | wake | messages | fork |
         close | cancel
    GET  /v1/memory?namespace= | /v1/memory/recall    a memory namespace's items (memory.py)
    POST /v1/memory/remember | edit | forget

docs/api.md is the manual; the document served is the reference.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TypeVar

from pydantic import BaseModel
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp
from temporalio.client import Client

from treadle.client import FILTERS, AgentClient, Forked, NoStream, StartedRun, Woken
from treadle.web.api import actions, streams
from treadle.web.api.bodies import (
    Answer,
    Answered,
    Approve,
    Cancelling,
    Closing,
    DecisionTaken,
    Fork,
    Guide,
    Message,
    Modify,
    Reject,
    RunList,
    RunView,
    Sent,
    StartRun,
    Transcript,
    Wake,
)
from treadle.web.api.memory import memory_operations
from treadle.web.api.operations import Operation, Query, openapi, routes
from treadle.web.api.transcript import Fold
from treadle.web.guard import Guard, check_access, cors
from treadle.web.http import HttpError, json_app, read_body
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, ThreadExport, Trace

__all__ = [
    "DEFAULT_MODEL",
    "MAX_BODY_BYTES",
    "ApiSettings",
    "api_app",
    "api_operations",
    "api_routes",
]

log = logging.getLogger("treadle.api")

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body (a task, a message, an answer, new arguments): 1 MiB."""
READ_TIMEOUT = 30.0
"""How long a request's body may take to arrive."""
LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
PREFIX = "/v1"
DEFAULT_MODEL = "openai:gpt-4o"
"""The model of a run started without one, unless the server is told another."""

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class ApiSettings:
    """What an API's server is told: where runs it starts go, who may use it, its limits."""

    task_queue: str
    token: str | None = None
    """``None``: no token (loopback only)."""
    loopback: bool = True
    origins: Sequence[str] = field(default=())
    """Origins allowed cross-origin access (CORS); none by default."""
    web_ui: str | None = None
    """The Temporal Web UI's base URL, for runs' links."""
    max_body: int = MAX_BODY_BYTES
    model: str = DEFAULT_MODEL
    """The model of a run started without one (and the page's Start form's)."""


def api_operations(agents: AgentClient, settings: ApiSettings) -> list[Operation]:
    """Every operation of the API, bound to ``agents``."""

    async def body(request: Request, model: type[M]) -> M:
        raw = await read_body(request, settings.max_body, timeout=READ_TIMEOUT)
        return actions.parsed(model, raw)

    def answer(model: BaseModel, status: int = 200) -> Response:
        return JSONResponse(model.model_dump(mode="json"), status)

    def run_id(request: Request) -> str:
        return str(request.path_params["id"])

    async def document(request: Request) -> Response:
        return JSONResponse(the_document)

    async def list_runs(request: Request) -> Response:
        state = request.query_params.get("state") or None
        limit = _number(request.query_params.get("limit"), LIST_LIMIT)
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise HttpError(400, f"limit {limit} is not from 1 to {MAX_LIST_LIMIT}")
        rows = await actions.asked(agents.list_runs(state, limit=limit))
        return answer(RunList(runs=rows, filters=list(FILTERS)))

    async def start(request: Request) -> Response:
        started = await actions.start(
            agents, settings.task_queue, await body(request, StartRun), settings.model
        )
        return answer(started, 201)

    async def status(request: Request) -> Response:
        return answer(await actions.asked(agents.status(run_id(request))))

    async def view(request: Request) -> Response:
        return answer(await actions.run_view(agents, run_id(request), settings.web_ui))

    async def trace(request: Request) -> Response:
        return answer(await actions.asked(agents.trace(run_id(request))))

    async def result(request: Request) -> Response:
        ended = await actions.asked(agents.closed_result(run_id(request)))
        if ended is None:
            # Still running, ended without a result, or not there at all (404): its status says.
            status = await actions.asked(agents.status(run_id(request)))
            raise HttpError(
                409, f"run {run_id(request)!r} has no result: it is {status.state.value}"
            )
        return answer(ended)

    async def export(request: Request) -> Response:
        return answer(await actions.asked(agents.export(run_id(request))))

    def deciding(
        model: type[Approve | Reject | Modify | Guide],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def decide(request: Request) -> Response:
            decision = await body(request, model)
            return answer(await actions.decided(agents, run_id(request), decision))

        return decide

    async def answer_query(request: Request) -> Response:
        given = await body(request, Answer)
        return answer(await actions.answer(agents, run_id(request), given))

    async def wake(request: Request) -> Response:
        given = await body(request, Wake)
        return answer(await actions.asked(agents.wake(run_id(request), given.reason)))

    async def send(request: Request) -> Response:
        message = await body(request, Message)
        sent = await actions.send(agents, run_id(request), message.text, message.id, message.mode)
        return answer(sent, 202)

    async def fork(request: Request) -> Response:
        given = await body(request, Fork)
        started = agents.fork(
            run_id(request),
            given.step,
            message=given.message,
            id=given.id,
            model=given.model,
            config=given.config,
            create_workspace=True,
        )
        forked = await actions.asked(started)
        return answer(forked, 201)

    async def close(request: Request) -> Response:
        await body(request, _Empty)
        closing = await actions.asked(agents.close(run_id(request)))
        return answer(Closing(done="closing", queued=closing.queued_messages), 202)

    async def cancel(request: Request) -> Response:
        await body(request, _Empty)
        await actions.asked(agents.cancel(run_id(request)))
        return answer(Cancelling(done="cancelling"), 202)

    async def transcript(request: Request) -> Response:
        fold = Fold()
        try:
            for item in await agents.read_stream(run_id(request)):
                fold.apply(item)
        except NoStream as exc:  # an older run without a stream: the status alone
            return answer(Transcript(blocks=[], offset=None, unavailable=str(exc)))
        except streams.UNANSWERED as exc:
            # No worker answers now: the blocks start from the stream's start, which the live
            # view reads once a worker answers (saying it waits for one meanwhile).
            log.info("api.transcript.unanswered", extra={"why": str(exc)})
            return answer(Transcript(blocks=[], offset=0))
        return answer(Transcript.model_validate(fold.snapshot()))

    def sse(
        shape: Callable[[AgentClient, str, int], AsyncIterator[str]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def stream(request: Request) -> Response:
            start_at = streams.resume_offset(
                request.headers.get("last-event-id"), request.query_params.get("from")
            )
            return StreamingResponse(
                shape(agents, run_id(request), start_at),
                media_type="text/event-stream",
                headers={"X-Accel-Buffering": "no"},
            )

        return stream

    run = f"{PREFIX}/runs/{{id}}"
    from_query = Query(
        "from",
        "Start at this offset (``Last-Event-ID`` wins when sent)",
        {"type": "integer", "minimum": 0},
    )
    operations = [
        Operation(
            "GET",
            f"{PREFIX}/openapi.json",
            "openapi",
            "This API's OpenAPI document",
            document,
            tag="meta",
        ),
        Operation(
            "GET",
            f"{PREFIX}/runs",
            "listRuns",
            "The newest runs and threads",
            list_runs,
            answer=RunList,
            query=[
                Query(
                    "state",
                    "Keep to one of: " + ", ".join(FILTERS),
                    {"type": "string", "enum": list(FILTERS)},
                ),
                Query(
                    "limit",
                    f"At most this many (default {LIST_LIMIT})",
                    {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT},
                ),
            ],
        ),
        Operation(
            "POST",
            f"{PREFIX}/runs",
            "startRun",
            "Start a run or a thread",
            start,
            body=StartRun,
            answer=StartedRun,
            status=201,
        ),
        Operation("GET", run, "getStatus", "The run's status", status, answer=AgentStatus),
        Operation(
            "GET",
            f"{run}/view",
            "getView",
            "The run's status, calls and the schemas of the calls waiting",
            view,
            answer=RunView,
        ),
        Operation("GET", f"{run}/trace", "getTrace", "The run's trace", trace, answer=Trace),
        Operation(
            "GET",
            f"{run}/result",
            "getResult",
            "The result of a run that has completed (409 while it runs)",
            result,
            answer=AgentResult,
        ),
        Operation(
            "GET",
            f"{run}/export",
            "exportRun",
            "The run's whole conversation (Loom's JSON)",
            export,
            answer=ThreadExport,
        ),
        Operation(
            "GET",
            f"{run}/events",
            "streamEvents",
            "The run's stream: its events and the model's tokens",
            sse(streams.item_events),
            query=[from_query],
            stream="`event: event` / `event: token` messages, each `id` the offset to resume "
            "after; `event: notice`, `event: end`, `event: unavailable`",
        ),
        Operation(
            "GET",
            f"{run}/transcript",
            "getTranscript",
            "The run's stream folded into blocks",
            transcript,
            answer=Transcript,
        ),
        Operation(
            "GET",
            f"{run}/transcript/events",
            "streamTranscript",
            "The blocks' changes as they happen",
            sse(streams.transcript_ops),
            query=[from_query],
            stream="`event: ops` messages (a list of ops each), `id` the offset to resume "
            "after; `event: notice`, `event: end`, `event: unavailable`",
        ),
        Operation(
            "POST",
            f"{run}/approve",
            "approve",
            "Approve the call waiting",
            deciding(Approve),
            body=Approve,
            answer=DecisionTaken,
        ),
        Operation(
            "POST",
            f"{run}/reject",
            "reject",
            "Reject the call waiting, with a reason",
            deciding(Reject),
            body=Reject,
            answer=DecisionTaken,
        ),
        Operation(
            "POST",
            f"{run}/modify",
            "modify",
            "Run the call waiting with new arguments",
            deciding(Modify),
            body=Modify,
            answer=DecisionTaken,
        ),
        Operation(
            "POST",
            f"{run}/guide",
            "guide",
            "Guide a stuck run, or halt it",
            deciding(Guide),
            body=Guide,
            answer=DecisionTaken,
        ),
        Operation(
            "POST",
            f"{run}/answer",
            "answer",
            "Answer (or decline) the run's question",
            answer_query,
            body=Answer,
            answer=Answered,
        ),
        Operation(
            "POST",
            f"{run}/wake",
            "wake",
            "End the wait tool's wait now",
            wake,
            body=Wake,
            answer=Woken,
        ),
        Operation(
            "POST",
            f"{run}/messages",
            "sendMessage",
            "Send a thread its next message",
            send,
            body=Message,
            answer=Sent,
            status=202,
        ),
        Operation(
            "POST",
            f"{run}/fork",
            "forkRun",
            "Start a new run or thread from the end of one of this one's steps",
            fork,
            body=Fork,
            answer=Forked,
            status=201,
        ),
        Operation(
            "POST",
            f"{run}/close",
            "closeThread",
            "Close a thread (after the messages queued)",
            close,
            answer=Closing,
            status=202,
        ),
        Operation(
            "POST",
            f"{run}/cancel",
            "cancelRun",
            "Cancel the run (Temporal cancellation)",
            cancel,
            answer=Cancelling,
            status=202,
        ),
        *memory_operations(agents, body),
    ]
    the_document = openapi(operations, title="Treadle", version=_version())
    return operations


def api_routes(agents: AgentClient, settings: ApiSettings) -> list[Route]:
    return routes(api_operations(agents, settings))


def api_app(client: Client | AgentClient, settings: ApiSettings) -> ASGIApp:
    """The API alone, guarded (``treadle.web.guard``) and with CORS for ``settings.origins``."""
    check_access(settings.token, settings.loopback)
    agents = (
        client
        if isinstance(client, AgentClient)
        else AgentClient(client, task_queue=settings.task_queue)
    )
    app = json_app(
        api_routes(agents, settings),
        log=log,
        event_prefix="api",
        not_found=lambda path: f"no {path} here; the API is described at {PREFIX}/openapi.json",
        middleware=[
            Middleware(
                Guard,
                token=settings.token,
                loopback=settings.loopback,
                origins=settings.origins,
                max_body=settings.max_body,
            )
        ],
    )
    return cors(app, settings.origins)


class _Empty(BaseModel):
    """A body with nothing in it (``{}`` or none)."""

    model_config = {"extra": "forbid"}


def _number(text: str | None, default: int) -> int:
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise HttpError(400, f"{text!r} is not a whole number") from None


def _version() -> str:
    try:
        return metadata.version("treadle")
    except metadata.PackageNotFoundError:
        return "0"
