"""Loom's post-tools hook: the ``run_hook`` activity and the built-in ``git_commit`` on real
git repositories: what is committed, what is left alone, what never runs, and idempotence."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import treadle.activities.hooks
import treadle.activities.hooks.git_commit
import treadle.workflows.agent.messages.hooks
from tests.support.repos import Repo, make_repo
from treadle.activities.hooks import HOOKS, GitCommit, HookActivities, HookFailed
from treadle.activities.hooks.git_commit import MAX_LISTED_FILES, commit_message, step_key
from treadle.activities.tools.builtin import execute_tool
from treadle.workflows.agent.messages.hooks import (
    DEFAULT_COMMIT_AUTHOR,
    KNOWN_HOOKS,
    HookRequest,
    HookResult,
    check_hook_names,
    describe,
    hook_call,
    parse_author,
)
from treadle.workflows.agent.messages.models import ToolPolicy

AUTHOR = "Ada Lovelace <ada@example.com>"


def request(workspace: Path, step: int = 3, **fields: object) -> HookRequest:
    values: dict[str, object] = {
        "hook": "git_commit",
        "workspace": str(workspace),
        "step": step,
        "tools": ("write_file", "edit_file"),
        "files": ("notes.md", "src/app.py"),
        "workflow_id": "agent-1234",
        "run_id": "run-5678",
    }
    values.update(fields)
    return HookRequest.model_validate(values)


async def look(repo: Repo) -> None:
    """An earlier step of the run's hook, changing nothing: the hook has looked at the work
    tree, so what commands change from here on is told apart from what was there."""
    result = await run_hook(request(repo.path, step=1, tools=("run_command",), files=()))
    assert result.outcome == "nothing"


async def run_hook(req: HookRequest, activities_: HookActivities | None = None) -> HookResult:
    acts = activities_ or HookActivities()
    result: HookResult = await ActivityEnvironment().run(acts.run_hook, req)
    return result


# --------------------------------------------------------------------------------------------
# What is committed
# --------------------------------------------------------------------------------------------


async def test_a_step_is_committed_with_its_files_message_and_author(repo: Repo) -> None:
    """The step's changes become one commit: its files, a message naming the step, the tools,
    the files and the run, with the configured author as author and committer."""
    repo.write("notes.md", "notes\n")
    repo.write("src/app.py", "print('v2')\n")
    before = repo.head()

    result = await run_hook(request(repo.path, commit_author=AUTHOR))

    assert result.outcome == "done"
    assert result.commit == repo.head() != before
    assert result.detail == f"committed 2 files as {result.commit[:12]}"
    assert repo.git("rev-parse", "HEAD~1").strip() == before
    assert repo.changed_in(result.commit) == ["A\tnotes.md", "M\tsrc/app.py"]
    assert repo.message(result.commit) == (
        "treadle: step 3 — write_file, edit_file\n"
        "\n"
        "Files:\n"
        "- notes.md (new)\n"
        "- src/app.py\n"
        "\n"
        "Run: agent-1234\n"
        "Treadle-Step: agent-1234/run-5678/3\n"
    )
    assert repo.people(result.commit) == f"{AUTHOR}|{AUTHOR}"
    assert repo.status() == ""


async def test_without_an_author_treadle_commits(repo: Repo) -> None:
    """With no author in the config, commits are by ``Treadle <treadle@localhost>``."""
    repo.write("notes.md", "notes\n")
    result = await run_hook(request(repo.path))
    assert result.commit is not None
    assert repo.people(result.commit) == f"{DEFAULT_COMMIT_AUTHOR}|{DEFAULT_COMMIT_AUTHOR}"


async def test_files_a_command_changed_are_committed_too(repo: Repo) -> None:
    """A file made by ``run_command`` (no tool reported it) and a deletion are in the commit,
    being changes since the hook last looked; what ``.gitignore`` lists is not."""
    repo.write(".gitignore", "*.log\n")
    repo.commit_all("ignore logs")
    await look(repo)
    policy = ToolPolicy(allow_run_command=True, command_allowlist=("touch", "rm"))
    for command in ("touch made-by-command.txt build.log", "rm README.md"):
        outcome = await execute_tool(repo.path, "run_command", {"command": command}, policy)
        assert outcome.success, outcome.output
    repo.write("notes.md", "notes\n")

    result = await run_hook(request(repo.path, tools=("write_file", "run_command")))

    assert result.outcome == "done"
    assert result.commit is not None
    assert repo.changed_in(result.commit) == [
        "A\tmade-by-command.txt",
        "A\tnotes.md",
        "D\tREADME.md",
    ]
    assert "- README.md (deleted)\n" in repo.message(result.commit)
    assert repo.status() == ""  # build.log is ignored, so not even untracked
    assert (repo.path / "build.log").exists()


async def test_the_users_staged_and_unstaged_work_stays_out_and_as_it_was(repo: Repo) -> None:
    """The user's unstaged edit of README.md and staged user-staged.txt are neither in the
    step's commit nor changed in the user's index: the first stays unstaged, the second staged.
    The commit holds what the step's tools changed: a written file and a command's file."""
    repo.write("README.md", "# the user's edit, not staged\n")
    repo.write("user-staged.txt", "the user's, staged\n")
    repo.git("add", "user-staged.txt")
    await look(repo)
    policy = ToolPolicy(allow_run_command=True, command_allowlist=("touch",))
    outcome = await execute_tool(repo.path, "run_command", {"command": "touch by-command"}, policy)
    assert outcome.success, outcome.output
    repo.write("agent.txt", "the agent's\n")

    result = await run_hook(
        request(repo.path, tools=("write_file", "run_command"), files=("agent.txt",))
    )

    assert result.outcome == "done", result.detail
    assert result.commit == repo.head()
    assert repo.changed_in(result.commit) == ["A\tagent.txt", "A\tby-command"]
    assert repo.status() == " M README.md\nA  user-staged.txt\n"
    assert repo.git("show", ":user-staged.txt") == "the user's, staged\n"


async def test_a_repository_without_commits_gets_its_first(tmp_path: Path, home: Path) -> None:
    """A freshly initialised repository (no HEAD yet) gets the step's commit as its first."""
    repo = make_repo(tmp_path / "ws", home, commit=False)
    repo.write("notes.md", "notes\n")
    result = await run_hook(request(repo.path))
    assert result.outcome == "done"
    assert repo.count() == 1
    assert repo.changed_in(repo.head()) == ["A\tnotes.md"]


