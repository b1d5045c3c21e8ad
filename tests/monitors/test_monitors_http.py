"""The HTTP ping service and the live event stream, end to end against the real dev server:
curl-style pings become check-ins, bad requests get clear errors, events arrive as server-sent
events, and a ping sent while no worker runs waits in Temporal until one does."""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections.abc import AsyncIterator, MutableMapping
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from tests.support.harness import running_worker
from tests.support.monitors import EventReader, Handle, start_monitor, until, view
from tests.support.processes import start_service
from treadle.web import ping as ping_service
from treadle.web.ping import MonitorService
from treadle.workflows.monitors.models import (
    EVENTS_TOPIC,
    MEMO_PING_KEY_DIGEST,
    CheckInSource,
    CheckInStatus,
    DeleteRequest,
    Health,
    monitor_workflow_id,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow


class Setup:
    """A task queue, the HTTP service in this process, and monitors deleted afterwards."""

    def __init__(self, client: Client, task_queue: str, service: MonitorService) -> None:
        self.client = client
        self.task_queue = task_queue
        self.service = service
        self.handles: list[Handle] = []

    async def monitor(self, **fields: Any) -> tuple[Handle, str]:
        """Create a monitor as `monitors create` does; returns its handle and ping key."""
        slug = f"web-{uuid.uuid4().hex[:10]}"
        key = f"{slug}.{uuid.uuid4().hex}"
        handle = await start_monitor(self.client, self.task_queue, slug, key, **fields)
        self.handles.append(handle)
        return handle, key

    def url(self, path: str) -> str:
        return f"{self.service.url}{path}"

    @asynccontextmanager
    async def watching(self, slug: str) -> AsyncIterator[tuple[httpx.AsyncClient, EventReader]]:
        """A worker, an HTTP client, and the monitor's event stream once the service watches
        the monitor."""
        async with (
            running_worker(self.client, self.task_queue),
            httpx.AsyncClient(timeout=30) as http,
            event_stream(self.url(f"/monitors/events?monitor={slug}")) as events,
        ):
            await events.comment(f"watching {slug}")
            yield http, events


@pytest.fixture
async def setup(client: Client) -> AsyncIterator[Setup]:
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    service = MonitorService(client, task_queue=task_queue, discover_every=0.2, keepalive=1)
    await service.start("127.0.0.1", 0)
    s = Setup(client, task_queue, service)
    try:
        yield s
    finally:
        await service.close()
        for handle in s.handles:
            if (await handle.describe()).close_time is None:
                await handle.terminate(reason="test over")


@asynccontextmanager
async def event_stream(url: str) -> AsyncIterator[EventReader]:
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(30, read=60)) as http,
        http.stream("GET", url) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield EventReader(response)


async def test_pings_start_finish_and_fail_runs(client: Client, setup: Setup) -> None:
    """/start opens a run, POST /ping with a body completes it (output kept, duration measured),
    /fail and a non-zero exit_code record errors, a JSON body works too; answers are 202 JSON."""
    handle, key = await setup.monitor()
    async with running_worker(client, setup.task_queue), httpx.AsyncClient(timeout=30) as http:
        started = await http.get(setup.url(f"/ping/{key}/start"))
        assert started.status_code == 202
        assert started.json() | {"sent_at": None} == {
            "accepted": True,
            "monitor": handle.id.removeprefix("monitor-"),
            "status": "in_progress",
            "exit_code": None,
            "sent_at": None,
        }
        await until(handle, lambda v: v.open_run is not None)
        done = await http.post(setup.url(f"/ping/{key}"), content="backed up 42 files\n")
        assert done.status_code == 202 and done.json()["status"] == "ok"
        run = (await until(handle, lambda v: v.health is Health.HEALTHY)).recent[0]
        assert (run.status, run.source, run.output) == (
            CheckInStatus.OK,
            CheckInSource.PING,
            "backed up 42 files\n",
        )
        assert run.started_at is not None and run.duration_seconds is not None
        assert run.duration_seconds > 0

        failed = await http.get(setup.url(f"/ping/{key}/fail"), params={"exit_code": "3"})
        assert failed.json()["status"] == "error"
        assert (await until(handle, lambda v: v.total_checkins == 2)).recent[0].exit_code == 3
        by_code = await http.post(setup.url(f"/ping/{key}?exit_code=1"), content="disk full")
        assert by_code.json() | {"sent_at": None} == {
            "accepted": True,
            "monitor": handle.id.removeprefix("monitor-"),
            "status": "error",
            "exit_code": 1,
            "sent_at": None,
        }
        as_json = await http.post(
            setup.url(f"/ping/{key}"), json={"output": "fine again", "duration_seconds": 2.5}
        )
        assert as_json.status_code == 202
        final = await until(handle, lambda v: v.total_checkins == 4)
    assert [(c.status, c.output) for c in final.recent] == [
        (CheckInStatus.OK, "fine again"),
        (CheckInStatus.ERROR, "disk full"),
        (CheckInStatus.ERROR, None),
        (CheckInStatus.OK, "backed up 42 files\n"),
    ]
    assert final.recent[0].duration_seconds == 2.5
    assert (final.health, final.consecutive_failures, final.total_failures) == (
        Health.HEALTHY,
        0,
        2,
    )


