"""Where a run or thread works, resolved and checked before anything starts: what every face
that starts runs (the command line, the page, ``AgentClient.start`` from Python) needs before
it asks Temporal for anything."""

from __future__ import annotations

from pathlib import Path

from treadle import home
from treadle.client.errors import InvalidRequest

__all__ = ["make_workspace", "resolve_workspace"]


def resolve_workspace(given: str | None, workflow_id: str, *, create: bool) -> tuple[Path, bool]:
    """The workspace, and whether it must still be created.

    A workspace the user names must exist (or ``create``, from ``--create-workspace``): a typo
    must not start a run in a fresh empty directory. The default, ``workspaces/ID`` in the
    data directory (``treadle.home``), is Treadle's own to create; an id that would lead out of
    ``workspaces/`` is refused.
    """
    if given is None:
        root = home.workspaces()
        workspace = (root / workflow_id).resolve()
        if workspace.parent != root.resolve():
            raise InvalidRequest(
                f"--id {workflow_id!r} cannot name a directory in workspaces/; pass --workspace DIR"
            )
        create = True
    else:
        workspace = Path(given).expanduser().resolve()
    if workspace.exists() and not workspace.is_dir():
        raise InvalidRequest(f"workspace {workspace} is not a directory")
    if not workspace.exists() and not create:
        raise InvalidRequest(
            f"workspace {workspace} does not exist; create it, or pass --create-workspace"
        )
    return workspace, create and not workspace.exists()


def make_workspace(workspace: Path) -> None:
    """Create the workspace ``resolve_workspace`` said must still be created."""
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidRequest(f"cannot create workspace {workspace}: {exc.strerror}") from exc
