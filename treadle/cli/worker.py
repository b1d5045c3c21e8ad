"""Run a Treadle worker: the agent workflow plus its model and tool activities.

    treadle worker                 # connect to the configured server (TEMPORAL_ADDRESS, profiles)
    treadle worker --dev-server    # start the dev server from temporal-dev.yaml if none answers
    treadle worker --sync-jobs     # also create/update the built-in jobs' Temporal Schedules
    treadle worker --mcp-config mcp.toml   # offer these MCP servers' tools (docs/mcp.md)
    treadle worker --tools-only --task-queue ws-1  # the tools of runs with tool_task_queue=ws-1
    treadle worker --tools my_pkg.tools   # your own tools, from your module's TOOLS
    treadle worker --workspace-root /var/ws   # runs' workspaces follow them (docs/workspaces.md)

Model settings (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OLLAMA_BASE_URL``) are read here, from
this process's environment, and stay here. With ``TREADLE_ENCRYPTION_KEYS`` set every payload the
worker writes to Temporal is encrypted (see treadle/codec.py); starters need the same keys.
A malformed --address or key setting, or an MCP config file (``--mcp-config`` /
``TREADLE_MCP_CONFIG``) that cannot be used, is refused before anything starts (exit code 2).

SIGTERM / Ctrl-C shut down gracefully: in-flight activities get ``--graceful-shutdown`` seconds to
finish, then are handed back to Temporal so another worker resumes them at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from treadle import home
from treadle.activities import jobs as job_activities
from treadle.activities import threads as thread_activities
from treadle.activities.content import RedactedBlobs, RedactingInterceptor, Redactor, worker_secrets
from treadle.activities.content import logs as log_redaction
from treadle.activities.content.logs import redact_every_line
from treadle.activities.heartbeat import MIN_INTERVAL_SECONDS
from treadle.activities.hooks import HookActivities
from treadle.activities.mcp import McpActivities, McpConfig, McpConfigError, load_mcp_config
from treadle.activities.model.activity import ModelActivities, ProviderSettings, http_client
from treadle.activities.store.blobs import BlobStore
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.store.probe import StoreProbeActivities
from treadle.activities.tools.builtin import ToolActivities
from treadle.activities.tools.confinement import Confinement
from treadle.activities.tools.loading import ToolModuleError, list_loaded_tools
from treadle.activities.tools.loading import load as load_tool_modules
from treadle.activities.workspace import WorkspaceActivities
from treadle.activities.workspace.follow import Follower
from treadle.cli.exits import run_and_exit
from treadle.codec import EncryptionError
from treadle.connection import (
    STORE_ENV,
    TemporalConnectionError,
    check_settings,
    connect,
    ensure_search_attributes,
)
from treadle.devserver import DevServer, DevServerError, load_config
from treadle.home import default_dev_config, default_store
from treadle.job_schedules import sync_schedules
from treadle.logs import LOG_FORMATS, configure_logging
from treadle.observability import TelemetrySettingsError, metrics_runtime, metrics_url
from treadle.sandbox import LeanSandboxedWorkflowRunner
from treadle.stores import StoreSettingsError, check_store, open_blob_store, parse_store
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import TASK_QUEUE
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.jobs import workflow as job_workflows
from treadle.workflows.memory import workflow as memory_workflows
from treadle.workflows.monitors import workflow as monitor_workflows
from treadle.workflows.scheduled import workflow as scheduled_workflows

PACKAGE = Path(__file__).resolve().parents[1]
MCP_CONFIG_ENV = "TREADLE_MCP_CONFIG"

log = logging.getLogger("treadle.worker")

STICKY_QUEUE_TIMEOUT_SECONDS = 0.5
"""The server gives a run's next workflow task to any worker after this long unclaimed by the
worker that caches the run (the SDK's default is 10 s): a run cached on a dead worker continues
0.6 s after its signal (on a server with ``temporal-dev.yaml``'s timer tick), not ten. A live
worker whose polls fall behind misses it too (a burst of 100 runs at once: about one workflow
task in nine, at 0.5 s as at 1 s; none at 10 s) and takes the run's task from the normal queue
instead, which costs two history events and at most a replay (``continue_as_new_after_events``
bounds it); docs/benchmarks.md measures both."""

HEARTBEAT_THROTTLE = timedelta(seconds=MIN_INTERVAL_SECONDS)
"""The SDK sends an activity's heartbeats at most every 0.8 x its heartbeat timeout (0.8 s of a
1 s timeout, leaving 0.2 s for the RPC). Activities here beat every third of the timeout
(``treadle.activities.heartbeat``); this lets each beat through, so the server hears one every 0.33
s of the default 1 s timeout and a live attempt survives a stall of 0.67 s."""

BUILD_LIBRARIES = ("temporalio", "pydantic", "pydantic-core", "httpx")
"""Besides Treadle's own code, what decides how a workflow replays: in the build id."""


@functools.cache
def build_id() -> str:
    """The build id the worker reports (on every workflow task it completes): a hash of
    Treadle's own sources and the versions of the libraries that run them, so it changes when
    the code does. The SDK's default hashes the bytecode of every loaded module, which took
    0.13-0.29 s of a start-up of about a second; this reads Treadle's files in milliseconds."""
    digest = hashlib.sha256()
    for name in BUILD_LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            digest.update(f"{name}=={metadata.version(name)}\n".encode())
    for path in package_sources(PACKAGE):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return f"treadle-{digest.hexdigest()[:16]}"


def package_sources(package: Path) -> list[Path]:
    """The package's Python files, in a stable order. In a checkout ``treadle/workflows`` and
    ``treadle/activities`` are links to the repository's folders: walked through."""
    found = [
        Path(directory, name)
        for directory, _, names in os.walk(package, followlinks=True)
        if "__pycache__" not in Path(directory).parts
        for name in names
        if name.endswith(".py")
    ]
    return sorted(found, key=lambda path: path.relative_to(package).as_posix())


WORKFLOWS: list[type[Any]] = [
    AgentWorkflow,
    *job_workflows.WORKFLOWS,
    *monitor_workflows.WORKFLOWS,
    *scheduled_workflows.WORKFLOWS,
    *memory_workflows.WORKFLOWS,
]

# Workflow code, passed through the sandbox whole: treadle.workflows is deterministic code only
# (tests/architecture scans every module of it for clocks, randomness and I/O), so one import per
# worker serves every run, instead of one per run and per replay after a cache miss (each module
# left out cost 6-7 ms a run), and the pydantic classes the data converter builds are the ones
# the workflow sees. A new module or room is covered the day it is written.
PASSTHROUGH_MODULES = ("treadle.workflows",)


def workflow_runner() -> LeanSandboxedWorkflowRunner:
    """The sandbox every worker and the replay tests use (``treadle.sandbox``)."""
    return LeanSandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def build_worker(
    client: Client,
    *,
    task_queue: str,
    settings: ProviderSettings,
    http: httpx.AsyncClient,
    graceful_shutdown: timedelta = timedelta(seconds=10),
    sticky_timeout: timedelta = timedelta(seconds=STICKY_QUEUE_TIMEOUT_SECONDS),
    max_concurrent_activities: int = 100,
    max_cached_workflows: int = 1000,
    store: BlobStore | None = None,
    confinement: Confinement = Confinement.AUTO,
    mcp: McpActivities | None = None,
    tools_only: bool = False,
    secrets: Sequence[str] = (),
    workspace_root: Path | None = None,
) -> Worker:
    """The one place that decides what a Treadle worker runs and how.

    ``store`` keeps conversation content once, so model calls carry references instead of the
    whole conversation (without one, every call carries it all: history grows quadratically).
    ``mcp`` holds the worker's MCP servers and their sessions (its owner closes it after the
    worker stops); without one the MCP activities are still registered, with no servers, so a
    run that lists MCP tools learns there are none instead of waiting for an activity no worker
    has. ``tools_only`` makes the worker of a ``tool_task_queue``: the workspace's tools and the
    post-tools hooks, nothing else (no workflows, no model calls, no MCP).

    ``secrets`` are what the worker knows besides its configured keys (``run`` passes its
    secret-named environment variables and those its MCP servers are given): with the keys,
    they are redacted from everything an activity returns, raises, stores, streams or puts on a
    span or logs (``treadle.activities.content``). The redacting interceptor is the worker's last,
    so the tracing interceptor and the SDK's failure logging see only redacted text.

    ``workspace_root`` makes the workspace follow the run: runs' tools run in this worker's
    copies of their workspaces under it, brought to each run's latest snapshot first and
    snapshotted after (``treadle.activities.workspace.follow``); it needs ``store``.
    """
    # Workspace files go to the store as they are (a check-out must give the same bytes back),
    # except a file holding one of the worker's secrets: withheld, named, never stored.
    known = [k.encode() for k in dict.fromkeys([*settings.api_keys(), *secrets]) if k]
    workspaces = WorkspaceActivities(store, lambda data: any(k in data for k in known))
    follower = None
    if workspace_root is not None:
        if workspaces.snapshotter is None:
            raise ValueError("a workspace root needs a store: the runs' snapshots live there")
        follower = workspaces.follower = Follower(workspace_root, workspaces.snapshotter)
    redactor = Redactor([*settings.api_keys(), *secrets])
    interceptors = [RedactingInterceptor(redactor)]
    log_redaction.install()  # what activities log while they run, with the same redactor
    if store is not None:
        store = RedactedBlobs(store, redactor)
    conversations = ConversationStore(store) if store is not None else None
    models = ModelActivities(settings, http, conversations)
    tools = ToolActivities(
        confinement=confinement,
        store=conversations,
        follower=follower,
        snapshotter=workspaces.snapshotter,
    )
    probe = StoreProbeActivities(store)  # a run waits for an unreachable store with it
    if mcp is None:
        mcp = McpActivities(McpConfig())
    elif mcp.store is None:
        mcp.store = conversations  # long MCP outputs are stored like every tool's
    if tools_only:
        return Worker(
            client,
            task_queue=task_queue,
            activities=[
                tools.run_tool,
                HookActivities().run_hook,
                probe.wait_for_store,
                workspaces.snapshot_workspace,
            ],
            interceptors=interceptors,
            max_concurrent_activities=max_concurrent_activities,
            graceful_shutdown_timeout=graceful_shutdown,
            max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            build_id=build_id(),
        )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=[
            models.call_model,
            tools.run_tool,
            HookActivities().run_hook,
            workspaces.snapshot_workspace,
            mcp.list_mcp_tools,
            mcp.call_mcp_tool,
            list_loaded_tools,
            probe.wait_for_store,
            *job_activities.ACTIVITIES,
            *thread_activities.ACTIVITIES,
        ],
        interceptors=interceptors,
        workflow_runner=workflow_runner(),
        max_concurrent_activities=max_concurrent_activities,
        max_cached_workflows=max_cached_workflows,
        graceful_shutdown_timeout=graceful_shutdown,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        sticky_queue_schedule_to_start_timeout=sticky_timeout,
        build_id=build_id(),
    )


