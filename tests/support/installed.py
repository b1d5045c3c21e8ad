"""A wheel of Treadle installed in a fresh virtualenv beside a user's app folder, as
tests/packaging builds it: where each part is, and the app's files as docs/embedding.md shows
them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Installed:
    """The wheel, the virtualenv it is installed in, and the app folder beside it."""

    wheel: Path
    venv: Path
    app: Path

    def bin(self, program: str) -> str:
        return str(self.venv / "bin" / program)

    @property
    def package(self) -> Path:
        """Where the installed ``treadle`` package is (site-packages/treadle)."""
        found = sorted(self.venv.glob("lib/python*/site-packages/treadle"))
        assert found, "treadle is not installed in the virtualenv"
        return found[0]


def app_files(markdown: str) -> dict[str, str]:
    """The app's files as docs/embedding.md shows them: each ``python`` block whose first line
    is ``# PATH``, and the ``json`` block (``script.json``)."""
    files: dict[str, str] = {}
    for kind, body in re.findall(r"```(python|json)\n(.*?)```", markdown, re.DOTALL):
        first = body.splitlines()[0]
        if kind == "json":
            files["script.json"] = body
        elif re.fullmatch(r"# [\w/]+\.py", first):
            files[first[2:]] = body
    return files