async def test_a_long_list_of_files_is_cut_in_the_message(repo: Repo) -> None:
    """Every changed file is committed; the message lists the first 50 and counts the rest."""
    await look(repo)
    for n in range(MAX_LISTED_FILES + 5):
        repo.write(f"gen/file{n:03}.txt", f"{n}\n")
    result = await run_hook(request(repo.path, tools=("run_command",)))
    assert result.commit is not None
    assert len(repo.changed_in(result.commit)) == MAX_LISTED_FILES + 5
    message = repo.message(result.commit)
    assert "- gen/file049.txt (new)\n- ... and 5 more\n" in message
    assert "file050" not in message


# --------------------------------------------------------------------------------------------
# What is left alone
# --------------------------------------------------------------------------------------------


async def test_nothing_changed_makes_no_commit(repo: Repo) -> None:
    """A workspace matching HEAD gets no commit (not even an empty one): outcome ``nothing``."""
    repo.write("src/app.py", "print('v1')\n")  # the same content written again
    result = await run_hook(request(repo.path))
    assert result == HookResult(
        hook="git_commit",
        outcome="nothing",
        detail="nothing to commit: the step's tools changed nothing since the last commit",
    )
    assert repo.count() == 1


async def test_a_workspace_that_is_not_a_repository_is_left_alone(tmp_path: Path) -> None:
    """No repository: outcome ``skipped``, the trace says why, and no ``.git`` is created."""
    workspace = tmp_path / "plain"
    workspace.mkdir()
    (workspace / "notes.md").write_text("notes\n")
    result = await run_hook(request(workspace))
    assert result == HookResult(
        hook="git_commit", outcome="skipped", detail="the workspace is not a git repository"
    )
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.md"]


async def test_a_workspace_inside_a_bigger_repository_is_skipped(
    tmp_path: Path, home: Path
) -> None:
    """A workspace that only lies inside a repository is not committed to: nothing is staged
    or committed there, inside the workspace or outside it."""
    outer = make_repo(tmp_path / "outer", home)
    workspace = outer.path / "workspaces" / "run-1"
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("notes\n")
    outer.write("outside.txt", "not the agent's\n")
    result = await run_hook(request(workspace))
    assert result.outcome == "skipped"
    assert result.detail == (
        "the workspace is not a git repository of its own (it is inside the one at "
        f"{outer.path}, which the hook never commits to)"
    )
    assert outer.count() == 1
    assert outer.status() == "?? outside.txt\n?? workspaces/run-1/notes.md\n"


