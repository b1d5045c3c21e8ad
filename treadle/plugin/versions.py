"""Which build a worker is, and how it joins a Worker Deployment (docs/upgrades.md).

Every Treadle worker reports a build id: by default a hash of Treadle's sources and of the
libraries that decide how a workflow replays, so it changes when the code does. Given a
deployment name, the worker is a version of that Worker Deployment (``NAME.BUILD_ID``) and its
runs are **pinned**: a run started on build A finishes on A while new runs go to the current
version, B (``temporal worker deployment set-current-version``). A thread moves to B at its next
continue-as-new (``treadle.workflows.agent.parts.handover``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerConfig, WorkerDeploymentConfig

__all__ = [
    "BUILD_LIBRARIES",
    "PACKAGE",
    "Deployment",
    "DeploymentError",
    "build_id",
    "package_sources",
]

PACKAGE = Path(__file__).resolve().parents[1]
"""The installed ``treadle`` package (in a checkout: the repository's ``treadle/``)."""

BUILD_LIBRARIES = ("temporalio", "pydantic", "pydantic-core", "httpx")
"""Besides Treadle's own code, what decides how a workflow replays: in the build id."""


@functools.cache
def build_id() -> str:
    """The build id the worker reports (on every workflow task it completes): a hash of
    Treadle's own sources and the versions of the libraries that run them, so it changes when
    the code does. The SDK's default hashes the bytecode of every loaded module, which took
    0.13-0.29 s of a start-up of about a second; this reads Treadle's files in milliseconds."""
    digest = hashlib.sha256()
    for name in BUILD_LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            digest.update(f"{name}=={metadata.version(name)}\n".encode())
    for path in package_sources(PACKAGE):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return f"treadle-{digest.hexdigest()[:16]}"


def package_sources(package: Path) -> list[Path]:
    """The package's Python files, in a stable order. In a checkout ``treadle/workflows`` and
    ``treadle/activities`` are links to the repository's folders: walked through."""
    found = [
        Path(directory, name)
        for directory, _, names in os.walk(package, followlinks=True)
        if "__pycache__" not in Path(directory).parts
        for name in names
        if name.endswith(".py")
    ]
    return sorted(found, key=lambda path: path.relative_to(package).as_posix())


class DeploymentError(ValueError):
    """A deployment name or build id that Temporal would refuse (one line)."""


@dataclass(frozen=True)
class Deployment:
    """A worker's place among builds: the Worker Deployment it is a version of (none: it only
    reports its build id, and every worker of the task queue takes every run), and its build.

    ``build_id`` defaults to :func:`build_id`. Your own workflows on the same worker are pinned
    too unless their ``@workflow.defn`` says otherwise (``versioning_behavior=...``)."""

    name: str | None = None
    build_id: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None and (not self.name.strip() or "." in self.name):
            raise DeploymentError(f"deployment name {self.name!r} must be non-empty, without a '.'")
        if self.build_id is not None and not self.build_id.strip():
            raise DeploymentError("a build id must not be empty")

    @property
    def build(self) -> str:
        """The build id this worker reports."""
        return self.build_id or build_id()

    def configure(self, config: WorkerConfig) -> None:
        """Set the worker's build id, or its deployment version, unless the worker's own
        options already chose one (``build_id`` or ``deployment_config``)."""
        if config.get("deployment_config") is not None or config.get("build_id"):
            return
        if self.name is None:
            config["build_id"] = self.build
            return
        config["deployment_config"] = WorkerDeploymentConfig(
            version=WorkerDeploymentVersion(self.name, self.build),
            use_worker_versioning=True,
            # A run's history replays only on the code that wrote it: it stays on its build.
            default_versioning_behavior=VersioningBehavior.PINNED,
        )
