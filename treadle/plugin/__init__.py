"""``TreadlePlugin``: Treadle's agent on a Temporal client and worker you already have
(docs/embedding.md).

    plugin.py     the plugin: what it gives a client, a worker and a replayer, and its arguments
    parts.py      what one worker runs: its workflows, its activities and their interceptor
    versions.py   the build id a worker reports, and the Worker Deployment it may be a version of
"""

from treadle.plugin.plugin import TreadlePlugin
from treadle.plugin.versions import Deployment, DeploymentError, build_id

__all__ = ["Deployment", "DeploymentError", "TreadlePlugin", "build_id"]
