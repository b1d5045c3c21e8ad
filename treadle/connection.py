"""The one place that makes Temporal clients, and registers the search attributes Treadle needs.

Connection settings come from ``temporalio.envconfig`` (``TEMPORAL_ADDRESS``,
``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_PROFILE`` and ``temporal.toml`` profiles);
explicit arguments win over them. Every client uses the pydantic data converter, because every
workflow and activity exchanges pydantic models; when ``TREADLE_ENCRYPTION_KEYS`` is set (see
``treadle.codec``) it also encrypts every payload, and failure messages with them. Every payload
of :data:`PAYLOAD_SIZE_THRESHOLD` bytes or more goes through Temporal's External Storage into the
blob store (``TREADLE_STORE``, default ``store/`` in the data directory ``TREADLE_HOME``,
``none`` turns it off), so the history holds a reference and no payload meets Temporal's 2 MB limit.

The address must be ``HOST:PORT`` with a port from 1 to 65535 (``[::1]:7233`` for IPv6); it is
checked before anything connects. :func:`check_settings` checks what a process was given before it
starts anything (a dev server, say).

The error tree (every message is one line that says what to do)::

    TemporalConnectionError
    ├── ConnectionSettingsError        the address, the envconfig file or profile, or the
    │                                  encryption keys cannot be used
    ├── ConnectionFailed               no Temporal server answered at the address
    ├── WorkflowTaskFailing            a run's worker fails its workflow task (its reason)
    └── SearchAttributeError
        ├── SearchAttributesRejected     the server would not list or add them (Temporal Cloud
        │                                wants them created in its UI or with tcld)
        └── SearchAttributeTypeConflict  one exists with another type than Treadle needs
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.errordetails.v1 import QueryFailedFailure
from temporalio.api.failure.v1 import Failure
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.common import SearchAttributeIndexedValueType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
)
from temporalio.envconfig import ClientConfigProfile
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from treadle import home
from treadle.codec import (
    READER_ERRORS,
    EncryptionCodec,
    EncryptionError,
    EncryptionSettingsError,
    Keyring,
    NoKeysCodec,
    WorkerCannotDecrypt,
)
from treadle.observability import TelemetrySettingsError, TracingSettings, client_plugins
from treadle.payloads import TolerantPayloadConverter
from treadle.stores import StoreLocation, StoreSettingsError, external_storage, parse_store

__all__ = [
    "DEFAULT_ADDRESS",
    "PAYLOAD_SIZE_THRESHOLD",
    "STORE_ENV",
    "ConnectionFailed",
    "ConnectionSettingsError",
    "SearchAttributeError",
    "SearchAttributeTypeConflict",
    "SearchAttributesRejected",
    "TemporalConnectionError",
    "WorkflowTaskFailing",
    "check_settings",
    "connect",
    "data_converter",
    "ensure_search_attributes",
    "parse_address",
    "query_failure",
    "search_attribute_type_name",
    "store_location",
    "workflow_task_failure",
]

DEFAULT_ADDRESS = "127.0.0.1:7233"
"""Where the dev server listens (``temporal-dev.yaml``) when nothing else names an address."""

STORE_ENV = "TREADLE_STORE"
"""Where the blob store is (a directory or ``s3://BUCKET/PREFIX``, see ``treadle.stores``), or
``none`` to keep every payload inline."""

PAYLOAD_SIZE_THRESHOLD = 256 * 1024
"""Payloads of this many bytes or more (after encryption) are stored, not sent inline.

Temporal refuses a payload over 2 MB and warns from 512 KB; a workflow task completion, with every
command's payloads, must fit a 4 MB gRPC message, and a history is suggested to continue as new
at 4 MB. At 256 KiB (the SDK's default) a payload is an eighth of the hard limit and half the
warning, so even several large payloads scheduled in one workflow task stay far from 4 MB, while
the everyday payloads — kilobytes, since conversations already travel as store keys — stay
inline, readable in the Web UI and free of file I/O.
"""

CONNECT_TIMEOUT = timedelta(seconds=10)
"""How long to wait for a server to answer; a port that accepts and stays silent would hang."""

OPERATOR_TIMEOUT = timedelta(seconds=10)

_LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>[0-9]{1,5})$")


class TemporalConnectionError(Exception):
    """Base of the errors raised while reaching Temporal."""


class ConnectionSettingsError(TemporalConnectionError):
    """The connection settings (``temporal.toml``, profile, environment) cannot be used."""


class ConnectionFailed(TemporalConnectionError):
    """No Temporal server answered at the configured address."""


class WorkflowTaskFailing(TemporalConnectionError):
    """The run's worker fails its workflow task, so Temporal answers none of its queries or
    updates; the message is the worker's reason."""


class SearchAttributeError(TemporalConnectionError):
    """The namespace lacks the search attributes Treadle upserts, and they cannot be added."""


class SearchAttributesRejected(SearchAttributeError):
    """The server refused to list or add search attributes."""


class SearchAttributeTypeConflict(SearchAttributeError):
    """A search attribute exists with a different type than the one Treadle needs."""


async def connect(
    *,
    address: str | None = None,
    namespace: str | None = None,
    profile: str | None = None,
    config_file: str | None = None,
    local_dev: bool = False,
    environ: Mapping[str, str] | None = None,
    store: str | Path | None = None,
    runtime: Runtime | None = None,
) -> Client:
    """Connect to Temporal with envconfig settings, overridden by the explicit arguments.

    ``local_dev=True`` ignores envconfig entirely: a ``TEMPORAL_API_KEY`` or TLS setting meant
    for a real cluster must not be sent to the embedded dev server. ``environ`` is where
    ``TREADLE_ENCRYPTION_KEYS`` is read (default: this process's environment); encryption applies
    to the dev server too. ``store`` is the External Storage directory (or ``"none"``); without
    it ``TREADLE_STORE`` in ``environ`` decides, then ``store/`` in the data directory
    (``treadle.home``). The client (and
    every worker built on it) is traced when ``environ`` sets up OpenTelemetry
    (``treadle.observability``); ``runtime`` is a Temporal runtime of one's own (``treadle worker
    --metrics-port`` serves Prometheus metrics from one).
    """
    environment = os.environ if environ is None else environ
    converter = data_converter(environment, store)
    try:
        plugins = client_plugins(environment)
    except TelemetrySettingsError as exc:
        raise ConnectionSettingsError(str(exc)) from exc
    if local_dev:
        options: Mapping[str, Any] = {}
    else:
        # The bridge reads temporal.toml from disk: keep that off the event loop.
        settings = await asyncio.to_thread(_load_profile, profile, config_file)
        options = settings.to_client_connect_config()
    if address:
        target, source = address, "Temporal address"
    elif options.get("target_host"):
        target = options["target_host"]
        # envconfig reads TEMPORAL_ADDRESS from the process environment over the profile's.
        env = os.environ.get("TEMPORAL_ADDRESS")
        source = "TEMPORAL_ADDRESS" if env else "the temporal.toml profile's address"
    else:
        target, source = DEFAULT_ADDRESS, "Temporal address"
    parse_address(target, source)
    try:
        return await asyncio.wait_for(
            Client.connect(
                target,
                namespace=namespace or options.get("namespace") or "default",
                api_key=options.get("api_key"),
                tls=options.get("tls"),
                rpc_metadata=options.get("rpc_metadata") or {},
                data_converter=converter,
                plugins=plugins,
                runtime=runtime,
            ),
            CONNECT_TIMEOUT.total_seconds(),
        )
    except ValueError as exc:  # the bridge's own check of the target, should ours miss a case
        raise ConnectionSettingsError(
            f"{source} {target!r} cannot be used: {_one_line(str(exc))}"
        ) from exc
    except TimeoutError as exc:
        reason = f"no answer within {CONNECT_TIMEOUT.total_seconds():g} s"
        raise ConnectionFailed(_cannot_reach(target, reason)) from exc
    except RuntimeError as exc:  # the bridge reports connect failures as RuntimeError
        raise ConnectionFailed(_cannot_reach(target, _connect_reason(exc))) from exc


def parse_address(address: str, source: str = "Temporal address") -> tuple[str, int]:
    """``HOST:PORT`` as (host, port), or :class:`ConnectionSettingsError` naming ``source``.

    ``source`` says where the address came from (``--address``, ``TEMPORAL_ADDRESS``...).
    """
    match = _ADDRESS.match(address)
    port = int(match["port"]) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise ConnectionSettingsError(
            f"{source} {address!r} is not HOST:PORT with a port from 1 to 65535 "
            "(e.g. 127.0.0.1:7233, [::1]:7233)"
        )
    return match["host"], port


def data_converter(environ: Mapping[str, str], store: str | Path | None = None) -> DataConverter:
    """The pydantic converter, encrypting with the keys ``TREADLE_ENCRYPTION_KEYS`` names and
    storing large payloads in the blob store (see :func:`store_location`).

    With encryption on, failures' messages and stack traces move into an encoded (so encrypted)
    attribute too: tool and provider errors can quote what a run works on. Without keys nothing
    is encoded, and an encrypted payload met on the way in is a clear error. The SDK runs the
    codec before External Storage (and reads back in the reverse order), so a stored payload is
    exactly as encrypted as an inline one; the reference left in the history names only a hash.
    """
    try:
        keyring = Keyring.from_env(environ)
    except EncryptionSettingsError as exc:
        raise ConnectionSettingsError(str(exc)) from exc
    try:
        external = external_storage(store_location(environ, store), environ, PAYLOAD_SIZE_THRESHOLD)
    except StoreSettingsError as exc:
        raise ConnectionSettingsError(str(exc)) from exc
    if keyring is None:
        return dataclasses.replace(
            pydantic_data_converter,
            payload_converter_class=TolerantPayloadConverter,
            payload_codec=NoKeysCodec(),
            external_storage=external,
        )
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=TolerantPayloadConverter,
        payload_codec=EncryptionCodec(keyring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
        external_storage=external,
    )


async def query_failure(client: Client, exc: WorkflowQueryFailedError) -> Exception:
    """The worker's reason behind a failed query, decoded as every other failure is.

    The SDK's ``WorkflowQueryFailedError`` carries only the failure's message, and with
    encryption on that is ``"Encoded failure"`` (the real one is encrypted with it). The whole
    failure travels in the gRPC status details: decoded here, a worker that cannot decrypt the
    run's history is a :class:`~treadle.codec.WorkerCannotDecrypt` naming the key id, a client
    that cannot decrypt the worker's reason is its own ``EncryptionError``, and any other
    reason is the same error with the decoded message.
    """
    rpc = exc.__cause__ or exc.__context__  # the SDK raises it while handling the RPCError
    if not isinstance(rpc, RPCError):
        return exc
    details = QueryFailedFailure()
    found = [
        d for d in rpc.grpc_status.details if d.Unpack(details) and details.HasField("failure")
    ]
    if not found:
        return exc
    return await _worker_reason(client, details.failure, WorkflowQueryFailedError)


async def workflow_task_failure(client: Client, workflow_id: str) -> Exception | None:
    """Why the run's worker fails its workflow task, from the run's history, decoded.

    Temporal answers the queries and updates of such a run only ``Workflow Task in failed
    state`` (FAILED_PRECONDITION). A worker that cannot decrypt the history is a
    :class:`~treadle.codec.WorkerCannotDecrypt` naming the key id; another reason is a
    :class:`WorkflowTaskFailing`; ``None`` when the history holds no such failure.
    """
    failure = None
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("workflow_task_failed_event_attributes"):
            failure = event.workflow_task_failed_event_attributes.failure
        elif event.HasField("workflow_task_completed_event_attributes"):
            failure = None
    if failure is None:
        return None
    return await _worker_reason(
        client,
        failure,
        lambda message: WorkflowTaskFailing(
            f"the worker of run {workflow_id!r} fails its workflow task: {message}"
        ),
    )


async def _worker_reason(
    client: Client, failure: Failure, other: Callable[[str], Exception]
) -> Exception:
    """A failure a worker reported, decoded: ``WorkerCannotDecrypt`` for a key it lacks, the
    client's own ``EncryptionError`` if it cannot decrypt the failure, else ``other(message)``."""
    try:
        reason = await client.data_converter.decode_failure(failure)
    except EncryptionError as unreadable:
        return unreadable
    message = _one_line(getattr(reason, "message", None) or str(reason)) or failure.message
    if getattr(reason, "type", None) in READER_ERRORS:
        return WorkerCannotDecrypt(f"the worker cannot read the run: {message}")
    return other(message)


def store_location(
    environ: Mapping[str, str], store: str | Path | None = None
) -> StoreLocation | None:
    """The store (a directory or an S3 bucket and prefix): ``store``, else ``TREADLE_STORE``,
    else the default directory; ``None`` when either says ``none`` (every payload inline, so
    one over 2 MB fails). ``StoreSettingsError`` for a malformed ``s3://`` URL."""
    where = store if store is not None else environ.get(STORE_ENV, "").strip()
    return parse_store(where) if where else home.default_store(environ)


def check_settings(*, address: str | None, environ: Mapping[str, str]) -> None:
    """Refuse a malformed ``--address`` or encryption setting before a process starts anything."""
    if address is not None:
        parse_address(address, "--address")
    data_converter(environ)
    try:
        TracingSettings.from_env(environ)
    except TelemetrySettingsError as exc:
        raise ConnectionSettingsError(str(exc)) from exc


async def ensure_search_attributes(
    client: Client,
    namespace: str,
    required: Mapping[str, SearchAttributeIndexedValueType],
) -> list[str]:
    """Add the ``required`` custom search attributes the namespace lacks; return the names added."""
    address = client.service_client.config.target_host
    existing = await _custom_search_attributes(client, namespace, required)
    _check_types(existing, required, namespace, address)
    missing = {name: kind for name, kind in required.items() if name not in existing}
    if not missing:
        return []
    request = AddSearchAttributesRequest(
        namespace=namespace,
        search_attributes={
            name: IndexedValueType.ValueType(kind.value) for name, kind in missing.items()
        },
    )
    try:
        await client.operator_service.add_search_attributes(request, timeout=OPERATOR_TIMEOUT)
    except RPCError as exc:
        if exc.status != RPCStatusCode.ALREADY_EXISTS:
            raise SearchAttributesRejected(
                _rejected(f"refused to add {', '.join(missing)}", exc, namespace, address, missing)
            ) from exc
        # Another worker added them between our list and add; only their types matter now.
        existing = await _custom_search_attributes(client, namespace, required)
        _check_types(existing, required, namespace, address)
        return []
    return list(missing)


def _load_profile(profile: str | None, config_file: str | None) -> ClientConfigProfile:
    # envconfig silently ignores a config file that does not exist; a path the caller named
    # explicitly and that is missing is a mistake worth reporting.
    if config_file is not None and not Path(config_file).is_file():
        raise ConnectionSettingsError(f"Temporal config file {config_file} does not exist")
    try:
        return ClientConfigProfile.load(
            profile, config_source=Path(config_file) if config_file is not None else None
        )
    except RuntimeError as exc:  # the bridge's ConfigError: bad TOML, unknown profile
        raise ConnectionSettingsError(
            f"cannot load Temporal connection settings: {_one_line(str(exc))}"
        ) from exc


async def _custom_search_attributes(
    client: Client,
    namespace: str,
    required: Mapping[str, SearchAttributeIndexedValueType],
) -> dict[str, int]:
    address = client.service_client.config.target_host
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace), timeout=OPERATOR_TIMEOUT
        )
    except RPCError as exc:
        raise SearchAttributesRejected(
            _rejected("refused to list search attributes", exc, namespace, address, required)
        ) from exc
    # Raw enum numbers: a type this SDK does not know is still a type, and still a conflict.
    return dict(response.custom_attributes)


