"""Keys never leak: the worker's own secrets, met by a run in a workspace file, a custom tool's
return value or exception, an MCP server's reply, a hook's output or a streamed model reply,
are in none of the places a run leaves text — the decoded history, the ``export`` query and
``starter.py export``, the live stream, the store's blobs, the worker's log at DEBUG and the
exported spans with content capture on. Each run is real: a dev server, a worker built by
``build_worker`` (and one started as ``worker.py``), the scripted model over HTTP, a real MCP
server process."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.support.canary import decoded_payloads
from tests.support.harness import TEST_STORE, replayer
from tests.support.mcp_server import stdio_entry
from tests.support.processes import ROOT, clean_env, run_cli
from tests.support.stream import stream_items
from tests.support.telemetry import Observed, content_capture, flush_spans, observed_client
from treadle.activities.content import REDACTED, worker_secrets
from treadle.activities.hooks.git_commit import GitCommit
from treadle.activities.mcp import McpActivities, parse_mcp_config
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.tools import git_diff, registry
from treadle.activities.tools.custom import Tool, ToolContext
from treadle.cli.worker import build_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.hooks import HookRequest, HookResult
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

FRAGMENT = 8
"""Any this many consecutive characters of a secret, in any case, is a leak."""

# Letters no hex id, base64 word or English text is likely to line up with, and no "-": a key
# made of them never looks like one, so only redaction by value can catch it.
_LETTERS = "ghjkmnpqrstvwxyzGHJKMNPQRSTVWXYZ"


def canary(length: int = 40) -> str:
    """A fresh mixed-case secret, made at run time so no scanner finds one in the source."""
    return "".join(secrets.choice(_LETTERS) for _ in range(length // 2)) + "".join(
        secrets.choice(_LETTERS.upper()) for _ in range(length - length // 2)
    )


def leaks(text: str, secret: str) -> list[str]:
    """Every ``FRAGMENT``-character piece of ``secret`` in ``text``, exact or in any case."""
    folded = text.casefold()
    pieces = [secret[i : i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1)]
    return [piece for piece in pieces if piece.casefold() in folded]


@dataclass(frozen=True)
class Canaries:
    """The secrets a worker knows: its configured key, a secret-named variable's value, and a
    key-shaped string it was never told about."""

    key: str
    env_value: str
    shaped: str

    def known(self) -> dict[str, str]:
        """The secrets known by value: no 8 characters of them may leak."""
        return {"configured key": self.key, "env secret": self.env_value}

    def text(self) -> str:
        """A file's worth of them, the way a .env or a config dump holds them."""
        return (
            f"OPENAI_API_KEY={self.key}\nDEPLOY_TOKEN='{self.env_value}'\n"
            f"legacy={self.shaped}\nlowered={self.key.lower()}\n"
        )