async def test_unknown_keys_get_404_and_bad_requests_400(client: Client, setup: Setup) -> None:
    """Keys of no monitor, a wrong secret, a malformed key and a deleted monitor's key: 404;
    malformed exit codes and bodies: 400; other methods and paths: 405 / 404; all JSON."""
    handle, key = await setup.monitor()
    slug = handle.id.removeprefix("monitor-")
    doomed, doomed_key = await setup.monitor()
    async with running_worker(client, setup.task_queue), httpx.AsyncClient(timeout=30) as http:
        await doomed.execute_update(MonitorWorkflow.delete, DeleteRequest())
        await doomed.result()

        async def status(method: str, path: str, **kwargs: Any) -> tuple[int, str]:
            response = await http.request(method, setup.url(path), **kwargs)
            assert response.headers["content-type"] == "application/json"
            return response.status_code, response.json().get("error", "")

        for unknown in (
            f"nobody-here.{uuid.uuid4().hex}",
            f"{slug}.{uuid.uuid4().hex}",  # the right monitor, a wrong secret
            slug,
            "%2e%2e.not-a-slug-anyway",
            doomed_key,
        ):
            assert await status("GET", f"/ping/{unknown}") == (404, "unknown ping key")
        assert await status("GET", f"/ping/{key}", params={"exit_code": "x"}) == (
            400,
            "exit_code must be an integer, not 'x'",
        )
        assert (await status("GET", f"/ping/{key}?exit_code=1&exit_code=2"))[0] == 400
        assert (await status("GET", f"/ping/{key}/start", params={"exit_code": "0"}))[0] == 400
        json_header = {"content-type": "application/json"}
        code, error = await status("POST", f"/ping/{key}", content="{nope", headers=json_header)
        assert (code, error.startswith("body is not valid JSON")) == (400, True)
        assert await status("POST", f"/ping/{key}", json=[1, 2]) == (
            400,
            "a JSON body must be an object",
        )
        assert await status("POST", f"/ping/{key}", json={"output": "x", "colour": "red"}) == (
            400,
            "unknown field(s) in body: colour",
        )
        code, error = await status("POST", f"/ping/{key}", json={"exit_code": "many"})
        assert code == 400 and "exit_code" in error
        assert (await status("PUT", f"/ping/{key}"))[0] == 405
        assert (await http.delete(setup.url(f"/ping/{key}"))).headers["allow"] == "GET, POST"
        assert (await status("GET", "/nothing/here"))[0] == 404
        big = b"x" * (1024 * 1024 + 1)
        assert (await status("POST", f"/ping/{key}", content=big))[0] == 413
        # None of that reached the monitor; a good ping still works.
        assert (await status("GET", f"/ping/{key}"))[0] == 202
        current = await until(handle, lambda v: v.total_checkins == 1)
    assert (current.refused_total, current.health) == (0, Health.HEALTHY)


