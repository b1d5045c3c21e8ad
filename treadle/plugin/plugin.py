"""``TreadlePlugin``: Treadle's agent added to a Temporal client and worker you already have.

Given to ``Client.connect(..., plugins=[plugin])``, it gives the client Treadle's data
converter (pydantic, Temporal's External Storage into the store, and encryption when
``TREADLE_ENCRYPTION_KEYS`` is set) and tracing when the OpenTelemetry environment asks for it;
every worker built on that client inherits it and runs, beside your own workflows and
activities, Treadle's workflows, activities, redacting interceptor and sandbox pass-through.
Your own tools, hooks and model providers are named here, so the client that starts a run
checks its config against them and the worker runs them, with no edit of Treadle.

A worker may also be given the plugin itself when its client already has Treadle's data
converter (``treadle worker`` and the tests build theirs so); a worker on any other client is
refused at once, because the worker's payloads and its activities' client are the client's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, TypeGuard

import httpx
from temporalio.client import ClientConfig
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter, DefaultFailureConverter, DefaultPayloadConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Interceptor, Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from treadle.activities.content import worker_secrets
from treadle.activities.heartbeat import MIN_INTERVAL_SECONDS
from treadle.activities.hooks.base import Hook
from treadle.activities.mcp import McpActivities, McpConfig, load_mcp_config
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import BlobStore
from treadle.activities.tools.confinement import Confinement
from treadle.activities.tools.custom import Tool
from treadle.activities.tools.loading import load as load_tools
from treadle.connection import (
    TemporalConnectionError,
    data_converter,
    ensure_search_attributes,
    store_location,
)
from treadle.observability import configure_tracing
from treadle.payloads import TolerantPayloadConverter
from treadle.plugin.parts import WORKFLOWS, assemble
from treadle.plugin.versions import Deployment
from treadle.sandbox import with_treadle
from treadle.stores import open_blob_store
from treadle.workflows.agent.messages import hooks as hook_names
from treadle.workflows.agent.messages import providers as provider_names
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.providers import ProviderSpec

__all__ = [
    "GRACEFUL_SHUTDOWN",
    "HEARTBEAT_THROTTLE",
    "STICKY_QUEUE_TIMEOUT",
    "TreadlePlugin",
]

STICKY_QUEUE_TIMEOUT = timedelta(seconds=0.5)
"""The server gives a run's next workflow task to any worker after this long unclaimed by the
worker that caches the run (the SDK's default is 10 s): a run cached on a dead worker continues
0.6 s after its signal (on a server with ``temporal-dev.yaml``'s timer tick), not ten. A live
worker whose polls fall behind misses it too (a burst of 100 runs at once: about one workflow
task in nine, at 0.5 s as at 1 s; none at 10 s) and takes the run's task from the normal queue
instead, which costs two history events and at most a replay (``continue_as_new_after_events``
bounds it); docs/benchmarks.md measures both."""

HEARTBEAT_THROTTLE = timedelta(seconds=MIN_INTERVAL_SECONDS)
"""The SDK sends an activity's heartbeats at most every 0.8 x its heartbeat timeout, and no more
often than this. Activities here beat on their own schedule (``treadle.activities.heartbeat``:
every two thirds of the timeout, at most 3 s before it ends, so every 6 s of the default 9 s and
a live attempt is taken for lost only after its event loop stalled for 3 s); this throttle, the
shortest interval that schedule uses, lets each of those beats through and nothing more."""

GRACEFUL_SHUTDOWN = timedelta(seconds=10)
"""How long in-flight activities may finish when the worker stops, before they are handed back
to Temporal (the SDK's default, none, cuts every model call and command short)."""

log = logging.getLogger("treadle.plugin")

_SDK_STICKY_TIMEOUT = timedelta(seconds=10)
_SDK_GRACEFUL_SHUTDOWN = timedelta()

ToolSource = str | ModuleType | Tool[Any]
"""A module of your own tools (named, ``"my_app.tools"``, or imported; its ``TOOLS``), or one
``Tool``."""


class TreadlePlugin(SimplePlugin):
    """Treadle's agent on your Temporal client and worker (see the module's docstring).

    ``tools``: your own tool modules or ``Tool`` objects, beside the built-in ones and those of
    installed packages' ``treadle.tools`` entry points. ``hooks``: your own post-tools hooks
    (objects with a ``name`` and an async ``run(HookRequest) -> HookResult``), beside
    ``git_commit``. ``mcp_servers``: the MCP servers whose tools runs may call (a TOML file as
    docs/mcp.md describes, or an ``McpConfig``). ``providers``: model providers of your own
    (``ProviderSpec``), named in ``provider:model`` strings beside the built-in ones.

    ``store``: the content store, a directory or ``s3://BUCKET/PREFIX``; ``None`` reads
    ``TREADLE_STORE``, else ``store/`` in the data directory (``TREADLE_HOME``, ``./.treadle``);
    ``"none"`` keeps every payload inline. Workers and the clients that read their runs name the
    same store. ``secrets``: values never to let out of an activity, beside the providers' keys,
    the secret-named variables of ``environ`` and those the MCP servers are given.
    ``workspace_root``: runs' tools run in this worker's copies of their workspaces, which
    follow the runs' snapshots (needs a store; docs/workspaces.md). ``command_confinement``:
    ``run_command`` under bubblewrap, ``auto`` (where it works), ``bwrap`` (required) or ``off``.

    ``tools_only``: the worker of a ``tool_task_queue`` (the workspace's tools and hooks only).
    ``deployment_name`` and ``build_id``: the Worker Deployment version the worker is (runs
    pinned to their build; docs/upgrades.md); without a name the worker only reports its build
    id, by default a hash of Treadle's sources.

    ``environ``: where model endpoints and keys, ``TREADLE_ENCRYPTION_KEYS``, ``TREADLE_STORE``
    and the OpenTelemetry settings are read (default: this process's environment); keys stay in
    the worker, never in a run's input or history. ``model_settings`` gives the endpoints and
    keys directly instead; ``http_client`` is the HTTP client of model calls (default: one per
    worker, closed when it stops).

    Your tools, hooks and providers are named for the whole process when the plugin is made (a
    bad one raises then), as the loop's registries are one per process.
    """

    def __init__(
        self,
        *,
        tools: Iterable[ToolSource] = (),
        hooks: Iterable[Hook] = (),
        mcp_servers: McpConfig | McpActivities | str | Path | None = None,
        providers: Iterable[ProviderSpec] = (),
        store: str | Path | BlobStore | None = None,
        secrets: Sequence[str] = (),
        workspace_root: str | Path | None = None,
        command_confinement: Confinement | str = Confinement.AUTO,
        tools_only: bool = False,
        deployment_name: str | None = None,
        build_id: str | None = None,
        environ: Mapping[str, str] | None = None,
        model_settings: ProviderSettings | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._hooks = tuple(hooks)
        provider_names.register(providers)
        hook_names.register({hook.name: _what_it_does(hook) for hook in self._hooks})
        self.tools = load_tools(list(tools))
        """Your tools this process loaded (with the entry points'), in the catalogue's order."""
        self._mcp = mcp_servers
        self._store = store
        if _is_setting(store):
            store_location(self._environ, store)  # a malformed setting is refused now
        self._secrets = tuple(secrets)
        self._workspace_root = (
            Path(workspace_root).expanduser().resolve() if workspace_root is not None else None
        )
        if self._workspace_root is not None and self._blob_store() is None:
            raise ValueError("a workspace root needs a store: the runs' snapshots live there")
        self._confinement = Confinement(command_confinement)
        self._tools_only = tools_only
        self.deployment = Deployment(deployment_name, build_id)
        self._model_settings = model_settings
        self._http = http_client
        self._running: list[_Owned] = []
        super().__init__(
            "treadle.TreadlePlugin",
            data_converter=self._data_converter,
            workflows=None if tools_only else WORKFLOWS,
            workflow_runner=None if tools_only else self._workflow_runner,
        )

    # ---- the client (and the replayer) -------------------------------------------------------

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        config = super().configure_client(config)
        interceptors = list(config.get("interceptors") or [])
        if configure_tracing(self._environ) is not None and not _traced(interceptors):
            # add_temporal_spans: the workflow, each activity and each message handler get a
            # span of their own, the skeleton the activities' spans hang from.
            interceptors.append(OpenTelemetryInterceptor(add_temporal_spans=True))
        config["interceptors"] = interceptors
        return config

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        """Treadle's converter in place of the SDK's default (or pydantic's); one that is
        already Treadle's is kept; any other is refused: it would not read the runs' payloads."""
        if existing is not None and _is_treadles(existing):
            return existing
        if existing is not None and not _is_plain(existing):
            raise ValueError(
                "TreadlePlugin: this client has a data converter of its own; Treadle's runs need "
                "Treadle's (pydantic, External Storage, encryption): connect without one"
            )
        if not _is_setting(self._store):
            raise ValueError(
                "TreadlePlugin: a client needs the store by its setting (a directory or "
                "s3://BUCKET/PREFIX) to read what workers stored, not a BlobStore object"
            )
        return data_converter(self._environ, self._store)

    def _workflow_runner(self, existing: WorkflowRunner | None) -> WorkflowRunner:
        runner = with_treadle(existing)
        if configure_tracing(self._environ) is not None and isinstance(
            runner, SandboxedWorkflowRunner
        ):
            # The tracing interceptor's module must be the one outside the sandbox.
            return dataclasses.replace(
                runner, restrictions=runner.restrictions.with_passthrough_modules("opentelemetry")
            )
        return runner

    # ---- the worker ----------------------------------------------------------------------------

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        client = config.get("client")
        if client is None or not _is_treadles(client.data_converter):
            raise ValueError(
                "TreadlePlugin: the worker's client does not have Treadle's data converter; give "
                "the plugin to Client.connect(..., plugins=[plugin]) and the worker inherits it"
            )
        if self._workspace_root is not None:
            self._workspace_root.mkdir(parents=True, exist_ok=True)
        mcp = self._mcp_activities()
        owned = _Owned(mcp=mcp if not isinstance(self._mcp, McpActivities) else None)
        http = self._http
        if http is None and not self._tools_only:
            http = owned.http = http_client()
        settings = self._model_settings or ProviderSettings.from_env(self._environ)
        mcp_variables = [v for server in mcp.config.servers for v in server.variables()]
        parts = assemble(
            tools_only=self._tools_only,
            settings=settings,
            http=http,
            store=self._blob_store(),
            confinement=self._confinement,
            mcp=mcp,
            secrets=worker_secrets(self._secrets, self._environ, mcp_variables),
            workspace_root=self._workspace_root,
            hooks=self._hooks,
        )
        config["activities"] = [*config.get("activities", ()), *parts.activities]
        interceptors: list[Interceptor] = list(config.get("interceptors", ()))
        inherited = client.config(active_config=True).get("interceptors", [])
        if configure_tracing(self._environ) is not None and not _traced(
            [*inherited, *interceptors]
        ):
            interceptors.append(OpenTelemetryInterceptor(add_temporal_spans=True))
        # Last, so the innermost: tracing and the SDK's failure logging see only redacted text.
        config["interceptors"] = [*interceptors, parts.interceptor]
        owned.interceptor = parts.interceptor
        self._running.append(owned)
        _tune(config)
        self.deployment.configure(config)
        return super().configure_worker(config)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker, once the namespace has the search attributes runs upsert (added
        where missing); the MCP servers and HTTP client the plugin made for it stop after it."""
        if not self._tools_only:
            client = worker.client
            try:
                await ensure_search_attributes(client, client.namespace, search_attributes.REQUIRED)
            except TemporalConnectionError as exc:
                # Temporal Cloud wants them made in its UI, a test server has none: the worker
                # still serves runs that set none (AgentConfig.search_attributes=False).
                log.warning("search attributes: %s", exc)
        mine = [
            o
            for o in self._running
            if o.interceptor in worker.config(active_config=True).get("interceptors", ())
        ]
        async with contextlib.AsyncExitStack() as stack:
            for owned in mine:
                self._running.remove(owned)
                await stack.enter_async_context(owned.resources())
            await super().run_worker(worker, next)

    def _mcp_activities(self) -> McpActivities:
        """The MCP servers of one worker (a file is read here: a starter never needs it)."""
        given = self._mcp
        if isinstance(given, McpActivities):
            return given
        if isinstance(given, str | Path):
            given = load_mcp_config(Path(given), self._environ)
        return McpActivities(given, environ=self._environ)

    def _blob_store(self) -> BlobStore | None:
        store = self._store
        if store is None or isinstance(store, str | Path):
            return open_blob_store(store_location(self._environ, store), self._environ)
        return store


@dataclasses.dataclass
class _Owned:
    """What the plugin made for one worker and stops with it."""

    mcp: McpActivities | None = None
    http: httpx.AsyncClient | None = None
    interceptor: Interceptor | None = None

    @contextlib.asynccontextmanager
    async def resources(self) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if self.http is not None:
                await stack.enter_async_context(self.http)
            if self.mcp is not None:
                await stack.enter_async_context(self.mcp)  # exited first: its servers stop
            yield


def _tune(config: WorkerConfig) -> None:
    """Treadle's worker options, where the worker kept the SDK's defaults (its own win)."""
    throttle = config.get("max_heartbeat_throttle_interval") or HEARTBEAT_THROTTLE
    config["max_heartbeat_throttle_interval"] = min(throttle, HEARTBEAT_THROTTLE)
    if config.get("sticky_queue_schedule_to_start_timeout") == _SDK_STICKY_TIMEOUT:
        config["sticky_queue_schedule_to_start_timeout"] = STICKY_QUEUE_TIMEOUT
    if config.get("graceful_shutdown_timeout", _SDK_GRACEFUL_SHUTDOWN) == _SDK_GRACEFUL_SHUTDOWN:
        config["graceful_shutdown_timeout"] = GRACEFUL_SHUTDOWN


def _is_setting(store: str | Path | BlobStore | None) -> TypeGuard[str | Path | None]:
    """A store named by its setting, not a ``BlobStore`` object."""
    return store is None or isinstance(store, str | Path)


def _is_treadles(converter: DataConverter) -> bool:
    return converter.payload_converter_class is TolerantPayloadConverter


def _is_plain(converter: DataConverter) -> bool:
    """The SDK's default converter or pydantic's, with no codec or storage of their own."""
    return (
        converter.payload_converter_class in (DefaultPayloadConverter, PydanticPayloadConverter)
        and converter.payload_codec is None
        and converter.external_storage is None
        and converter.failure_converter_class is DefaultFailureConverter
    )


def _traced(interceptors: Iterable[Interceptor | ClientInterceptor]) -> bool:
    return any(isinstance(i, OpenTelemetryInterceptor) for i in interceptors)


def _what_it_does(hook: Hook) -> str:
    """A hook's one line for the known hooks' list: its ``description``, or its docstring's."""
    described = getattr(hook, "description", None)
    if isinstance(described, str) and described:
        return described
    return ((type(hook).__doc__ or "").strip().splitlines() or [""])[0]
