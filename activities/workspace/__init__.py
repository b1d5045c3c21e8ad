"""Durable workspaces: a run's workspace after each step that changed it, as a manifest in the
content-addressed store (``snapshot``), manifests chained so any step can be rebuilt cheaply
(``manifest``), what a walk reads and leaves out (``scan``), what a command changed without a
walk (``watch``), and a check-out of any snapshot into a directory, writing only what differs
(``materialise``)."""

from treadle.activities.workspace.manifest import Manifest, ManifestError, Manifests
from treadle.activities.workspace.materialise import Checkout, materialise
from treadle.activities.workspace.snapshot import Snapshotter, WorkspaceActivities

__all__ = [
    "Checkout",
    "Manifest",
    "ManifestError",
    "Manifests",
    "Snapshotter",
    "WorkspaceActivities",
    "materialise",
]