async def test_hostile_bodies_and_filters_get_400_not_500(client: Client, setup: Setup) -> None:
    """JSON nested deeper than the parser's recursion limit, more than 50 `?monitor=` filters, and
    a slug with a trailing newline are bad requests, answered 400 with the reason."""
    handle, key = await setup.monitor()
    async with running_worker(client, setup.task_queue), httpx.AsyncClient(timeout=30) as http:
        for deep in (b"[" * 100_000, b'{"output": ' * 50_000 + b"1" + b"}" * 50_000):
            response = await http.post(
                setup.url(f"/ping/{key}"),
                content=deep,
                headers={"content-type": "application/json"},
            )
            assert (response.status_code, response.json()) == (
                400,
                {"error": "body is JSON nested too deeply"},
            )
        filters = "&".join(f"monitor=m{i:03d}" for i in range(51))
        response = await http.get(setup.url(f"/monitors/events?{filters}"))
        assert (response.status_code, response.json()) == (
            400,
            {"error": "at most 50 monitor= filters per event stream"},
        )
        response = await http.get(setup.url("/monitors/events?monitor=abc%0A"))
        assert (response.status_code, response.json()) == (
            400,
            {"error": "invalid monitor slug 'abc\\n'"},
        )
        assert (await http.get(setup.url(f"/ping/{key}%0A"))).status_code == 404
        assert (await view(handle)).total_checkins == 0


async def raw_exchange(service: MonitorService, request: bytes) -> bytes:
    """Send bytes as they are, close the sending side, and read all the service answers."""
    reader, writer = await asyncio.open_connection(service.host, service.port)
    try:
        writer.write(request)
        await writer.drain()
        writer.write_eof()
        return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


def service_log(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ping_service.log.name]