def _check_types(
    existing: Mapping[str, int],
    required: Mapping[str, SearchAttributeIndexedValueType],
    namespace: str,
    address: str,
) -> None:
    name_of = search_attribute_type_name
    conflicts = [
        f"{name} is {name_of(existing[name])} (needs {name_of(kind)})"
        for name, kind in required.items()
        if name in existing and existing[name] != int(kind)
    ]
    if conflicts:
        raise SearchAttributeTypeConflict(
            f"search attributes on namespace {namespace!r} at {address} have the wrong type: "
            f"{'; '.join(conflicts)}; remove them with "
            "'temporal operator search-attribute remove --name NAME' or use another namespace"
        )


def search_attribute_type_name(kind: int) -> str:
    """The name the CLI and ``temporal-dev.yaml`` use: ``KEYWORD_LIST`` -> ``KeywordList``."""
    try:
        name = SearchAttributeIndexedValueType(kind).name
    except ValueError:
        return f"type #{kind}"
    return "".join(part.capitalize() for part in name.split("_"))


def _rejected(
    what: str,
    exc: RPCError,
    namespace: str,
    address: str,
    names: Mapping[str, SearchAttributeIndexedValueType],
) -> str:
    create = ", ".join(
        f"{name} ({search_attribute_type_name(kind)})" for name, kind in names.items()
    )
    return (
        f"Temporal at {address} {what} on namespace {namespace!r}: {_one_line(exc.message)}; "
        f"create {create} yourself (Temporal Cloud: in the namespace's settings in the Cloud UI "
        "or with tcld; elsewhere: temporal operator search-attribute create)"
    )


def _treadle() -> str:
    """This interpreter's ``treadle`` as a command a fresh shell runs (nothing is on ``PATH``
    until the virtualenv is activated): ``.venv/bin/treadle`` from the checkout."""
    script = Path(os.path.abspath(Path(sys.executable).parent / "treadle"))
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m treadle"
    try:
        return shlex.quote(script.relative_to(Path.cwd()).as_posix())
    except ValueError:
        return shlex.quote(str(script))


def _cannot_reach(target: str, reason: str) -> str:
    if target.startswith(_LOCAL_HOSTS):
        hint = f"start one with: {_treadle()} worker --dev-server"
    else:
        hint = "check TEMPORAL_ADDRESS, TLS and API key settings"
    return f"cannot reach Temporal at {target}: {reason}; {hint}"


def _connect_reason(exc: RuntimeError) -> str:
    message = str(exc).removeprefix("Failed client connect: ")
    if "Connection refused" in message:
        return "connection refused"
    return _one_line(message)


def _one_line(text: str) -> str:
    return " ".join(text.split())
