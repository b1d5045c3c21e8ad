"""Starts are validated before anything starts: the workspace must be a directory that exists
(or be asked for), and the Temporal address must be HOST:PORT, for starter.py and worker.py."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode

from tests.support.harness import Harness
from tests.support.processes import ROOT, clean_env, free_port, refusal, run_cli
from treadle import home
from treadle.connection import ConnectionSettingsError, parse_address
from treadle.workflows.agent.messages.models import AgentResult, RunStatus

BAD_ADDRESSES = ("127.0.0.1:notaport", "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", ":7233")
HOST_PORT = "is not HOST:PORT with a port from 1 to 65535"


async def _never_started(harness: Harness, workflow_id: str) -> None:
    with pytest.raises(RPCError) as caught:
        await harness.client.get_workflow_handle(workflow_id).describe()
    assert caught.value.status is RPCStatusCode.NOT_FOUND


# The workspace


async def test_a_workspace_that_does_not_exist_is_refused(harness: Harness, tmp_path: Path) -> None:
    """A named workspace that does not exist is one line, exit 2: no run, no directory."""
    missing = tmp_path / "typo"
    workflow_id = f"ws-{uuid.uuid4().hex[:12]}"
    model = harness.script({"content": "never"})
    done = await run_cli(
        *harness.cli_args(), "run", "x", "--model", model, "--workspace", str(missing),
        "--id", workflow_id,
    )  # fmt: skip
    assert refusal(done) == (
        f"error: workspace {missing} does not exist; create it, or pass --create-workspace"
    )
    assert not missing.exists()
    await _never_started(harness, workflow_id)


async def test_a_workspace_that_is_a_file_is_refused(harness: Harness, tmp_path: Path) -> None:
    """A workspace path that is a file is refused, with or without --create-workspace."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory")
    model = harness.script({"content": "never"})
    for extra in ([], ["--create-workspace"]):
        workflow_id = f"ws-{uuid.uuid4().hex[:12]}"
        done = await run_cli(
            *harness.cli_args(), "run", "x", "--model", model, "--workspace", str(a_file),
            "--id", workflow_id, *extra,
        )  # fmt: skip
        assert refusal(done) == f"error: workspace {a_file} is not a directory"
        await _never_started(harness, workflow_id)
    assert a_file.read_text() == "not a directory"