async def test_files_outside_a_worktree_workspace_are_not_committed(
    tmp_path: Path, home: Path
) -> None:
    """A workspace made by ``git worktree add`` commits in its repository, but only the
    worktree's own files: the main checkout's changes stay uncommitted."""
    main = make_repo(tmp_path / "main", home)
    main.write("src/app.py", "print('main work in progress')\n")
    main.write("main-only.txt", "untracked in the main checkout\n")
    main.git("add", "main-only.txt")
    workspace = tmp_path / "ws"
    main.git("worktree", "add", "--quiet", "-b", "agent", str(workspace))
    (workspace / "notes.md").write_text("notes\n")

    result = await run_hook(request(workspace))

    assert result.outcome == "done"
    assert result.commit is not None
    assert main.git("rev-parse", "agent").strip() == result.commit
    assert main.changed_in(result.commit) == ["A\tnotes.md"]
    assert main.status() == "A  main-only.txt\n M src/app.py\n"
    assert main.count() == 1  # main's branch did not move


async def test_a_git_link_out_of_the_workspace_is_refused(tmp_path: Path, home: Path) -> None:
    """A ``.git`` file pointing at another repository (say, written by the model) is refused:
    that repository gets no commit and nothing staged."""
    other = make_repo(tmp_path / "other", home)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text(f"gitdir: {other.path / '.git'}\n")
    (workspace / "notes.md").write_text("notes\n")
    result = await run_hook(request(workspace))
    assert result.outcome == "failed"
    assert "leads out of the workspace" in result.detail
    assert other.count() == 1
    assert other.git("diff", "--cached", "--name-only") == ""


async def test_a_workspace_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    """A workspace path naming a file, or nothing, is refused with the reason."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert await run_hook(request(afile)) == HookResult.failure(
        "git_commit", f"the workspace {afile} is not a directory"
    )
    missing = tmp_path / "missing"
    assert await run_hook(request(missing)) == HookResult.failure(
        "git_commit", f"the workspace {missing} does not exist"
    )
    assert not missing.exists()


# --------------------------------------------------------------------------------------------
# What never runs: the repository's hooks and programs, the worker's configuration
# --------------------------------------------------------------------------------------------


def failing_hooks(directory: Path, witness: Path) -> None:
    """Hooks that leave a trace in ``witness`` and fail, as a repository might carry them."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit"):
        hook = directory / name
        hook.write_text(f"#!/bin/sh\necho {name} >> '{witness}'\nexit 1\n")
        hook.chmod(0o755)


async def test_the_repositorys_hooks_do_not_run(repo: Repo, tmp_path: Path) -> None:
    """A pre-commit hook that would fail (in .git/hooks and in a core.hooksPath the
    repository's config names) does not run: the commit is made."""
    witness = tmp_path / "hooks-ran.txt"
    failing_hooks(repo.path / ".git" / "hooks", witness)
    failing_hooks(tmp_path / "configured-hooks", witness)
    repo.git("config", "core.hooksPath", str(tmp_path / "configured-hooks"))
    repo.write("notes.md", "notes\n")
    result = await run_hook(request(repo.path))
    assert result.outcome == "done"
    assert repo.count() == 2
    assert not witness.exists()


async def test_programs_the_repository_config_names_do_not_run(repo: Repo, tmp_path: Path) -> None:
    """A clean filter and an fsmonitor in the repository's config are programs git would
    start; they do not run, and the file is committed as it is."""
    witness = tmp_path / "ran.txt"
    repo.write(".gitattributes", "*.md filter=evil\n")
    repo.git("config", "filter.evil.clean", f"echo clean >> '{witness}'; tr a-z A-Z")
    repo.git("config", "filter.evil.process", f"sh -c 'echo process >> {witness}'")
    repo.git("config", "filter.evil.required", "true")
    repo.git("config", "core.fsmonitor", f"echo fsmonitor >> '{witness}'; false")
    repo.write("notes.md", "lower case notes\n")
    result = await run_hook(request(repo.path))
    assert result.outcome == "done"
    assert not witness.exists()
    assert repo.git("show", "HEAD:notes.md") == "lower case notes\n"


