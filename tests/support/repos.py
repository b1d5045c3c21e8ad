"""Real git repositories in temporary directories, driven by the ``git`` program."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """``git`` in ``repo`` under a throwaway identity; its standard output."""
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def committed_repo(repo: Path) -> None:
    """``repo`` made a git repository with one commit (a ``README.md``), for a hook to commit
    the steps after it."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")
    (repo / "README.md").write_text("hi\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "start")


def git_env(home: Path) -> dict[str, str]:
    """The tests' own git environment: nothing of the developer's configuration either."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        "GIT_AUTHOR_NAME": "Someone",
        "GIT_AUTHOR_EMAIL": "someone@example.com",
        "GIT_COMMITTER_NAME": "Someone",
        "GIT_COMMITTER_EMAIL": "someone@example.com",
    }


class Repo:
    """A real git repository in a temporary directory, driven by the ``git`` program."""

    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self.env = git_env(home)

    def git(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["git", "-c", "core.hooksPath=/dev/null", *args],
            cwd=cwd or self.path,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def write(self, name: str, text: str) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def commit_all(self, message: str) -> str:
        self.git("add", "--all")
        self.git("commit", "--quiet", "--message", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()

    def count(self) -> int:
        return int(self.git("rev-list", "--count", "HEAD").strip())

    def changed_in(self, commit: str) -> list[str]:
        """``<status>\\t<path>`` per file the commit changed."""
        out = self.git("show", "--no-renames", "--name-status", "--format=", commit)
        return sorted(out.splitlines())

    def message(self, commit: str) -> str:
        """The message exactly as stored."""
        return self.git("cat-file", "commit", commit).partition("\n\n")[2]

    def people(self, commit: str) -> str:
        return self.git("log", "-1", "--format=%an <%ae>|%cn <%ce>", commit).strip()

    def status(self) -> str:
        return self.git("status", "--porcelain", "--untracked-files=all")


def make_repo(path: Path, home: Path, *, commit: bool = True) -> Repo:
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo(path, home)
    repo.git("init", "--quiet", "--initial-branch=main")
    if commit:
        repo.write("README.md", "# project\n")
        repo.write("src/app.py", "print('v1')\n")
        repo.commit_all("initial")
    return repo
