"""Your own tools: one module and one registration line give a tool everything the built-in
ones have — schema from the argument model, validation before anything runs, approval, the
blacklist, the run's choice of tools, parallel calls, summaries and the live stream. The
registered example, ``git_diff``, runs no code the workspace's git configuration names."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import Harness, tool_messages
from tests.support.processes import ROOT, clean_env, start_worker
from tests.support.repos import git
from tests.support.stream import events
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.tools import git_diff
from treadle.activities.tools.custom import Tool, ToolContext
from treadle.activities.workspace import Manifests
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages import catalogue
from treadle.workflows.agent.messages.catalogue import TOOLS, ToolSpec
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentResult,
    ApproveSignal,
    ToolPolicy,
)
from treadle.workflows.agent.messages.search_attributes import start_attributes
from treadle.workflows.agent.parts import toolbox
from treadle.workflows.agent.parts.toolbox import Toolbox
from treadle.workflows.agent.workflow import AgentWorkflow


def repository(path: Path) -> Path:
    """A git repository with one committed file and one uncommitted change to it."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    (path / "app.py").write_text("print('one')\n")
    git(path, "add", "app.py")
    git(path, "commit", "-q", "-m", "first")
    (path / "app.py").write_text("print('two')\n")
    return path


DIFF = {"name": "git_diff", "arguments": {"path": "app.py"}}

# --------------------------------------------------------------------------------------------
# The catalogue and the run's config
# --------------------------------------------------------------------------------------------


def test_a_registered_tool_is_in_the_catalogue_with_its_schema() -> None:
    spec = TOOLS["git_diff"]
    assert spec.custom and not spec.mutating and not spec.needs_approval
    schema = spec.json_schema()
    assert schema["properties"]["path"]["description"].startswith("File or directory")
    assert set(schema["properties"]) == {"path", "staged", "stat"}
    assert "git_diff" in Toolbox(AgentConfig()).offered_names()


def test_a_run_chooses_its_tools_by_name() -> None:
    config = AgentConfig(tools=["read_file", "git_diff"])
    assert Toolbox(config).offered_names() == ("read_file", "git_diff")
    assert Toolbox(AgentConfig(tools="git_diff")).offered_names() == ("git_diff",)
    with pytest.raises(ValidationError, match=r"unknown tool name.*gitt_diff"):
        AgentConfig(tools=["gitt_diff"])


def test_a_tool_that_declares_approval_always_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    guarded = ToolSpec(
        "deploy", "Deploy.", git_diff.GitDiffArgs, mutating=True, target=str, needs_approval=True
    )
    monkeypatch.setattr(toolbox, "TOOLS", {**TOOLS, "deploy": guarded})
    assert Toolbox(AgentConfig()).approval_required() == {"deploy"}
    config = AgentConfig(require_approval=["write_file"])
    assert Toolbox(config).approval_required() == {"deploy", "write_file"}


@pytest.mark.parametrize(
    ("name", "problem"),
    [("Deploy", "does not match"), ("read_file", "registered twice"), ("x" * 65, "does not match")],
)
def test_a_bad_registration_stops_the_worker(name: str, problem: str) -> None:
    tool: Tool[Any] = Tool(
        name=name, description="d", args=git_diff.GitDiffArgs, run=git_diff.git_diff
    )
    before = dict(TOOLS)
    with pytest.raises(ValueError, match=problem):
        catalogue.register([tool])
    assert dict(TOOLS) == before


# --------------------------------------------------------------------------------------------
# The example tool on its own
# --------------------------------------------------------------------------------------------


async def test_git_diff_shows_the_change(tmp_path: Path) -> None:
    repo = repository(tmp_path / "repo")
    context = ToolContext(workspace=repo, policy=ToolPolicy())
    output = await git_diff.git_diff(git_diff.GitDiffArgs(path="app.py"), context)
    assert "-print('one')" in output.text and "+print('two')" in output.text
    stat = await git_diff.git_diff(git_diff.GitDiffArgs(stat=True), context)
    assert "app.py" in stat.text and "1 insertion" in stat.text


async def test_git_diff_runs_no_program_the_repository_names(tmp_path: Path) -> None:
    """A workspace whose git config names an external diff program, a text conversion and a
    file-system monitor: none of them runs."""
    repo = repository(tmp_path / "repo")
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    git(repo, "config", "diff.external", str(script))
    git(repo, "config", "core.fsmonitor", str(script))
    git(repo, "config", "diff.evil.textconv", str(script))
    (repo / ".gitattributes").write_text("*.py diff=evil\n")
    context = ToolContext(workspace=repo, policy=ToolPolicy())
    output = await git_diff.git_diff(git_diff.GitDiffArgs(), context)
    assert "+print('two')" in output.text
    assert not marker.exists()