async def test_the_worker_users_git_config_changes_nothing(
    repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose ~/.gitconfig signs every commit, runs failing hooks and demands
    configured identities, and whose environment names another repository, still commits
    here, unsigned, as the configured author."""
    witness = tmp_path / "hooks-ran.txt"
    failing_hooks(tmp_path / "user-hooks", witness)
    user_home = tmp_path / "user-home"
    (user_home / ".config" / "git").mkdir(parents=True)
    config = (
        "[commit]\n\tgpgsign = true\n"
        "[gpg]\n\tprogram = /nonexistent/gpg\n"
        "[user]\n\tuseConfigOnly = true\n\tsigningkey = DEADBEEF\n"
        f"[core]\n\thooksPath = {tmp_path / 'user-hooks'}\n"
        "[init]\n\tdefaultBranch = weird\n"
    )
    (user_home / ".gitconfig").write_text(config)
    (user_home / ".config" / "git" / "config").write_text(config)
    other = make_repo(tmp_path / "other", tmp_path)
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user_home / ".config"))
    monkeypatch.setenv("GIT_DIR", str(other.path / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "index"))
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM", raising=False)
    repo.write("notes.md", "notes\n")

    result = await run_hook(request(repo.path, commit_author=AUTHOR))

    assert result.outcome == "done"
    assert result.commit is not None
    assert repo.people(result.commit) == f"{AUTHOR}|{AUTHOR}"
    assert repo.git("cat-file", "commit", result.commit).count("gpgsig") == 0
    assert not witness.exists()
    assert other.count() == 1


# --------------------------------------------------------------------------------------------
# Idempotence and failures
# --------------------------------------------------------------------------------------------


async def test_a_second_attempt_for_the_same_step_returns_the_first_commit(repo: Repo) -> None:
    """Running the hook again for the same run and step (a retried attempt) makes no new
    commit and stages nothing, even with new changes; it returns the first commit."""
    repo.write("notes.md", "notes\n")
    first = await run_hook(request(repo.path))
    assert first.commit is not None
    repo.write("later.md", "written after the commit\n")

    again = await run_hook(request(repo.path))

    assert again == HookResult(
        hook="git_commit",
        outcome="done",
        detail=f"step 3 was already committed as {first.commit[:12]}",
        commit=first.commit,
    )
    assert repo.count() == 2
    assert repo.status() == "?? later.md\n"


async def test_the_step_commit_is_found_under_later_commits(repo: Repo) -> None:
    """A commit made on top since (another run, a person) does not hide the step's commit."""
    repo.write("notes.md", "notes\n")
    first = await run_hook(request(repo.path))
    repo.write("human.txt", "a person's commit\n")
    repo.commit_all("a person's commit")
    again = await run_hook(request(repo.path))
    assert again.commit == first.commit
    assert repo.count() == 3


async def test_other_steps_and_runs_commit_anew(repo: Repo) -> None:
    """The idempotence key is run and step: step 30 is not step 3, another run is another."""
    repo.write("a.md", "a\n")
    three = await run_hook(request(repo.path, step=3, files=("a.md",)))
    repo.write("b.md", "b\n")
    thirty = await run_hook(request(repo.path, step=30, files=("b.md",)))
    repo.write("c.md", "c\n")
    other_run = await run_hook(request(repo.path, step=3, run_id="run-9999", files=("c.md",)))
    commits = {three.commit, thirty.commit, other_run.commit}
    assert None not in commits
    assert len(commits) == 3
    assert repo.count() == 4


async def test_a_held_index_lock_is_retried(repo: Repo) -> None:
    """A lock a live process holds open fails the attempt as retryable ``HookBusy``; the step
    is committed by an attempt after it is let go."""
    repo.write("notes.md", "notes\n")
    lock = repo.path / ".git" / "index.lock"
    # This test's process is the live holder.
    with lock.open("w"), pytest.raises(ApplicationError) as caught:
        await run_hook(request(repo.path))
    assert caught.value.type == "HookBusy"
    assert not caught.value.non_retryable
    assert "index.lock exists" in caught.value.message
    lock.unlink()
    assert (await run_hook(request(repo.path))).outcome == "done"


@pytest.mark.parametrize("lock", ["index.lock", "HEAD.lock", "refs/heads/main.lock"])
async def test_a_lock_a_dead_process_left_is_recovered(repo: Repo, lock: str) -> None:
    """A lock nobody holds open any more (its git was killed) is removed, not waited out: the
    same attempt commits the step."""
    repo.write("notes.md", "notes\n")
    left = subprocess.run(["sh", "-c", f'echo x > "{repo.path / ".git" / lock}"'], check=True)
    assert left.returncode == 0
    result = await run_hook(request(repo.path))
    assert result.outcome == "done", result.detail
    assert result.commit == repo.head()
    assert not (repo.path / ".git" / lock).exists()
    assert repo.status() == ""


async def test_an_unfinished_merge_is_a_failed_result(repo: Repo) -> None:
    """A merge in progress (the user's, waiting for a resolution) gets no step commit: a
    ``failed`` result saying why, not an activity failure."""
    repo.git("checkout", "--quiet", "-b", "side")
    repo.write("src/app.py", "print('side')\n")
    repo.commit_all("side")
    repo.git("checkout", "--quiet", "main")
    repo.write("src/app.py", "print('main')\n")
    repo.commit_all("main")
    head = repo.head()
    with pytest.raises(subprocess.CalledProcessError):
        repo.git("merge", "--quiet", "side")  # a conflict leaves the merge in progress
    repo.write("src/app.py", "print('resolved')\n")
    result = await run_hook(request(repo.path))
    assert result == HookResult.failure(
        "git_commit",
        "the repository is in the middle of a merge (MERGE_HEAD exists); the hook commits "
        "nothing until it is finished",
    )
    assert repo.head() == head


async def test_a_worker_without_git_says_so(repo: Repo, tmp_path: Path) -> None:
    """No git on the worker's PATH is a ``failed`` result saying so."""
    hooks = HookActivities([GitCommit(environ={"PATH": str(tmp_path / "empty")})])
    result = await run_hook(request(repo.path), hooks)
    assert result == HookResult.failure(
        "git_commit", "git is not installed on the worker ('git' not on PATH)"
    )


async def test_a_cancelled_attempt_lets_a_running_git_finish(repo: Repo, tmp_path: Path) -> None:
    """Cancelled while ``git update-ref`` moves HEAD, the attempt waits for git instead of
    killing it halfway (which would leave ``index.lock`` behind for every later attempt)."""
    real = shutil.which("git")
    started = tmp_path / "commit-started"
    slow = tmp_path / "slow-git"
    slow.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        f'  if [ "$arg" = update-ref ]; then touch "{started}"; sleep 1; fi\n'
        "done\n"
        f'exec "{real}" "$@"\n'
    )
    slow.chmod(0o755)
    repo.write("notes.md", "notes\n")
    env = ActivityEnvironment()
    hooks = HookActivities([GitCommit(program=str(slow))])
    attempt = asyncio.create_task(env.run(hooks.run_hook, request(repo.path)))
    while not started.exists():
        await asyncio.sleep(0.02)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    assert repo.count() == 2
    assert not (repo.path / ".git" / "index.lock").exists()