@contextlib.asynccontextmanager
async def server_address(
    args: argparse.Namespace,
) -> AsyncIterator[tuple[str | None, str | None, bool]]:
    """Yield (address, namespace, local_dev); with --dev-server, a running dev server's."""
    if not args.dev_server:
        yield args.address, args.namespace, False
        return
    config = load_config(Path(args.dev_config) if args.dev_config else default_dev_config())
    async with DevServer.ensure(config) as server:
        how = "started" if server.started else "found running"
        print(
            f"Temporal dev server {how} at {server.address} "
            f"(namespace {server.namespace}); Web UI: {server.ui_url}",
            flush=True,
        )
        yield server.address, server.namespace, True


async def run(args: argparse.Namespace, mcp_config: McpConfig | None = None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    # Before the dev server and the client: the runtime's Prometheus endpoint must exist first.
    runtime = metrics_runtime(args.metrics_port, args.metrics_host) if args.metrics_port else None
    async with server_address(args) as (address, namespace, local_dev):
        client = await connect(
            address=address,
            namespace=namespace,
            profile=args.profile,
            local_dev=local_dev,
            store=args.store,  # External Storage shares the conversation store's directory
            runtime=runtime,
        )
        if args.metrics_port:
            print(f"Metrics: {metrics_url(args.metrics_host, args.metrics_port)}", flush=True)
        added = await ensure_search_attributes(client, client.namespace, search_attributes.REQUIRED)
        if added:
            print(f"Registered search attributes: {', '.join(added)}", flush=True)
        if args.sync_jobs and not args.tools_only:
            for outcome in await sync_schedules(
                client,
                args.task_queue,
                job_activities.builtin_jobs(workspaces_root=home.workspaces()),
            ):
                why = f" ({outcome.error})" if outcome.error else ""
                print(f"Job schedule {outcome.schedule_id}: {outcome.action}{why}", flush=True)
        settings = ProviderSettings.from_env(os.environ)
        mcp = McpActivities(mcp_config, environ=os.environ)
        # Exited after the worker: its MCP servers stop once no activity can use them.
        async with http_client() as http, mcp:
            worker = build_worker(
                client,
                task_queue=args.task_queue,
                settings=settings,
                http=http,
                graceful_shutdown=timedelta(seconds=args.graceful_shutdown),
                sticky_timeout=timedelta(seconds=args.sticky_queue_timeout),
                max_cached_workflows=args.max_cached_workflows,
                store=blob_store(args.store, os.environ),
                confinement=Confinement(args.command_confinement),
                mcp=mcp,
                tools_only=args.tools_only,
                secrets=worker_secrets((), os.environ, _mcp_variables(mcp_config)),
                workspace_root=workspace_root(args.workspace_root),
            )
            async with worker:
                print(
                    f"{'Tools-only worker' if args.tools_only else 'Worker'} polling task queue "
                    f"{args.task_queue!r} on "
                    f"{client.service_client.config.target_host} (namespace {client.namespace}); "
                    "Ctrl-C to stop",
                    flush=True,
                )
                await stop.wait()
                print("Shutting down: finishing in-flight work...", flush=True)
    print("Worker stopped.", flush=True)
    return 0


def _mcp_variables(config: McpConfig | None) -> tuple[str, ...]:
    """The worker variables its MCP servers are given: secrets, whatever their names."""
    return tuple(v for server in (config.servers if config else ()) for v in server.variables())


def parse_args(argv: Sequence[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dev-server",
        action="store_true",
        help="start the Temporal dev server described by --dev-config when nothing answers "
        "at its address, and stop it on exit",
    )
    parser.add_argument(
        "--dev-config",
        metavar="FILE",
        help="the dev server's settings (default: the temporal-dev.yaml Treadle ships)",
    )
    parser.add_argument("--address", help="Temporal address (default: TEMPORAL_ADDRESS / profile)")
    parser.add_argument("--namespace", help="namespace (default: TEMPORAL_NAMESPACE / profile)")
    parser.add_argument("--profile", help="temporal.toml profile (default: TEMPORAL_PROFILE)")
    parser.add_argument("--task-queue", default=TASK_QUEUE, help=f"default: {TASK_QUEUE}")
    parser.add_argument(
        "--sync-jobs",
        action="store_true",
        help="create or update the built-in periodic jobs' schedules for --task-queue at start "
        "(idempotent; an operator's pause is kept)",
    )
    parser.add_argument(
        "--graceful-shutdown",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long in-flight activities may run after SIGTERM before being handed back",
    )
    parser.add_argument(
        "--sticky-queue-timeout",
        type=float,
        default=STICKY_QUEUE_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="how long the server keeps a run's next workflow task for this worker (whose cache "
        "holds the run) before any worker may take it; after a crash, the delay before another "
        f"worker picks up a run that was cached here (default: {STICKY_QUEUE_TIMEOUT_SECONDS:g}, "
        "so a killed worker's runs move on within about a second; longer means fewer replays "
        "when this worker is merely busy, at the price of a longer wait after a crash)",
    )
    parser.add_argument(
        "--max-cached-workflows",
        type=int,
        default=1000,
        metavar="N",
        help="runs kept in memory between their workflow tasks; past this the least recently "
        "used is evicted and replayed from its history when it next has work (default: 1000)",
    )
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV) or str(default_store()),
        metavar="DIR|s3://BUCKET/PREFIX",
        help="the conversation store: content written once, referenced by model calls "
        "(default: store/ in the data directory, TREADLE_HOME or ./.treadle, beside the dev "
        "server's data); "
        "'none' to carry whole conversations and keep every payload inline; "
        "s3://BUCKET/PREFIX for an S3-compatible store shared by several machines (endpoint, "
        "region and keys from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, "
        f"AWS_SECRET_ACCESS_KEY; needs treadle[s3]) (default from {STORE_ENV} when set)",
    )
    parser.add_argument(
        "--command-confinement",
        choices=[c.value for c in Confinement],
        default=Confinement.AUTO.value,
        help="run_command under bubblewrap: auto (when it works here), bwrap (required), off",
    )
    parser.add_argument(
        "--mcp-config",
        default=os.environ.get(MCP_CONFIG_ENV) or None,
        metavar="FILE",
        help="TOML file of the MCP servers whose tools this worker offers (see docs/mcp.md; "
        f"default from {MCP_CONFIG_ENV} when set; none: no MCP tools)",
    )
    parser.add_argument(
        "--tools-only",
        action="store_true",
        help="run only the workspace's tools and post-tools hooks, for runs whose config names "
        "this --task-queue as tool_task_queue (on the machine that holds their workspaces)",
    )
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module of your own tools (its TOOLS: Tool objects) that runs on this worker may "
        "call, beside the built-in ones and those of installed packages' treadle.tools entry "
        "points (repeatable; give the same to the runs' workflow and tools-only workers)",
    )
    parser.add_argument(
        "--workspace-root",
        metavar="DIR",
        help="run runs' tools in this worker's copies of their workspaces, DIR/<run>, each "
        "brought to the run's latest snapshot in the store before a call and snapshotted after "
        "it, so a run continues on any worker with everything its completed calls did "
        "(needs --store; one worker process per root; docs/workspaces.md). Without it, tools run "
        "in each run's own --workspace path on this machine",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text lines, or JSON lines; either way with each line's fields (workflow_id, "
        "run_id, step, ...)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics (Temporal's and Treadle's) at "
        "http://--metrics-host:PORT/metrics (default: none)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the metrics endpoint listens on (default: 127.0.0.1; 0.0.0.0 for all)",
    )
    return parser.parse_args(argv)


