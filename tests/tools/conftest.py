"""Tools: the built-in ones, your own, run_command's confinement, the workspace boundary, the
post-tools hooks, and tools on a task queue of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.repos import Repo, make_repo


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The HOME of the tests' git: nothing of the developer's configuration."""
    path = tmp_path / "test-home"
    path.mkdir()
    return path


@pytest.fixture
def repo(tmp_path: Path, home: Path) -> Repo:
    """The workspace: a repository with one commit (README.md, src/app.py)."""
    return make_repo(tmp_path / "ws", home)
