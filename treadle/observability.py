"""Traces and metrics, set up once per process from the standard OpenTelemetry environment.

Traces use temporalio's own integration, ``OpenTelemetryPlugin``, on every client
``treadle.connection.connect`` makes (and so on the workers built from it): the client's
``StartWorkflow`` span is the root; the workflow's ``RunWorkflow`` span, each
``StartActivity`` / ``RunActivity`` pair, the update and signal handlers (a client's answer, an
approval) hang under it; the activities add their own spans below (``treadle.activities.telemetry``:
``chat <model>`` with the GenAI conventions, ``execute_tool <tool>``, ``hook <name>``). A run that
continues as new hands its context on, so the next run's spans join the same trace.

Replay safety is the plugin's: the tracer provider is ``create_tracer_provider()``'s, whose span
ids inside a workflow come from the workflow's deterministic random and whose spans are not
ended (so not exported) while the workflow replays history. A cache eviction or a worker
restart re-creates the same spans with the same ids and drops them; only the first execution
exports.

What turns tracing on (nothing set: no provider, no plugin, no cost):

- ``OTEL_TRACES_EXPORTER``: ``otlp``, ``console`` (spans printed to stderr), both
  (``otlp,console``) or ``none``; unset, ``otlp`` when an endpoint below is set;
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` is appended) or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as it is): OTLP over HTTP with protobuf, the
  collector's port 4318; ``OTEL_EXPORTER_OTLP_HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``
  and the certificate settings are read by the exporter itself;
- ``OTEL_SERVICE_NAME`` (default ``treadle``) and ``OTEL_RESOURCE_ATTRIBUTES`` name the process;
- ``OTEL_SDK_DISABLED=true`` turns it all off;
- ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` records prompts and completions on
  the model-call spans (off by default: they are the user's data).

Metrics: :func:`metrics_runtime` is a Temporal ``Runtime`` whose Prometheus endpoint serves the
SDK's own metrics (``temporal_*``) and Treadle's (``treadle_*``, recorded through
``activity.metric_meter()`` and ``workflow.metric_meter()``): one endpoint, one server.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)
from temporalio.contrib.opentelemetry import (
    OpenTelemetryPlugin,
    ReplaySafeTracerProvider,
    create_tracer_provider,
)
from temporalio.plugin import SimplePlugin
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from treadle.activities import telemetry as activity_telemetry

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "DEFAULT_SERVICE_NAME",
    "TelemetrySettingsError",
    "TracingSettings",
    "client_plugins",
    "configure_tracing",
    "metrics_runtime",
    "metrics_url",
    "tracer_provider",
]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
DEFAULT_SERVICE_NAME = "treadle"
_EXPORTERS = frozenset({"otlp", "console"})
_HTTP_PROTOBUF = "http/protobuf"


class TelemetrySettingsError(Exception):
    """The OpenTelemetry environment or the metrics endpoint cannot be used (one line)."""


@dataclass(frozen=True)
class TracingSettings:
    """What the environment asks of tracing."""

    exporters: tuple[str, ...] = ()
    """``otlp`` and/or ``console``; empty: tracing is off."""
    endpoint: str | None = None
    """Where OTLP spans are posted (the whole URL, ``/v1/traces`` included)."""
    service_name: str = DEFAULT_SERVICE_NAME
    capture_content: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TracingSettings:
        """Read the standard variables; :class:`TelemetrySettingsError` for a value not usable."""
        if _true(environ, "OTEL_SDK_DISABLED"):
            return cls()
        endpoint = _endpoint(environ)
        named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
        if named:
            exporters = tuple(dict.fromkeys(n.strip() for n in named.split(",") if n.strip()))
            if exporters == ("none",):
                return cls()
            unknown = [n for n in exporters if n not in _EXPORTERS]
            if unknown:
                raise TelemetrySettingsError(
                    f"OTEL_TRACES_EXPORTER names {', '.join(map(repr, unknown))}; Treadle "
                    "exports traces with otlp, console or none"
                )
        else:
            exporters = ("otlp",) if endpoint else ()
        if "otlp" in exporters:
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or _HTTP_PROTOBUF
            ).strip()
            if protocol != _HTTP_PROTOBUF:
                raise TelemetrySettingsError(
                    f"OTLP protocol {protocol!r} is not supported: Treadle sends traces over "
                    f"{_HTTP_PROTOBUF} (a collector's port 4318)"
                )
            endpoint = endpoint or "http://localhost:4318/v1/traces"
        return cls(
            exporters=exporters,
            endpoint=endpoint if "otlp" in exporters else None,
            service_name=environ.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME,
            capture_content=_true(environ, CAPTURE_CONTENT_ENV),
        )


_provider: ReplaySafeTracerProvider | None = None


def configure_tracing(environ: Mapping[str, str]) -> ReplaySafeTracerProvider | None:
    """Install the process's tracer provider as ``environ`` asks; ``None``: tracing is off.

    OpenTelemetry has one global provider per process, so the first call that turns tracing on
    decides how it is exported; later calls return that provider. A call that finds tracing off
    installs nothing, and a later one may still turn it on. A replay-safe provider some other
    code installed first is used as it is (the plugin needs one); any other global provider is
    left alone, and Treadle does not trace.
    """
    global _provider
    if _provider is not None:
        return _provider
    settings = TracingSettings.from_env(environ)
    existing = trace.get_tracer_provider()
    if isinstance(existing, ReplaySafeTracerProvider):
        _provider = existing
    elif settings.exporters:
        _provider = _install(settings)
    if _provider is not None:
        activity_telemetry.set_content_capture(settings.capture_content)
    return _provider


def tracer_provider() -> ReplaySafeTracerProvider | None:
    """The provider :func:`configure_tracing` installed or adopted (to flush it, say)."""
    return _provider


def client_plugins(environ: Mapping[str, str]) -> list[SimplePlugin]:
    """The plugins every Treadle client gets: temporalio's tracing, when tracing is on."""
    if configure_tracing(environ) is None:
        return []
    # add_temporal_spans: the workflow, each activity and each message handler get a span of
    # their own, the skeleton the activities' spans hang from.
    return [OpenTelemetryPlugin(add_temporal_spans=True)]


def metrics_runtime(port: int, host: str = "127.0.0.1") -> Runtime:
    """A Temporal runtime serving Prometheus metrics at ``http://HOST:PORT/metrics``."""
    if not 0 < port < 65536:
        raise TelemetrySettingsError(f"--metrics-port {port} is not a port from 1 to 65535")
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
    except Exception as exc:  # the bridge reports a taken port or a bad host as a plain error
        reason = " ".join(str(exc).split())
        raise TelemetrySettingsError(
            f"cannot serve metrics on {address}: {reason}; choose another --metrics-port"
        ) from exc


def metrics_url(host: str, port: int) -> str:
    """Where Prometheus scrapes a worker run with ``--metrics-host HOST --metrics-port PORT``."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


def _install(settings: TracingSettings) -> ReplaySafeTracerProvider:
    provider = create_tracer_provider(
        resource=Resource.create({SERVICE_NAME: settings.service_name})
    )
    if "otlp" in settings.exporters:
        # Imported only when used: the exporter pulls in protobuf and an HTTP stack.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint))
        )
    if "console" in settings.exporters:
        # stderr: the command line's stdout is for its results (JSON lines when piped).
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    trace.set_tracer_provider(provider)
    return provider


def _endpoint(environ: Mapping[str, str]) -> str | None:
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def _true(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() == "true"