def blob_store(where: str, environ: Mapping[str, str]) -> BlobStore | None:
    """The worker's conversation store (a directory, or S3 with the AWS_* environment);
    encrypted at rest when TREADLE_ENCRYPTION_KEYS is set."""
    return open_blob_store(parse_store(where), environ)


def workspace_root(where: str | None) -> Path | None:
    """The ``--workspace-root`` directory, made absolute and created."""
    if where is None:
        return None
    root = Path(where).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    configure_logging(args.log_level, args.log_format)
    try:
        # Before the dev server: a bad setting must not leave anything started behind it.
        check_settings(address=args.address, environ=os.environ)
        check_store(args.store, os.environ)  # an S3 bucket that does not answer: refused now
        if args.workspace_root and parse_store(args.store) is None:
            raise StoreSettingsError(
                "--workspace-root needs a store (--store): snapshots live there"
            )
        mcp_config = load_mcp_config(Path(args.mcp_config), os.environ) if args.mcp_config else None
        load_tool_modules(args.tools)  # before any run is checked: runs list what is loaded
        # Every line this process logs passes the door, whichever logger wrote it.
        redact_every_line(
            Redactor(
                [
                    *ProviderSettings.from_env(os.environ).api_keys(),
                    *worker_secrets((), os.environ, _mcp_variables(mcp_config)),
                ]
            )
        )
        return asyncio.run(run(args, mcp_config))
    except (
        DevServerError,
        TemporalConnectionError,
        EncryptionError,
        McpConfigError,
        ToolModuleError,
        TelemetrySettingsError,
        StoreSettingsError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run_and_exit(main)
