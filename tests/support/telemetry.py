"""What the telemetry tests share: a real OTLP/HTTP receiver on loopback, a Prometheus scrape,
a client that is traced and serves metrics, and a small workflow that records workflow metrics.

The receiver is ``http.server`` on its own thread, because the exporter posts from the tracer
provider's threads while a test awaits on the event loop; what it receives is decoded with the
OTLP protobuf classes (``ExportTraceServiceRequest``), as a collector would.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from tests.support.processes import free_port
from treadle import observability
from treadle.activities import telemetry as activity_telemetry
from treadle.connection import connect


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: Mapping[str, Any]
    status_code: int
    service: str


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


@dataclass
class OtlpReceiver:
    """``POST /v1/traces`` with an ``ExportTraceServiceRequest`` body, as a collector takes it."""

    port: int = 0
    bodies: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set to (the exporter appends the path)."""
        return f"http://127.0.0.1:{self.port}"

    def take(self, body: bytes, path: str) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)  # a body that is not the protobuf fails the test loudly
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status_code=span.status.code,
                            service=str(resource.get("service.name", "")),
                        )
                    )
        with self._lock:
            self.bodies.append(body)
            self.paths.append(path)
            self.spans.extend(received)

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def raw(self) -> bytes:
        with self._lock:
            return b"".join(self.bodies)


_receiver: OtlpReceiver | None = None


def shared_receiver() -> OtlpReceiver:
    """The process's one receiver: tracing is installed once per process, with one endpoint,
    so every test that reads spans reads them here (each by its own trace id). Its thread is a
    daemon that ends with the test process."""
    global _receiver
    if _receiver is not None:
        return _receiver
    receiver = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(415)
                return
            receiver.take(body, self.path)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _receiver = receiver
    return receiver


async def flush_spans() -> None:
    """Export every ended span now (the batch processor would wait for its schedule)."""
    provider = observability.tracer_provider()
    assert provider is not None, "tracing is not configured"
    assert await asyncio.to_thread(provider.force_flush, 30_000)


@dataclass
class Observed:
    """A client that is traced (to ``receiver``) and serves metrics at ``metrics_url``."""

    client: Client
    receiver: OtlpReceiver
    metrics_url: str

    async def scrape(self) -> str:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(self.metrics_url)
        response.raise_for_status()
        return response.text


async def observed_client(address: str) -> Observed:
    """A client traced to the shared receiver, with a metrics endpoint of its own."""
    receiver = shared_receiver()
    environ = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "treadle-tests",
    }
    if observability.configure_tracing(environ) is None:
        pytest.fail("tracing did not install")
    port = free_port()
    runtime = observability.metrics_runtime(port)
    client = await connect(address=address, namespace="default", environ=environ, runtime=runtime)
    return Observed(client, receiver, observability.metrics_url("127.0.0.1", port))


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def samples(text: str, name: str, **labels: str) -> list[float]:
    """Values of the samples of ``name`` whose labels include ``labels``."""
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != name:
            continue
        have = {m["key"]: m["value"] for m in _LABEL.finditer(match["labels"] or "")}
        if all(have.get(k) == v for k, v in labels.items()):
            found.append(float(match["value"]))
    return found


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the matching samples (0 when there is none)."""
    return sum(samples(text, name, **labels))


def uncached_worker(template: Worker, task_queue: str) -> Worker:
    """A worker like ``template`` (built for another task queue, never run) on ``task_queue``
    with no workflow cache: every workflow task replays the whole history, as after an eviction.
    Built from the template's initial config, so the client's plugins apply once."""
    return Worker(**{**template.config(), "task_queue": task_queue, "max_cached_workflows": 0})


def fresh_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@contextmanager
def worker_log(formatter: logging.Formatter) -> Iterator[io.StringIO]:
    """What the worker's log handler writes, as ``configure_logging`` sets it up (without
    taking the test runner's own handlers away)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    level = root.level
    flags = workflow.logger.workflow_info_on_message, activity.logger.activity_info_on_message
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    workflow.logger.workflow_info_on_message = False
    activity.logger.activity_info_on_message = False
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        workflow.logger.workflow_info_on_message, activity.logger.activity_info_on_message = flags


@contextmanager
def content_capture() -> Iterator[None]:
    """Prompts and completions on the model-call spans (after tracing is set up, which sets the
    switch), for the block only."""
    before = activity_telemetry.content_capture()
    activity_telemetry.set_content_capture(True)
    try:
        yield
    finally:
        activity_telemetry.set_content_capture(before)