async def test_a_request_cut_short_is_one_log_line_and_no_traceback(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that ends the connection inside its request (a body shorter than its
    Content-Length, a head that never ends, nothing at all) has gone: the service answers nobody,
    logs at most one warning line for it without a traceback, and serves the next request."""
    caplog.set_level(logging.INFO, logger=ping_service.log.name)
    short_body = (
        b"POST /ping/backup.0123456789abcdef HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 100\r\n\r\nonly 12 byte"
    )
    assert await raw_exchange(setup.service, short_body) == b""
    async with asyncio.timeout(10):  # logged once the request's task sees the connection gone
        while not service_log(caplog):
            await asyncio.sleep(0.01)
    (line,) = service_log(caplog)
    assert (line.levelno, line.getMessage(), line.exc_info) == (
        logging.WARNING,
        "monitor_http.request.incomplete",
        None,
    )
    caplog.clear()
    assert await raw_exchange(setup.service, b"GET /ping/backup.0123 HTTP/1.1\r\nHo") == b""
    assert await raw_exchange(setup.service, b"") == b""
    assert service_log(caplog) == []
    assert "Traceback" not in caplog.text
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(setup.url("/ping/backup.0123"))).status_code == 404


async def test_a_number_too_long_to_convert_is_a_400(setup: Setup) -> None:
    """A JSON body whose exit_code has 5,000 digits (Python refuses to convert it) is a bad body,
    not a 500."""
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            setup.url("/ping/backup.0123456789abcdef"),
            content=b'{"exit_code": ' + b"1" * 5000 + b"}",
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400
    assert response.json()["error"].startswith("body is not valid JSON: Exceeds the limit")


async def test_an_unreadable_memo_under_a_monitors_id_is_an_unknown_key(
    client: Client, setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """Any client may start a workflow under a monitor's id: if its memo cannot be decoded, a
    ping to it is an unknown key (404) with one warning line, not a 500 with a traceback."""
    caplog.set_level(logging.INFO, logger=ping_service.log.name)
    slug = f"alien-{uuid.uuid4().hex[:10]}"
    undecodable = RawValue(Payload(metadata={"encoding": b"binary/nobody-knows"}, data=b"\x00"))
    alien = await client.start_workflow(
        "NotAMonitor",
        id=monitor_workflow_id(slug),
        task_queue=setup.task_queue,  # no worker ever runs it
        memo={MEMO_PING_KEY_DIGEST: undecodable},
    )
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.get(setup.url(f"/ping/{slug}.{uuid.uuid4().hex}"))
    finally:
        await alien.terminate(reason="test over")
    assert (response.status_code, response.json()) == (404, {"error": "unknown ping key"})
    (line,) = service_log(caplog)
    assert (line.levelno, line.getMessage(), line.exc_info) == (
        logging.WARNING,
        "monitor_http.ping.unreadable_memo",
        None,
    )
    assert "Traceback" not in caplog.text


async def test_connections_over_the_cap_get_503(client: Client, setup: Setup) -> None:
    """With two connections allowed, two open event streams take both: a ping is answered 503
    (with Retry-After) until one of them closes."""
    handle, key = await setup.monitor()
    slug = handle.id.removeprefix("monitor-")
    service = MonitorService(client, task_queue=setup.task_queue, max_connections=2)
    await service.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            async with (
                event_stream(f"{service.url}/monitors/events?monitor={slug}") as first,
                event_stream(f"{service.url}/monitors/events?monitor={slug}") as second,
            ):
                await first.comment("connected")
                await second.comment("connected")
                refused = await http.get(f"{service.url}/ping/{key}")
                assert (refused.status_code, refused.json(), refused.headers["retry-after"]) == (
                    503,
                    {"error": "too many connections; try again shortly"},
                    "1",
                )
            async with asyncio.timeout(10):  # the streams' slots come free once they close
                while (await http.get(f"{service.url}/ping/{key}")).status_code == 503:
                    await asyncio.sleep(0.05)
    finally:
        await service.close()


async def test_an_event_stream_client_that_stops_reading_is_dropped(
    client: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An event-stream client that takes nothing (the server's send waits on its full socket) is
    given up after WRITE_TIMEOUT with one warning line, instead of holding its slot forever."""
    monkeypatch.setattr(ping_service, "WRITE_TIMEOUT", 0.05)
    caplog.set_level(logging.INFO, logger=ping_service.log.name)
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never hangs up
        raise AssertionError

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message["type"])
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()  # the socket is full and stays full

    service = MonitorService(client, task_queue=f"test-{uuid.uuid4().hex[:12]}")
    try:
        async with asyncio.timeout(10):
            await service.app(
                asgi_scope("GET", "/monitors/events", b"monitor=nobody"), receive, send
            )
    finally:
        await service.close()
    assert sent == ["http.response.start", "http.response.body"]
    (line,) = service_log(caplog)
    assert (line.levelno, line.getMessage()) == (logging.WARNING, "monitor_http.events.stalled")


