"""Your own tools: one module and one registration line give a tool everything the built-in
ones have — schema from the argument model, validation before anything runs, approval, the
blacklist, the run's choice of tools, parallel calls, summaries and the live stream. The
registered example, ``git_diff``, runs no code the workspace's git configuration names."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from activities.tools import git_diff
from activities.tools.custom import Tool, ToolContext
from tests.conftest import Harness, tool_messages
from tests.stream_support import events
from workflows.agent import catalogue, toolbox
from workflows.agent.catalogue import TOOLS, ToolSpec
from workflows.agent.models import AgentConfig, AgentResult, ApproveSignal, ToolPolicy
from workflows.agent.toolbox import Toolbox
from workflows.agent.workflow import AgentWorkflow


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


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