# --------------------------------------------------------------------------------------------
# The activity boundary and the protocol
# --------------------------------------------------------------------------------------------


class Exploding:
    name = "exploding"

    async def run(self, request: HookRequest) -> HookResult:
        raise RuntimeError("a bug")


class Refusing:
    name = "refusing"

    async def run(self, request: HookRequest) -> HookResult:
        raise HookFailed("cannot here")


async def test_an_unknown_hook_is_a_failed_result(repo: Repo) -> None:
    """A hook this worker does not have is a ``failed`` result naming the ones it has."""
    result = await run_hook(request(repo.path, hook="nope"))
    assert result == HookResult.failure(
        "nope", "this worker has no hook named 'nope' (it has: git_commit)"
    )


async def test_hook_failures_cross_the_boundary_as_designed(repo: Repo) -> None:
    """``HookFailed`` becomes a ``failed`` result; any other exception a retryable
    ``ApplicationError`` typed by its class (recorded by the run when retries are over)."""
    hooks = HookActivities([Exploding(), Refusing()])
    refused = await run_hook(request(repo.path, hook="refusing"), hooks)
    assert refused == HookResult.failure("refusing", "cannot here")
    with pytest.raises(ApplicationError) as caught:
        await run_hook(request(repo.path, hook="exploding"), hooks)
    assert (caught.value.type, caught.value.message) == ("RuntimeError", "RuntimeError: a bug")
    assert not caught.value.non_retryable


def test_two_hooks_with_one_name_are_refused() -> None:
    """A worker cannot register two hooks under one name."""
    with pytest.raises(ValueError, match="two hooks are named 'exploding'"):
        HookActivities([Exploding(), Exploding()])


