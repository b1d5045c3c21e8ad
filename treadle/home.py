"""Where Treadle keeps its state on this machine: one data directory.

``TREADLE_HOME`` names it; unset, it is ``.treadle`` in the current directory, so a project's
runs stay beside the project (as ``.git`` or ``.venv`` do) and an installed Treadle never writes
into its own package. What lives there, each overridable on its own:

    dev.sqlite, dev-server.log   the embedded dev server's runs and log (``temporal-dev.yaml``)
    store/                       the content store (``--store``, ``TREADLE_STORE``)
    workspaces/<id>              a run's workspace when ``run`` is given none (``--workspace``)

The worker and the command line agree on the store when they run in the same directory (or
share ``TREADLE_HOME`` / ``TREADLE_STORE``). Read when asked, never at import time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

__all__ = ["HOME_ENV", "default_dev_config", "default_store", "home", "workspaces"]

HOME_ENV = "TREADLE_HOME"


def home(environ: Mapping[str, str] | None = None) -> Path:
    """The data directory, absolute (not created here)."""
    environment = os.environ if environ is None else environ
    given = environment.get(HOME_ENV, "").strip()
    return Path(given).expanduser().absolute() if given else Path.cwd() / ".treadle"


def default_store(environ: Mapping[str, str] | None = None) -> Path:
    """The content store's directory when nothing names one."""
    return home(environ) / "store"


def workspaces(environ: Mapping[str, str] | None = None) -> Path:
    """Where a run's own workspace (``workspaces/<id>``) is made when it is given none."""
    return home(environ) / "workspaces"


def default_dev_config() -> Path:
    """The dev server's settings shipped with Treadle: the repository's ``temporal-dev.yaml``."""
    return Path(str(resources.files("treadle") / "temporal-dev.yaml"))
