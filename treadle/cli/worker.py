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
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from treadle import home
from treadle.activities import jobs as job_activities
from treadle.activities.content import Redactor, worker_secrets
from treadle.activities.content.logs import redact_every_line
from treadle.activities.mcp import McpActivities, McpConfig, McpConfigError, load_mcp_config
from treadle.activities.model.activity import ProviderSettings
from treadle.activities.store.blobs import BlobStore
from treadle.activities.tools.confinement import Confinement
from treadle.activities.tools.loading import ToolModuleError
from treadle.activities.tools.loading import load as load_tool_modules
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
from treadle.plugin import Deployment, DeploymentError, TreadlePlugin
from treadle.plugin.plugin import STICKY_QUEUE_TIMEOUT
from treadle.stores import StoreSettingsError, check_store, parse_store
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import TASK_QUEUE

MCP_CONFIG_ENV = "TREADLE_MCP_CONFIG"

log = logging.getLogger("treadle.worker")

STICKY_QUEUE_TIMEOUT_SECONDS = STICKY_QUEUE_TIMEOUT.total_seconds()
"""``--sticky-queue-timeout``'s default (``treadle.plugin.plugin.STICKY_QUEUE_TIMEOUT`` says
why)."""


def build_worker(
    client: Client,
    *,
    task_queue: str,
    settings: ProviderSettings,
    http: httpx.AsyncClient,
    graceful_shutdown: timedelta = timedelta(seconds=10),
    sticky_timeout: timedelta = STICKY_QUEUE_TIMEOUT,
    max_concurrent_activities: int = 100,
    max_cached_workflows: int = 1000,
    store: BlobStore | None = None,
    confinement: Confinement = Confinement.AUTO,
    mcp: McpActivities | None = None,
    tools_only: bool = False,
    secrets: Sequence[str] = (),
    workspace_root: Path | None = None,
) -> Worker:
    """A Treadle worker on a client that already has Treadle's data converter
    (``treadle.connection.connect``): a ``Worker`` with a ``TreadlePlugin`` of these arguments,
    what ``treadle worker``, the demo, the tests and the benchmarks run.

    Unlike the plugin's defaults, nothing is read from the process's environment: the model
    endpoints are ``settings``, the secrets ``secrets``, and no store unless one is given
    (without one, every model call carries the whole conversation). ``http`` and ``mcp`` stay
    their caller's to close.
    """
    plugin = TreadlePlugin(
        mcp_servers=mcp,
        store=store if store is not None else "none",
        secrets=secrets,
        workspace_root=workspace_root,
        command_confinement=confinement,
        tools_only=tools_only,
        environ={},
        model_settings=settings,
        http_client=http,
    )
    return Worker(
        client,
        task_queue=task_queue,
        plugins=[plugin],
        max_concurrent_activities=max_concurrent_activities,
        max_cached_workflows=max_cached_workflows,
        graceful_shutdown_timeout=graceful_shutdown,
        sticky_queue_schedule_to_start_timeout=sticky_timeout,
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
        plugin = TreadlePlugin(
            tools=args.tools,
            mcp_servers=mcp_config,
            store=args.store,  # the client's External Storage names the same store
            workspace_root=args.workspace_root,
            command_confinement=args.command_confinement,
            tools_only=args.tools_only,
            deployment_name=args.deployment_name,
            build_id=args.build_id,
        )
        worker = Worker(
            client,
            task_queue=args.task_queue,
            plugins=[plugin],
            graceful_shutdown_timeout=timedelta(seconds=args.graceful_shutdown),
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=args.sticky_queue_timeout),
            max_cached_workflows=args.max_cached_workflows,
        )
        # The plugin's MCP servers and HTTP client stop after the worker.
        async with worker:
            version = plugin.deployment.build
            if args.deployment_name:
                version = f"{args.deployment_name}.{version} of its Worker Deployment"
            print(
                f"{'Tools-only worker' if args.tools_only else 'Worker'} polling task queue "
                f"{args.task_queue!r} on "
                f"{client.service_client.config.target_host} (namespace {client.namespace}) "
                f"as {version}; Ctrl-C to stop",
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
        help="a module of your own tools (its TOOLS: Tool objects; found from the current "
        "directory too) that runs on this worker may call, beside the built-in ones and those "
        "of installed packages' treadle.tools entry points (repeatable; give the same to the "
        "runs' workflow and tools-only workers)",
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
    parser.add_argument(
        "--deployment-name",
        metavar="NAME",
        help="run as a version (NAME.BUILD) of this Worker Deployment: each run stays on the "
        "build that started it while new runs go to the deployment's current version, and a "
        "thread moves at its next continue-as-new (docs/upgrades.md; make a version current "
        "with temporal worker deployment set-current-version). Without it the worker only "
        "reports its build id",
    )
    parser.add_argument(
        "--build-id",
        metavar="ID",
        help="the build id this worker reports (default: a hash of Treadle's sources and the "
        "libraries that run them, so it changes when the code does)",
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
        Deployment(args.deployment_name, args.build_id)  # a bad name is refused now
        mcp_config = load_mcp_config(Path(args.mcp_config), os.environ) if args.mcp_config else None
        if args.tools and os.getcwd() not in sys.path:
            # --tools names a module as `python -m` finds one: in the folder you run it from too
            # (a console script's path holds only the virtualenv's bin and site-packages).
            sys.path.insert(0, os.getcwd())
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
        DeploymentError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run_and_exit(main)