# --------------------------------------------------------------------------------------------
# In a run
# --------------------------------------------------------------------------------------------


async def start_in_repo(harness: Harness, model: str, **config: Any) -> Any:
    repository(harness.workspace)
    return await harness.start(model, **config)


async def test_the_model_calls_it_like_any_tool(harness: Harness) -> None:
    model = harness.script(
        {"tool_calls": [DIFF, {"name": "git_diff", "arguments": {"stat": True}}]},
        {"content": "one line changed"},
    )
    handle = await start_in_repo(harness, model)
    result: AgentResult = await handle.result()
    assert result.answer == "one line changed"
    first, second = tool_messages(harness.requests(model)[1])
    assert "+print('two')" in first["content"] and "1 insertion" in second["content"]
    assert "git_diff" in [t["function"]["name"] for t in harness.requests(model)[0]["tools"]]
    trace = [(e.event, e.data) for e in (await handle.query(AgentWorkflow.trace)).entries]
    assert ("LlmParallelToolCalls", "Planning -> ParallelActing") in trace
    started = [e for e in await events(handle) if e.kind == "tool_started"]
    assert [(e.tool, e.target) for e in started] == [("git_diff", "app.py"), ("git_diff", ".")]


async def test_approval_blacklist_and_bad_arguments_apply(harness: Harness) -> None:
    model = harness.script({"tool_calls": [DIFF]}, {"content": "approved and shown"})
    handle = await start_in_repo(harness, model, require_approval=["git_diff"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    assert status.pending_approvals[0].tool == "git_diff"
    await handle.signal(AgentWorkflow.approve, ApproveSignal())
    assert (await handle.result()).answer == "approved and shown"

    model = harness.script(
        {"tool_calls": [DIFF]},
        {"tool_calls": [{"name": "git_diff", "arguments": {"path": "app.py", "colour": 1}}]},
        {"content": "done"},
    )
    handle = await harness.start(model, blacklisted_tools=["git_diff"], max_steps=5)
    await handle.result()
    second = harness.requests(model)[1]
    assert "git_diff" not in [t["function"]["name"] for t in second["tools"]]
    [blocked] = tool_messages(second)
    assert blocked["content"].startswith("ERROR:") and "git_diff" in blocked["content"]

    model = harness.script(
        {"tool_calls": [{"name": "git_diff", "arguments": {"path": "app.py", "colour": 1}}]},
        {"content": "done"},
    )
    handle = await harness.start(model)
    await handle.result()
    [bad] = tool_messages(harness.requests(model)[1])
    assert bad["content"].startswith("ERROR: arguments for git_diff do not match its schema")


async def test_a_tool_error_is_an_observation(harness: Harness) -> None:
    """Not a repository: the tool's ToolError is what the model reads; the run goes on."""
    model = harness.script({"tool_calls": [DIFF]}, {"content": "no repo here"})
    handle = await harness.start(model)
    assert (await handle.result()).answer == "no repo here"
    [error] = tool_messages(harness.requests(model)[1])
    assert error["content"] == "ERROR: the workspace is not a git repository"


# --------------------------------------------------------------------------------------------
# Your own module, loaded by the worker (worker.py --tools), without forking
# --------------------------------------------------------------------------------------------

SHOUT_MODULE = """\
from pydantic import Field

from treadle.activities.tools.custom import Tool, ToolArgs, ToolContext


class ShoutArgs(ToolArgs):
    text: str = Field(description="What to shout.")


async def shout(args: ShoutArgs, context: ToolContext) -> str:
    return args.text.upper() + "!"


TOOLS = (
    Tool(
        name="shout_it",
        description="Shout the text.",
        args=ShoutArgs,
        run=shout,
        target=lambda args: args.text,
    ),
)
"""


@pytest.mark.parametrize("shown", [True, False], ids=["lean-start", "started-bare"])
async def test_a_worker_loads_your_tool_module_and_runs_offer_it(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path, shown: bool
) -> None:
    """``worker.py --tools my_module``: the run lists the worker's loaded tools once (recorded),
    offers them to the model and runs them like the registry's; a worker killed mid-run is
    replaced by one with the same ``--tools``, which replays the listing and finishes. A run
    started as Treadle's clients start it lists them with its first model call (no marker);
    one started without its attributes, by a local activity (one marker)."""
    (tmp_path / "shout_tools.py").write_text(SHOUT_MODULE)
    model = f"shout-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "shout_it", "arguments": {"text": "hello"}}]},
            {"content": "shouted", "delay": 3},
        ],
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = clean_env(OPENAI_BASE_URL=model_server.base_url, PYTHONPATH=path)
    address = client.service_client.config.target_host
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    first = await start_worker(address, task_queue, env, "--tools", "shout_tools")
    agent_input = AgentInput(task="shout", model=f"openai:{model}", workspace=str(tmp_path / "ws"))
    handle = await client.start_workflow(
        AgentWorkflow.run,
        agent_input,
        id=f"shout-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        search_attributes=start_attributes(agent_input) if shown else None,
        execution_timeout=timedelta(minutes=3),
    )
    for _ in range(300):  # the tool ran and the second model call is live
        if len(model_server.requests_for(model)) >= 2:
            break
        await asyncio.sleep(0.1)
    await first.kill()
    second = await start_worker(address, task_queue, env, "--tools", "shout_tools")
    try:
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
        trace = [(e.event, e.data) for e in (await handle.query(AgentWorkflow.trace)).entries]
    finally:
        assert await second.terminate() == 0

    assert result.answer == "shouted"
    assert ("LoadedToolsListed", "shout_it") in trace
    requests = [r.body for r in model_server.requests_for(model)]
    assert "shout_it" in [t["function"]["name"] for t in requests[0]["tools"]]
    assert "git_diff" in [t["function"]["name"] for t in requests[0]["tools"]]
    [shouted] = tool_messages(requests[-1])
    assert shouted["content"] == "HELLO!"
    history = await handle.fetch_history()
    names = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    # Listed once, with the first call's recorded reply or by a local activity whose answer is
    # a marker: either way the second worker replayed it.
    assert names.count("core_local_activity") == (0 if shown else 1)


async def test_a_run_offers_no_tool_its_worker_did_not_load(harness: Harness) -> None:
    """The test's own workers load no module: runs list none and offer only the code's tools;
    a call of a tool no one loaded is an error observation."""
    model = harness.script(
        {"tool_calls": [{"name": "shout_it", "arguments": {"text": "x"}}]},
        {"content": "done"},
    )
    handle = await harness.start(model)
    assert (await handle.result()).answer == "done"
    offered = [t["function"]["name"] for t in harness.requests(model)[0]["tools"]]
    assert "shout_it" not in offered and "git_diff" in offered
    [error] = tool_messages(harness.requests(model)[1])
    assert error["content"].startswith("ERROR: unknown tool 'shout_it'")


def test_a_module_without_tools_stops_the_worker(tmp_path: Path) -> None:
    """``--tools`` naming a module that cannot be imported, or has no ``TOOLS``: exit 2."""
    (tmp_path / "no_tools.py").write_text("X = 1\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    for module, problem in (("no_tools", "has no TOOLS"), ("nowhere_xyz", "cannot be imported")):
        done = subprocess.run(
            [sys.executable, str(ROOT / "worker.py"), "--tools", module],
            env=clean_env(PYTHONPATH=path, TEMPORAL_ADDRESS="127.0.0.1:1"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert problem in done.stderr and module in done.stderr


NOTE_MODULE = """\
from treadle.activities.tools.custom import Tool, ToolArgs, ToolContext


class NoArgs(ToolArgs):
    pass


async def note(args: NoArgs, context: ToolContext) -> str:
    context.path("note.txt").write_text("noted")
    return "noted"


async def peek(args: NoArgs, context: ToolContext) -> str:
    return "nothing changed"


TOOLS = (
    Tool(name="note_it", description="Write a note.", args=NoArgs, run=note),
    Tool(name="peek", description="Look.", args=NoArgs, run=peek, mutating=False),
)
"""


async def test_your_tool_is_snapshotted_unless_declared_read_only(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Through ``worker.py --tools``: a tool that declares nothing may change files, so the
    workspace is snapshotted after its call (the file it wrote is in the snapshot); one
    declared read-only (``mutating=False``) takes no snapshot."""
    (tmp_path / "note_tools.py").write_text(NOTE_MODULE)
    model = f"note-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "peek", "arguments": {}}]},
            {"tool_calls": [{"name": "note_it", "arguments": {}}]},
            {"content": "done"},
        ],
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = clean_env(OPENAI_BASE_URL=model_server.base_url, PYTHONPATH=path)
    store = tmp_path / "store"
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    worker = await start_worker(
        client.service_client.config.target_host, task_queue, env,
        "--tools", "note_tools", "--store", str(store),
    )  # fmt: skip
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentInput(task="note", model=f"openai:{model}", workspace=str(tmp_path / "ws")),
            id=f"note-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=3),
        )
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
        trace = await handle.query(AgentWorkflow.trace)
        head = await handle.query(AgentWorkflow.workspace)
    finally:
        assert await worker.terminate() == 0
    assert result.answer == "done"
    snapshots = [e.data for e in trace.entries if e.event == "WorkspaceSnapshot"]
    assert [line.split(":")[0] for line in snapshots] == ["step 2"], snapshots
    assert head.manifest is not None
    state = await Manifests(FileBlobStore(store)).state(head.manifest)
    assert set(state) == {"note.txt"}
