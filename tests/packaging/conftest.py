"""Treadle as a user gets it: the wheel built from this checkout, installed into a fresh
virtualenv beside an app folder of the user's own (``workflows/``, ``activities/``, ``worker.py``,
``starter.py``: the app docs/embedding.md shows, taken from the page itself)."""

from __future__ import annotations

import subprocess
import sys
import venv
from collections.abc import Iterator

import pytest

from tests.support.installed import Installed, app_files
from tests.support.processes import ROOT

EMBEDDING = ROOT / "docs" / "embedding.md"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """Build the wheel (``pip wheel --no-deps``), make a fresh virtualenv, install the wheel
    into it (its dependencies through the machine's package index, as a user's pip does), and
    write the app folder. Slow: once per module."""
    root = tmp_path_factory.mktemp("packaging")
    dist = root / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = dist.glob("treadle-*.whl")
    environment = root / "venv"
    venv.create(environment, with_pip=True)
    pip = [str(environment / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    app = root / "my-app"
    for name, text in app_files(EMBEDDING.read_text()).items():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        (app / name).write_text(text)
    for package in ("activities", "workflows"):
        (app / package / "__init__.py").touch()
    yield Installed(wheel, environment, app)