def asgi_scope(method: str, path: str, query: bytes = b"") -> dict[str, Any]:
    """An HTTP request's ASGI scope, as a server gives it to the app."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8780),
    }


async def test_the_app_answers_what_needs_no_temporal_as_json(client: Client) -> None:
    """Through the ASGI app alone: an unknown path is a 404 naming it, another method a 405 with
    Allow (HEAD included), a chunked upload 411, an oversized or mis-sized body 413 / 400; every
    answer is JSON."""
    service = MonitorService(client)
    transport = httpx.ASGITransport(app=service.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as http:

        async def answer(response: httpx.Response) -> tuple[int, str]:
            assert response.headers["content-type"] == "application/json"
            return response.status_code, response.json()["error"]

        async def chunks() -> AsyncIterator[bytes]:
            yield b"output"

        key = "backup.0123456789abcdef"
        assert await answer(await http.get("/pong")) == (404, "no such endpoint: /pong")
        assert await answer(await http.put(f"/ping/{key}/fail")) == (
            405,
            "PUT is not allowed here (use GET, POST)",
        )
        head = await http.head(f"/ping/{key}")
        assert (head.status_code, head.headers["allow"]) == (405, "GET, POST")
        assert (await http.post("/monitors/events")).headers["allow"] == "GET"
        assert await answer(await http.post(f"/ping/{key}", content=chunks())) == (
            411,
            "send the body with a Content-Length (curl --data-binary @file)",
        )
        big = b"x" * (ping_service.MAX_BODY_BYTES + 1)
        assert await answer(await http.post(f"/ping/{key}", content=big)) == (
            413,
            "body larger than 1048576 bytes",
        )
        bad_length = await http.post(f"/ping/{key}", headers={"content-length": "many"})
        assert await answer(bad_length) == (400, "Content-Length is not a number")
    await service.close()


async def test_the_event_stream_sends_check_in_and_health_events(
    client: Client, setup: Setup
) -> None:
    """`/monitors/events?monitor=SLUG`: started, ok, error, then ok with monitor.healthy, each an
    SSE frame with `id: slug:offset`, the event type, and the event as JSON."""
    handle, key = await setup.monitor()
    slug = handle.id.removeprefix("monitor-")
    async with setup.watching(slug) as (http, events):
        await http.get(setup.url(f"/ping/{key}/start"))
        first_id, started = await events.event()
        assert started.type.value == "checkin.started" and started.slug == slug
        assert first_id.startswith(f"{slug}:")
        await http.post(setup.url(f"/ping/{key}"), content="done")
        _, ok = await events.event()
        assert ok.type.value == "checkin.ok" and ok.checkin is not None
        assert ok.checkin.output == "done" and ok.health is Health.HEALTHY
        await http.get(setup.url(f"/ping/{key}/fail"))
        _, error = await events.event()
        assert (error.type.value, error.health, error.consecutive_failures) == (
            "checkin.error",
            Health.FAILING,
            1,
        )
        await http.get(setup.url(f"/ping/{key}"))
        last_id, healed = await events.event()
        assert healed.type.value == "checkin.ok"
        assert (await events.event())[1].type.value == "monitor.healthy"
    first, last = (int(i.rsplit(":", 1)[1]) for i in (first_id, last_id))
    assert last == first + 3  # offsets in the monitor's stream, one per event


async def test_an_item_that_is_not_an_event_is_skipped(client: Client, setup: Setup) -> None:
    """Any client may publish to a monitor's stream: an item there that is not a MonitorEvent is
    skipped (and logged), and the check-in after it still reaches the event-stream client, with
    the offset the stream gave it."""
    handle, key = await setup.monitor()
    slug = handle.id.removeprefix("monitor-")
    async with setup.watching(slug) as (http, events):
        stream = WorkflowStreamClient.create(client, handle.id)
        junk = stream.topic(EVENTS_TOPIC)
        junk.publish({"not": "an event"})
        junk.publish("nor this")
        await stream.flush()
        assert await stream.get_offset() == 2
        assert (await http.get(setup.url(f"/ping/{key}"))).status_code == 202
        event_id, ok = await events.event()
    assert (event_id, ok.type.value, ok.slug) == (f"{slug}:2", "checkin.ok", slug)


async def test_clients_coming_and_going_share_one_reader_that_ends_when_unwanted(
    client: Client, setup: Setup
) -> None:
    """Twelve clients, one after the other, watch a quiet monitor: one reader serves them all, so
    the workflow holds one long poll (an update), not one per client. With nobody watching, the
    reader ends at the monitor's next event, its poll answered; a client coming later gets a new
    one."""
    handle, key = await setup.monitor()
    slug = handle.id.removeprefix("monitor-")
    url = setup.url(f"/monitors/events?monitor={slug}")

    async def polls() -> tuple[int, int]:
        """Stream polls the monitor's workflow accepted, and those it answered."""
        kinds = [e.event_type for e in (await handle.fetch_history()).events]
        return (
            kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
            kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED),
        )

    assert setup.service.watched == frozenset()
    async with running_worker(client, setup.task_queue), httpx.AsyncClient(timeout=30) as http:
        for _ in range(12):
            async with event_stream(url) as events:
                await events.comment(f"watching {slug}")
        async with asyncio.timeout(10):
            while await polls() != (1, 0):
                await asyncio.sleep(0.05)
        assert setup.service.watched == {slug}

        assert (await http.get(setup.url(f"/ping/{key}"))).status_code == 202
        async with asyncio.timeout(10):
            while setup.service.watched:
                await asyncio.sleep(0.05)
        assert await polls() == (1, 1)

        async with event_stream(url) as events:
            await events.comment(f"watching {slug}")
            await http.get(setup.url(f"/ping/{key}/fail"))
            _, error = await events.event()
        assert error.type.value == "checkin.error"