@dataclass
class Door:
    """A traced worker holding the canaries, its MCP server given the key, and its log."""

    observed: Observed
    models: ScriptedModelServer
    task_queue: str
    workspace: Path
    canaries: Canaries
    caplog: pytest.LogCaptureFixture
    model: str = ""
    """The scripted model of the last run."""

    async def run(self, *turns: dict[str, Any], **config: Any) -> WorkflowHandle[Any, Any]:
        """A run of the scripted ``turns`` to its end, replay-checked. Workspace snapshots
        (on by default) are off: they keep the workspace's files in the store byte for byte,
        secrets included, as a check-out must give them back (docs/workspaces.md); the door is
        what the worker itself writes and says."""
        config.setdefault("snapshots", {"enabled": False})
        name = f"door-{uuid.uuid4().hex[:10]}"
        self.models.add_model(name, list(turns))
        self.model = name
        handle = await self.observed.client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="Look at the workspace.",
                model=f"openai:{name}",
                workspace=str(self.workspace),
                config=AgentConfig.model_validate(config),
            ),
            id=f"door-{uuid.uuid4().hex[:12]}",
            task_queue=self.task_queue,
        )
        result: AgentResult = await handle.result()
        assert result.status is RunStatus.DONE, result
        await replayer().replay_workflow(await handle.fetch_history())
        return handle

    async def everywhere(self, handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
        """Every place the run left text, by name."""
        history = await handle.fetch_history()
        exported = await handle.query(AgentWorkflow.export)
        cli = await run_cli(
            "--address",
            self.observed.client.service_client.config.target_host,
            "export",
            handle.id,
        )
        assert cli.returncode == 0, cli.stderr
        await flush_spans()
        return {
            "decoded history": history.to_json()
            + "\n".join(decoded_payloads(history.to_json_dict())),
            "export query": exported.model_dump_json(),
            "starter.py export": cli.stdout,
            "stream": "\n".join(repr(value) for _, value in await stream_items(handle)),
            "trace query": (await handle.query(AgentWorkflow.trace)).model_dump_json(),
            "store blobs": "\n".join(
                p.read_bytes().decode("utf-8", "replace")
                for p in TEST_STORE.rglob("*")
                if p.is_file()
            ),
            "worker log": self.caplog.text
            + "\n".join(str(vars(record)) for record in self.caplog.records),
            "spans": self.observed.receiver.raw().decode("utf-8", "replace"),
        }

    async def assert_no_leak(self, handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
        places = await self.everywhere(handle)
        for place, text in places.items():
            for what, secret in self.canaries.known().items():
                assert not leaks(text, secret), f"{what} leaked into the {place}"
            # Known only by its shape, and redacted before a long output's preview cuts it: not
            # even a fragment of it is anywhere.
            assert not leaks(text, self.canaries.shaped), f"sk-... in {place}"
        return places


MakeDoor = Callable[[], AbstractAsyncContextManager[Door]]


@pytest.fixture
def door(
    temporal_address: str,
    model_server: ScriptedModelServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> MakeDoor:
    """``async with door() as d``: the worker of one test, its secrets planted."""

    @asynccontextmanager
    async def make() -> AsyncIterator[Door]:
        caplog.set_level(logging.DEBUG)
        canaries = Canaries(key=canary(), env_value=canary(24), shaped="sk-" + canary(32))
        monkeypatch.setenv("MCP_TEST_SECRET", canaries.key)  # the MCP server is given the key
        environ = {"DEPLOY_TOKEN": canaries.env_value, "MCP_TEST_SECRET": canaries.key}
        observed = await observed_client(temporal_address)
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        task_queue = f"door-{uuid.uuid4().hex[:10]}"
        settings = ProviderSettings.from_env(
            {"OPENAI_BASE_URL": model_server.base_url, "OPENAI_API_KEY": canaries.key}
        )
        mcp_config = parse_mcp_config({"servers": [stdio_entry("box", env=["MCP_TEST_SECRET"])]})
        mcp = McpActivities(mcp_config, environ=os.environ)
        async with (
            mcp,
            http_client() as http,
            build_worker(
                observed.client,
                task_queue=task_queue,
                settings=settings,
                http=http,
                store=FileBlobStore(TEST_STORE),
                mcp=mcp,
                # What worker.py passes: its secret-named variables and the MCP servers' ones.
                secrets=worker_secrets((), environ, ["MCP_TEST_SECRET"]),
            ),
        ):
            with content_capture():
                yield Door(observed, model_server, task_queue, workspace, canaries, caplog)

    return make


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def use_custom_tool(
    monkeypatch: pytest.MonkeyPatch, run: Callable[[Any, ToolContext], Awaitable[str]]
) -> None:
    """The registered custom tool (``git_diff``: its schema, its catalogue entry) runs ``run``
    on this worker instead: what your own tool returns or raises is the test's to choose."""
    tool: Tool[Any] = Tool(
        name="git_diff", description="A custom tool.", args=git_diff.GitDiffArgs, run=run
    )
    monkeypatch.setitem(registry.BY_NAME, "git_diff", tool)


# --------------------------------------------------------------------------------------------
# (1) A workspace file holding the secrets, read with read_file and with run_command cat
# --------------------------------------------------------------------------------------------


async def test_a_key_file_read_by_read_file_and_cat_leaks_nowhere(door: MakeDoor) -> None:
    """A short file and a long one (its output stored, with a preview of its head and tail)
    that hold the configured key, a secret-named variable's value, a key-shaped string and the
    key lower-cased: read with ``read_file`` and with ``run_command cat``, none is anywhere."""
    async with door() as d:
        (d.workspace / "short.txt").write_text(d.canaries.text())
        filler = "x" * 3000
        (d.workspace / "long.txt").write_text(f"{d.canaries.text()}{filler}\n{d.canaries.text()}")
        # The key-shaped string across the point where a long output's preview is cut (after
        # cat's "exit code 0" line it stands at characters 232 to 267; the preview keeps 240).
        (d.workspace / "cut.txt").write_text("y" * 219 + " " + d.canaries.shaped + " " + filler)
        handle = await d.run(
            {
                "tool_calls": [
                    call("read_file", path="short.txt"),
                    call("read_file", path="long.txt"),
                    call("run_command", command="cat short.txt"),
                    call("run_command", command="cat long.txt"),
                    call("run_command", command="cat cut.txt"),
                ]
            },
            {"content": "read them"},
            allow_run_command=True,
            command_allowlist=["cat"],
        )
        places = await d.assert_no_leak(handle)
    assert REDACTED in places["decoded history"]  # the outputs are there, redacted
    assert REDACTED in places["store blobs"]  # the long ones' whole outputs too
    request = json.dumps(d.models.requests_for(d.model)[-1].body)
    assert REDACTED in request and not leaks(request, d.canaries.key)  # the model never saw it
    assert "gen_ai.input.messages" in places["spans"]  # content capture was on


# --------------------------------------------------------------------------------------------
# (2) A custom tool's return value and its exception
# --------------------------------------------------------------------------------------------


async def test_a_custom_tools_return_value_leaks_nowhere(
    door: MakeDoor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Your own tool returns the secrets (a short and a long output): redacted everywhere."""
    async with door() as d:

        async def returns(args: Any, context: ToolContext) -> str:
            return d.canaries.text() * (1 if args.stat else 40)

        use_custom_tool(monkeypatch, returns)
        handle = await d.run(
            {"tool_calls": [call("git_diff", stat=True), call("git_diff")]},
            {"content": "diffed"},
        )
        places = await d.assert_no_leak(handle)
    assert REDACTED in places["decoded history"]


async def test_a_custom_tools_exception_leaks_nowhere(
    door: MakeDoor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Your own tool raises with the secrets in its message and in the exception it was raised
    from: the failed attempts are logged as WARNINGs and recorded as failures, redacted."""
    async with door() as d:

        async def raises(args: Any, context: ToolContext) -> str:
            try:
                raise KeyError(f"inner {d.canaries.text()}")
            except KeyError as exc:
                raise RuntimeError(f"could not diff: {d.canaries.text()}") from exc

        use_custom_tool(monkeypatch, raises)
        handle = await d.run(
            {"tool_calls": [call("git_diff")]}, {"content": "gave up"}, tool_max_attempts=2
        )
        places = await d.assert_no_leak(handle)
    assert "Completing activity as failed" in places["worker log"]
    assert "could not diff" in places["worker log"] and REDACTED in places["worker log"]
    assert "could not diff" in places["decoded history"]


# --------------------------------------------------------------------------------------------
# (3) An MCP server's reply
# --------------------------------------------------------------------------------------------


async def test_an_mcp_servers_reply_leaks_nowhere(door: MakeDoor) -> None:
    """A real MCP server process, given the worker's key in its environment (as an MCP config's
    ``env`` passes it), answers with it (``whoami``): redacted everywhere."""
    async with door() as d:
        handle = await d.run(
            {"tool_calls": [call("mcp__box__whoami")]},
            {"content": "asked"},
            mcp_servers=["box"],
        )
        places = await d.assert_no_leak(handle)
    assert "mcp__box__whoami" in places["decoded history"]
    assert REDACTED in places["decoded history"]


# --------------------------------------------------------------------------------------------
# (4) A post-tools hook's output and its exception
# --------------------------------------------------------------------------------------------


async def test_a_hooks_output_and_exception_leak_nowhere(
    door: MakeDoor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post-tools hook (the ``git_commit`` slot, its code replaced) reports the secrets on
    its first step and raises with them on the second: redacted everywhere."""
    async with door() as d:
        calls: list[int] = []

        async def hook(self: GitCommit, request: HookRequest) -> HookResult:
            calls.append(request.step)
            if len(calls) == 1:
                return HookResult(hook="git_commit", outcome="done", detail=d.canaries.text())
            raise RuntimeError(f"commit failed: {d.canaries.text()}")

        monkeypatch.setattr(GitCommit, "run", hook)
        handle = await d.run(
            {"tool_calls": [call("write_file", path="a.md", content="a")]},
            {"tool_calls": [call("write_file", path="b.md", content="b")]},
            {"content": "written"},
            hooks=["git_commit"],
            tool_max_attempts=1,
        )
        places = await d.assert_no_leak(handle)
    assert len(calls) >= 2
    assert "commit failed" in places["decoded history"]


# --------------------------------------------------------------------------------------------
# (5) A streamed model reply
# --------------------------------------------------------------------------------------------


async def test_a_streamed_reply_leaks_nowhere(door: MakeDoor) -> None:
    """The model's reply quotes the secrets as it streams (slowly enough to be published in
    batches on the live stream) and in a tool call's arguments: redacted everywhere."""
    async with door() as d:
        words = " ".join(f"w{n}" for n in range(12))
        said = f"{words} {d.canaries.text()} {words} {d.canaries.key.upper()} {words}"
        handle = await d.run(
            {"tool_calls": [call("list_dir", path=".")], "content": d.canaries.text()},
            {"content": said, "chunk_delay": 0.05},
        )
        places = await d.assert_no_leak(handle)
    assert "TokenDelta" in places["stream"]  # the reply was published while it streamed
    assert REDACTED in places["stream"]


async def test_secrets_in_a_large_write_leak_nowhere(door: MakeDoor) -> None:
    """The model writes a long file quoting the secrets (its content stored by reference, the
    marker's preview cut from it): redacted everywhere, the file written redacted."""
    async with door() as d:
        content = d.canaries.text() + "z" * 3000 + d.canaries.text()
        handle = await d.run(
            {"tool_calls": [call("write_file", path="leak.txt", content=content)]},
            {"content": "wrote it"},
        )
        places = await d.assert_no_leak(handle)
    written = (d.workspace / "leak.txt").read_text()
    assert REDACTED in written and not leaks(written, d.canaries.key)
    assert REDACTED in places["store blobs"]


# --------------------------------------------------------------------------------------------
# (6) worker.py itself: what its environment holds, it knows
# --------------------------------------------------------------------------------------------


@asynccontextmanager
async def worker_process(
    address: str, task_queue: str, env: dict[str, str], log: Path
) -> AsyncIterator[None]:
    """``python worker.py`` logging at DEBUG into ``log`` (a file: nothing to drain), until it
    polls; SIGTERM and wait at the end."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(ROOT / "worker.py"),
            *("--address", address, "--task-queue", task_queue, "--log-level", "DEBUG"),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(60):
                while "orker polling task queue" not in log.read_text(errors="replace"):
                    assert process.returncode is None, log.read_text(errors="replace")
                    await asyncio.sleep(0.1)
            yield
        finally:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 60)


async def test_worker_py_redacts_its_environments_secrets(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """``worker.py`` started with a key and a secret-named variable (``DEPLOY_TOKEN``, never
    configured as a key) in its environment: a file holding both, read by a run, leaves no
    trace in the history, the store or the worker's own DEBUG log."""
    key, token = canary(), canary(24)
    (tmp_path / "creds.txt").write_text(f"key={key}\ntoken={token}\n")
    name = f"door-{uuid.uuid4().hex[:10]}"
    model_server.add_model(
        name, [{"tool_calls": [call("read_file", path="creds.txt")]}, {"content": "read"}]
    )
    task_queue = f"door-{uuid.uuid4().hex[:10]}"
    address = client.service_client.config.target_host
    env = clean_env(OPENAI_BASE_URL=model_server.base_url, OPENAI_API_KEY=key, DEPLOY_TOKEN=token)
    log = tmp_path / "worker.log"
    async with worker_process(address, task_queue, env, log):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentInput(task="Read the creds.", model=f"openai:{name}", workspace=str(tmp_path)),
            id=f"door-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue,
        )
        result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE
    history = (await handle.fetch_history()).to_json_dict()
    places = {
        "decoded history": json.dumps(history) + "\n".join(decoded_payloads(history)),
        "store blobs": "\n".join(
            p.read_bytes().decode("utf-8", "replace") for p in TEST_STORE.rglob("*") if p.is_file()
        ),
        "worker log": log.read_text(errors="replace"),
    }
    assert "Completing activity with completion" in places["worker log"]  # DEBUG it was
    assert REDACTED in places["decoded history"]
    for place, text in places.items():
        for what, secret in {"key": key, "DEPLOY_TOKEN": token}.items():
            assert not leaks(text, secret), f"{what} leaked into the {place}"
