"""The post-tools hook inside real runs: a step that writes files is committed with a message
naming the step, the tools and the files; a workspace that is no repository is left alone; a
step that only reads runs no hook; and without hooks in the config nothing changes."""

from __future__ import annotations

import pytest

from tests.support.harness import Harness
from tests.support.repos import committed_repo, git
from tests.support.stream import events
from treadle.workflows.agent.messages.models import AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow


def write(path: str, content: str) -> dict[str, object]:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


async def hook_lines(handle: object) -> list[str]:
    trace = await handle.query(AgentWorkflow.trace)  # type: ignore[attr-defined]
    return [e.data for e in trace.entries if e.event == "HookRun"]


@pytest.mark.replay_corpus
async def test_a_step_that_writes_is_committed(harness: Harness) -> None:
    repo = harness.workspace
    committed_repo(repo)
    model = harness.script(
        {"tool_calls": [write("notes.md", "one\n"), write("src/app.py", "print(1)\n")]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
        {"content": "committed"},
    )
    handle = await harness.start(
        model, hooks=["git_commit"], commit_author="Agent Smith <smith@example.com>"
    )
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "committed")
    log = git(repo, "log", "--format=%an <%ae>%n%B%n--end--")
    commits = log.split("--end--")
    assert "Agent Smith <smith@example.com>" in commits[0]
    assert "step 1" in commits[0] and "write_file" in commits[0]
    assert "notes.md" in commits[0] and "src/app.py" in commits[0]
    assert f"Treadle-Step: {handle.id}/" in commits[0]
    assert git(repo, "status", "--porcelain") == ""
    # One commit for the one writing step; the reading step ran no hook.
    assert len(git(repo, "rev-list", "HEAD").split()) == 2
    [line] = await hook_lines(handle)
    assert line.startswith("git_commit: done")
    hook_events = [e for e in await events(handle) if e.kind == "hook"]
    assert [e.ok for e in hook_events] == [True]


@pytest.mark.replay_corpus
async def test_a_workspace_that_is_no_repository_is_left_alone(harness: Harness) -> None:
    model = harness.script({"tool_calls": [write("notes.md", "x")]}, {"content": "ok"})
    handle = await harness.start(model, hooks=["git_commit"])
    assert (await handle.result()).status is RunStatus.DONE
    [line] = await hook_lines(handle)
    assert line.startswith("git_commit: skipped")
    assert not (harness.workspace / ".git").exists()


@pytest.mark.replay_corpus
async def test_without_hooks_the_step_only_notes_what_changed(harness: Harness) -> None:
    model = harness.script({"tool_calls": [write("notes.md", "x")]}, {"content": "ok"})
    handle = await harness.start(model)
    await handle.result()
    assert await hook_lines(handle) == ["changed: notes.md"]


def test_unknown_hooks_and_bad_authors_are_config_errors() -> None:
    import pytest
    from pydantic import ValidationError

    from treadle.workflows.agent.messages.models import AgentConfig

    assert AgentConfig(hooks="git_commit").hooks == ("git_commit",)
    with pytest.raises(ValidationError, match=r"unknown hook\(s\): git_push"):
        AgentConfig(hooks=["git_push"])
    with pytest.raises(ValidationError, match="not in the form 'Name <email>'"):
        AgentConfig(commit_author="nobody")