async def test_the_all_monitors_stream_picks_up_monitors_created_later(
    client: Client, setup: Setup
) -> None:
    """`/monitors/events` without a filter finds a monitor created after the client connected
    and delivers its events from the first one."""
    async with (
        running_worker(client, setup.task_queue),
        httpx.AsyncClient(timeout=30) as http,
        event_stream(setup.url("/monitors/events")) as events,
    ):
        await events.comment("connected")
        handle, key = await setup.monitor()
        slug = handle.id.removeprefix("monitor-")
        response = await http.post(setup.url(f"/ping/{key}/fail?exit_code=7"), content="boom")
        assert response.status_code == 202
        _, error = await events.event(timeout=30)
    assert (error.type.value, error.slug) == ("checkin.error", slug)
    assert error.checkin is not None and error.checkin.exit_code == 7


async def test_a_ping_without_a_worker_waits_in_temporal(client: Client, setup: Setup) -> None:
    """With no worker at all the key is still checked (404 / 202) and the check-in is kept as a
    signal; once a worker starts it is recorded with the time it was sent."""
    handle, key = await setup.monitor()
    async with httpx.AsyncClient(timeout=30) as http:
        missing = await http.get(setup.url(f"/ping/{handle.id[8:]}.{uuid.uuid4().hex}"))
        assert missing.status_code == 404
        sent = await http.post(setup.url(f"/ping/{key}"), content="ran while nobody listened")
        assert sent.status_code == 202
    sent_at = datetime.fromisoformat(sent.json()["sent_at"])
    await asyncio.sleep(1.5)  # the worker starts well after the ping
    worker_started = datetime.now(UTC)
    async with running_worker(client, setup.task_queue):
        recorded = await until(handle, lambda v: v.total_checkins == 1)
    [checkin] = recorded.recent
    assert (checkin.status, checkin.output) == (CheckInStatus.OK, "ran while nobody listened")
    assert checkin.created_at == sent_at < worker_started
    assert recorded.health is Health.HEALTHY


async def test_serve_runs_the_service_as_a_process(
    client: Client, setup: Setup, temporal_address: str
) -> None:
    """`starter.py serve --port 0` prints where it listens, answers pings, and stops on SIGTERM
    with exit code 0, ending an open event stream first."""
    handle, key = await setup.monitor()
    process, banner = await start_service(
        "--address", temporal_address, "--task-queue", setup.task_queue, "serve", "--port", "0",
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with AsyncExitStack() as stack:
        stack.push_async_callback(process.wait)
        stack.callback(lambda: process.returncode is None and process.kill())
        assert process.stdout is not None
        assert banner.startswith("Monitor HTTP service on http://127.0.0.1:"), banner
        base = banner.split(" on ", 1)[1].split(" ", 1)[0]
        async with running_worker(client, setup.task_queue), httpx.AsyncClient(timeout=30) as http:
            assert (await http.get(f"{base}/ping/{key}")).status_code == 202
            assert (await http.get(f"{base}/ping/{handle.id[8:]}.{'x' * 20}")).status_code == 404
            await until(handle, lambda v: v.health is Health.HEALTHY)
        async with event_stream(f"{base}/monitors/events") as events:
            await events.comment("connected")
            process.send_signal(signal.SIGTERM)
            with pytest.raises(AssertionError, match="the event stream ended"):
                await asyncio.wait_for(events.event(), 30)
        rest = (await asyncio.wait_for(process.stdout.read(), 30)).decode()
        assert await process.wait() == 0, rest
        assert "Monitor HTTP service stopped." in rest
        assert "Traceback" not in rest
