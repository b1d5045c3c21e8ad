"""Path confinement: every path a tool touches must resolve inside the run's workspace.

A path is refused when it is absolute, when ``..`` leads out, or when a symbolic link anywhere
along it (the last component included, dangling or not) points out. The check is done on the
real path, the way the kernel would walk it, so ``a/../b`` is fine and ``link/..`` is judged by
where ``link`` really goes.

These functions touch the file system (``realpath`` reads links), so async callers run them in a
thread. The check and the later open are two steps: a process racing to swap a directory for a
link in between is outside what this module can prevent.
"""

from __future__ import annotations

import os
from pathlib import Path

from treadle.activities.errors import ToolError, WorkspaceEscapeError

__all__ = ["is_inside", "relative", "resolve", "workspace_root"]


def workspace_root(workspace: Path) -> Path:
    """The workspace's real path; the workspace itself may be reached through a symlink."""
    return Path(os.path.realpath(workspace))


def is_inside(path: Path | str, root: Path) -> bool:
    """Whether the real path ``path`` is ``root`` or below it (both already real)."""
    return os.path.commonpath([os.fspath(path), os.fspath(root)]) == os.fspath(root)


def resolve(workspace: Path, path: str) -> Path:
    """The real path of ``path`` (relative to the workspace), or ``WorkspaceEscapeError``."""
    if "\x00" in path:
        raise ToolError(f"path {path!r} contains a NUL character")
    if os.path.isabs(path):
        raise WorkspaceEscapeError(
            f"path {path!r} is absolute; use a path relative to the workspace"
        )
    root = workspace_root(workspace)
    joined = os.path.join(root, path) if path else os.fspath(root)
    real = os.path.realpath(joined)
    if is_inside(real, root):
        return Path(real)
    # Only the message depends on why: the decision above is made on the real path alone.
    if not is_inside(os.path.normpath(joined), root):
        raise WorkspaceEscapeError(f"path {path!r} uses '..' to lead outside the workspace")
    raise WorkspaceEscapeError(f"path {path!r} leads outside the workspace through a symbolic link")


def relative(workspace: Path, path: Path | str) -> str:
    """``path`` (a real path inside the workspace) as the model should see it: ``src/main.py``."""
    rel = os.path.relpath(path, workspace_root(workspace))
    return Path(rel).as_posix()