async def test_create_workspace_makes_the_directory_and_the_run_works_in_it(
    harness: Harness, tmp_path: Path
) -> None:
    """--create-workspace creates a missing workspace (parents too) and the run uses it."""
    workspace = tmp_path / "new" / "place"
    workflow_id = f"ws-{uuid.uuid4().hex[:12]}"
    harness.handles.append(harness.client.get_workflow_handle(workflow_id))
    write = {"name": "write_file", "arguments": {"path": "a.md", "content": "here"}}
    model = harness.script({"tool_calls": [write]}, {"content": "written"})
    done = await run_cli(
        *harness.cli_args(), "run", "x", "--model", model, "--workspace", str(workspace),
        "--create-workspace", "--id", workflow_id, "--wait", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert AgentResult.model_validate_json(done.stdout).status is RunStatus.DONE
    assert (workspace / "a.md").read_text() == "here"


async def test_the_default_workspace_is_created_under_workspaces(harness: Harness) -> None:
    """Without --workspace the run gets workspaces/ID in the data directory, created for it; an
    --id that would lead out of workspaces/ is refused."""
    workflow_id = f"ws-{uuid.uuid4().hex[:12]}"
    harness.handles.append(harness.client.get_workflow_handle(workflow_id))
    default = home.workspaces() / workflow_id
    model = harness.script({"content": "fine"})
    try:
        done = await run_cli(
            *harness.cli_args(), "run", "x", "--model", model, "--id", workflow_id, "--wait",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert default.is_dir()
    finally:
        shutil.rmtree(default, ignore_errors=True)

    escape = f"../ws-{uuid.uuid4().hex[:12]}"
    refused = await run_cli(*harness.cli_args(), "run", "x", "--model", model, "--id", escape)
    assert "cannot name a directory in workspaces/" in refusal(refused)
    assert not (home.home() / escape.removeprefix("../")).exists()


# The address


async def test_a_malformed_temporal_address_is_refused_by_every_command(tmp_path: Path) -> None:
    """Every starter.py command that connects refuses a malformed TEMPORAL_ADDRESS in one line,
    exit 2, naming the variable; `run` does not create its default workspace."""
    workflow_id = f"ws-{uuid.uuid4().hex[:12]}"
    # One of each way in: run's own path, the run commands, and the registered sub-commands.
    commands = [
        ["run", "x", "--model", "openai:m", "--id", workflow_id],
        ["run", "x", "--model", "openai:m", "--workspace", str(tmp_path)],
        ["approve", "x"],
        ["jobs", "list"],
        ["serve", "--port", "0"],
    ]
    runs = [
        run_cli(*command, env=clean_env(TEMPORAL_ADDRESS=BAD_ADDRESSES[i % len(BAD_ADDRESSES)]))
        for i, command in enumerate(commands)
    ]
    for i, done in enumerate(await asyncio.gather(*runs)):
        address = BAD_ADDRESSES[i % len(BAD_ADDRESSES)]
        assert refusal(done).startswith(f"error: TEMPORAL_ADDRESS {address!r} {HOST_PORT}")
    assert not (home.workspaces() / workflow_id).exists()


async def test_a_malformed_address_flag_is_refused_by_every_command() -> None:
    """--address must parse for every command, those that do not connect included."""
    commands = [["status", "x"], ["monitors", "list"], ["codec-server"], ["demo"]]
    addresses = [BAD_ADDRESSES[i % len(BAD_ADDRESSES)] for i in range(len(commands))]
    runs = [run_cli("--address", a, *c) for a, c in zip(addresses, commands, strict=True)]
    for address, done in zip(addresses, await asyncio.gather(*runs), strict=True):
        assert refusal(done).startswith(f"error: --address {address!r} {HOST_PORT}")


@pytest.mark.parametrize("address", [*BAD_ADDRESSES, "[::1]7233", "http://127.0.0.1:7233", "a b:1"])
def test_parse_address_refuses_what_is_not_host_and_port(address: str) -> None:
    """No port, a port out of 1..65535 or not a number, a URL, a stray space: refused."""
    expected = f"^TEMPORAL_ADDRESS {re.escape(repr(address))} {HOST_PORT}"
    with pytest.raises(ConnectionSettingsError, match=expected):
        parse_address(address, "TEMPORAL_ADDRESS")


def test_parse_address_accepts_hosts_names_and_ipv6() -> None:
    """IPv4, names and bracketed IPv6, with ports at both ends of the range."""
    assert parse_address("127.0.0.1:7233") == ("127.0.0.1", 7233)
    assert parse_address("temporal.example-1.internal:1") == ("temporal.example-1.internal", 1)
    assert parse_address("[::1]:65535") == ("[::1]", 65535)


async def test_a_well_formed_address_still_reaches_the_connection_check() -> None:
    """IPv4, IPv6 and host names pass the check; only then is the server looked for."""
    for address in (f"127.0.0.1:{free_port()}", f"localhost:{free_port()}"):
        done = await run_cli("--address", address, "status", "x")
        assert "cannot reach Temporal" in refusal(done)
    ipv6 = await run_cli("--address", f"[::1]:{free_port()}", "status", "x")
    assert HOST_PORT not in refusal(ipv6)


async def _worker(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "worker.py"), *args,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_worker_refuses_a_malformed_address_before_starting_anything(
    tmp_path: Path,
) -> None:
    """worker.py refuses a bad TEMPORAL_ADDRESS or --address in one line, exit 2; with
    --dev-server the dev server is never started."""
    code, out, err = await _worker(env=clean_env(TEMPORAL_ADDRESS="127.0.0.1:notaport"))
    assert (code, out) == (2, "")
    assert err.strip() == f"error: TEMPORAL_ADDRESS '127.0.0.1:notaport' {HOST_PORT} " + (
        "(e.g. 127.0.0.1:7233, [::1]:7233)"
    )

    config = tmp_path / "dev.yaml"
    config.write_text(f"port: {free_port()}\nui_port: {free_port()}\ndb_filename: dev.sqlite\n")
    code, out, err = await _worker(
        "--dev-server", "--dev-config", str(config), "--address", "127.0.0.1:99999",
        env=clean_env(),
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err.strip().startswith(f"error: --address '127.0.0.1:99999' {HOST_PORT}")
    assert not (tmp_path / "dev.sqlite").exists()


# Run inputs' sizes


async def test_run_inputs_over_their_limits_are_refused_at_start(
    harness: Harness, tmp_path: Path
) -> None:
    """A 5.5 MB output schema, a 700 KB one and a 2 MB config file: each one line, exit 2,
    and no run (a large schema would hold every workflow task past the deadlock detector)."""

    def schema(properties: int) -> str:
        described = {"type": "string", "description": "x" * 100}
        body = {"type": "object", "properties": {f"p{n}": described for n in range(properties)}}
        return json.dumps(body)

    files = {"huge.json": schema(40_000), "large.json": schema(5_000)}
    files["config.yaml"] = "prices: {}\n" + "# padding\n" * 200_000
    refusals = {
        "huge.json": "is over 1,000,000 bytes; refused",
        "large.json": "characters of JSON; at most 100,000",
        "config.yaml": "is over 1,000,000 bytes; refused",
    }
    model = harness.script({"content": "never"})
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        option = "--config" if name.endswith(".yaml") else "--output-schema"
        workflow_id = f"big-{uuid.uuid4().hex[:12]}"
        done = await run_cli(
            *harness.cli_args(), "run", "x", "--model", model, option, str(path),
            "--id", workflow_id,
        )  # fmt: skip
        line = refusal(done)
        assert line.startswith("error: ") and refusals[name] in line, line
        await _never_started(harness, workflow_id)