def test_the_registry_implements_exactly_the_known_hooks() -> None:
    """Every name a config may list has an implementation, in registry order, and no more."""
    assert tuple(hook.name for hook in HOOKS) == tuple(KNOWN_HOOKS)


def test_public_names_are_exported() -> None:
    """The hook modules' ``__all__`` lists names that exist."""
    for module in (
        treadle.activities.hooks,
        treadle.activities.hooks.git_commit,
        treadle.workflows.agent.messages.hooks,
    ):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], module.__name__


# --------------------------------------------------------------------------------------------
# The pure side: messages, names, authors, options
# --------------------------------------------------------------------------------------------


def test_authors_are_name_and_email() -> None:
    """``Name <email>`` parses; anything git would refuse is a clear error."""
    assert parse_author("Ada Lovelace <ada@example.com>") == ("Ada Lovelace", "ada@example.com")
    assert parse_author(DEFAULT_COMMIT_AUTHOR) == ("Treadle", "treadle@localhost")
    for bad in ("ada@example.com", "<ada@example.com>", "Ada <a b@c>", "A\nB <a@b>", "A <>"):
        with pytest.raises(ValueError, match="is not in the form 'Name <email>'"):
            parse_author(bad)
    with pytest.raises(ValidationError, match="commit author"):
        request(Path("/ws"), commit_author="nobody")


def test_config_names_unknown_and_repeated_hooks() -> None:
    """A config listing a hook no worker has, or one twice, is refused with the names."""
    assert check_hook_names(["git_commit"]) == ("git_commit",)
    assert check_hook_names([]) == ()
    with pytest.raises(ValueError, match=r"unknown hook\(s\): nope \(known: git_commit\)"):
        check_hook_names(["git_commit", "nope"])
    with pytest.raises(ValueError, match="listed more than once: git_commit"):
        check_hook_names(["git_commit", "git_commit"])


def test_results_name_a_commit_only_when_done() -> None:
    """Only a ``done`` result names a commit; the trace line names hook, outcome and detail."""
    with pytest.raises(ValidationError, match="names no commit"):
        HookResult(hook="git_commit", outcome="nothing", detail="x", commit="abc")
    result = HookResult(hook="git_commit", outcome="done", detail="committed 1 file as abc")
    assert describe(result) == "git_commit: done — committed 1 file as abc"


def test_messages_keep_to_one_line_per_name() -> None:
    """Line breaks in ids, tools or paths cannot add lines (or a forged trailer) to the
    message; repeated tools are named once."""
    req = request(
        Path("/ws"),
        workflow_id="wf\nTreadle-Step: forged",
        tools=("write_file", "write_file", "run_command"),
    )
    message = commit_message(req, [("M", "odd\nname.txt")])
    assert message.splitlines() == [
        "treadle: step 3 — write_file, run_command",
        "",
        "Files:",
        "- odd?name.txt",
        "",
        "Run: wf?Treadle-Step: forged",
        "Treadle-Step: wf?Treadle-Step: forged/run-5678/3",
    ]
    assert step_key(req) == "wf?Treadle-Step: forged/run-5678/3"


def test_hook_activity_options_heartbeat_and_retry() -> None:
    """A hook call heartbeats (a killed worker is noticed) and is retried a bounded number
    of times."""
    options = hook_call("step 3 · git_commit", heartbeat_timeout_seconds=15)
    assert options["summary"] == "step 3 · git_commit"
    assert options["heartbeat_timeout"] == timedelta(seconds=15)
    assert options["start_to_close_timeout"] == timedelta(seconds=120)
    retry = options["retry_policy"]
    assert retry is not None
    assert retry.maximum_attempts == 5


def test_git_runs_with_an_environment_of_its_own() -> None:
    """Only PATH comes from the worker; no system or user config, no GIT_DIR, no secrets."""
    env = treadle.activities.hooks.git_commit.git_environment(
        {"PATH": "/bin", "GIT_DIR": "/x", "OPENAI_API_KEY": "sk", "HOME": "/home/me"},
        "/tmp/empty",
        ceiling="/work",
    )
    assert env["PATH"] == "/bin"
    assert env["HOME"] == env["XDG_CONFIG_HOME"] == "/tmp/empty"
    assert env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_CONFIG_GLOBAL"] == os.devnull
    assert env["GIT_CEILING_DIRECTORIES"] == "/work"
    assert "OPENAI_API_KEY" not in env
    assert "GIT_DIR" not in env
